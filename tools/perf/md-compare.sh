#!/usr/bin/env bash
# md-compare.sh - bench's metadata phases (`bench md`, docs/bench.md "Metadata runs")
# against the gateway and nfs-ganesha 4.3 (FSAL_VFS) on ONE directory, in one run.
#
# Starts the gateway (fs backend, root = DIR) and ganesha (tools/perf/ganesha.sh, NFSv3
# and NFSv4.1, Path = the same DIR; v4 clients reach it at the pseudo path /perf), then
# for every round, NFS version (VERSIONS) and tree (TREES) runs `bench md --verify --json`
# against each server in turn (the order alternates by round, so both see the same
# background). Every bench run makes its own top directory in DIR and removes it.
# Prints per phase the median ops/s and p99 of each server, their ratios and whether the
# metadata goal holds (readdir, create, stat, remove: rate >= 3x ganesha, p99 no higher);
# also each server's CPU per op over a whole bench run (all phases, /proc/PID/stat).
# Writes results.tsv, results.md, the JSON of every run and env.txt under $OUT.
#
# Env (defaults): ROUNDS=2 CONNS=4 QD=8 FILES=1000 (per connection) WRITE_SIZE=3901
#   VERSIONS="3 4.1" TREES="easy hard" TARGETS="gateway ganesha"
#   GATEWAY=<repo>/target/release/gateway BENCH=<repo>/target/release/bench
#   GW_PORT=20051 GW_CORES=0 GW_WORKERS=32 GW_IDLE=adaptive GANESHA_PORT=20492 (MOUNT +1)
#   GW_FLUSH= (backend.fs.flush; unset = the gateway's default, "auto")
#   BASE=/var/tmp/perf-md-compare (both servers' directory is under it: put it on the
#   file system to compare, e.g. a loop-mounted journaled ext4 or XFS)
# Needs root (ganesha, rpcbind). Only 127.0.0.1 is used.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-2}; CONNS=${CONNS:-4}; QD=${QD:-8}; FILES=${FILES:-1000}
WRITE_SIZE=${WRITE_SIZE:-3901}
VERSIONS=${VERSIONS:-"3 4.1"}; TREES=${TREES:-"easy hard"}; TARGETS=${TARGETS:-"gateway ganesha"}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}; BENCH=${BENCH:-$ROOT/target/release/bench}
GW_PORT=${GW_PORT:-20051}; GW_CORES=${GW_CORES:-0}; GW_WORKERS=${GW_WORKERS:-32}
GW_IDLE=${GW_IDLE:-adaptive}; GANESHA_PORT=${GANESHA_PORT:-20492}
GW_FLUSH=${GW_FLUSH:-}
FLUSH_TOML=""; [ -n "$GW_FLUSH" ] && FLUSH_TOML=$(printf '[backend.fs]\nflush = "%s"' "$GW_FLUSH")
BASE=${BASE:-/var/tmp/perf-md-compare}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$BASE/results-$STAMP}
WORK=$BASE/work-$STAMP
DIR=$WORK/export
mkdir -p "$OUT/json" "$DIR" "$WORK/state"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

[ "$(id -u)" = 0 ] || { echo "md-compare.sh needs root" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "no bench at $BENCH (cargo build --release -p bench)" >&2; exit 1; }

declare -A PID=() ARGS=()
GW_PID=""; GANESHA_UP=0
cleanup() {
  if [ -n "$GW_PID" ] && kill -0 "$GW_PID" 2>/dev/null; then
    kill -TERM "$GW_PID"; for _ in $(seq 1 50); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null
  fi
  GW_PID=""
  if [ "$GANESHA_UP" = 1 ]; then "$HERE/ganesha.sh" stop "$GANESHA_PORT" 2>&1 | tee -a "$OUT/log.txt" >&2; GANESHA_UP=0; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -srm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "ganesha: $(ganesha.nfsd -v 2>/dev/null | grep -m1 -o 'V[0-9.]*' || echo '?') FSAL_VFS"
  echo "gateway: $GATEWAY (sha256 $(sha256sum "$GATEWAY" 2>/dev/null | cut -c1-12)); bench: $BENCH"
  echo "knobs: ROUNDS=$ROUNDS CONNS=$CONNS QD=$QD FILES=$FILES WRITE_SIZE=$WRITE_SIZE VERSIONS=$VERSIONS TREES=$TREES"
  echo "directory: $DIR on $(stat -f -c %T "$DIR") ($(findmnt -n -o SOURCE,FSTYPE,OPTIONS -T "$DIR" 2>/dev/null)); GW_FLUSH=${GW_FLUSH:-default}"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2

start_gateway() {
  [ -x "$GATEWAY" ] || { log "skip gateway: $GATEWAY not found"; return 1; }
  cat > "$OUT/gateway.toml" <<TOML
[engine]
cores = [$GW_CORES]
idle = "$GW_IDLE"
[tcp]
listen = "127.0.0.1:$GW_PORT"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$DIR"
workers = $GW_WORKERS
$FLUSH_TOML
[state]
dir = "$WORK/state"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML
  "$GATEWAY" --config "$OUT/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
  GW_PID=$!; PID[gateway]=$!
  for _ in $(seq 1 300); do port_open "$GW_PORT" && break; kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
  port_open "$GW_PORT" || { log "gateway did not start:"; tail -20 "$OUT/gateway.log" >&2; return 1; }
  ARGS[gateway.3]="--target tcp://127.0.0.1:$GW_PORT --export /"
  ARGS[gateway.4.1]="--target tcp://127.0.0.1:$GW_PORT --nfs 4.1 --export /"
  log "gateway pid $GW_PID on $GW_PORT, root $DIR"
}
start_ganesha() {
  GANESHA_PROTOCOLS="3, 4" "$HERE/ganesha.sh" start "$DIR" "$GANESHA_PORT" > /dev/null 2> >(tee -a "$OUT/log.txt" >&2) || { log "skip ganesha"; return 1; }
  GANESHA_UP=1
  PID[ganesha]=$(cat "$(cat "${TMPDIR:-/tmp}/perf-ganesha.$GANESHA_PORT")/ganesha.pid")
  ARGS[ganesha.3]="--target tcp://127.0.0.1:$GANESHA_PORT --export $DIR --mount-port $((GANESHA_PORT + 1))"
  ARGS[ganesha.4.1]="--target tcp://127.0.0.1:$GANESHA_PORT --nfs 4.1 --export /perf"
}
ACTIVE=""
for t in $TARGETS; do
  case $t in
    gateway) start_gateway && ACTIVE="$ACTIVE gateway";;
    ganesha) start_ganesha && ACTIVE="$ACTIVE ganesha";;
    *) log "unknown target $t";;
  esac
done
[ -n "$ACTIVE" ] || exit 1

RESULTS=$OUT/results.tsv
printf "target\tnfs\ttree\tround\tphase\tops_per_s\tp50_us\tp99_us\terrors\tverify_failures\trc\tload1\tcpu_us_op\n" > "$RESULTS"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo nan; }
md_run() {  # target nfs tree round
  local t=$1 v=$2 tree=$3 r=$4 j=$OUT/json/$1.v$2.$3.r$4.json c0 c1 rc
  c0=$(cpu_ticks "${PID[$t]}")
  # shellcheck disable=SC2086  # ARGS holds several flags
  timeout -k 10 900 "$BENCH" md ${ARGS[$t.$v]} --tree "$tree" --conns "$CONNS" --qd "$QD" \
    --files-per-conn "$FILES" --write-size "$WRITE_SIZE" --verify --json > "$j" 2> "$j.stderr"
  rc=$?
  c1=$(cpu_ticks "${PID[$t]}")
  python3 - "$j" "$t" "$v" "$tree" "$r" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" "$c0" "$c1" >> "$RESULTS" <<'PY'
import json, os, sys
j, t, v, tree, r, rc, load, c0, c1 = sys.argv[1:10]
try:
    phases = json.load(open(j))["phases"]
except Exception:
    print(f"{t}\t{v}\t{tree}\t{r}\tall\tnan\tnan\tnan\tnan\tnan\t{rc}\t{load}\tnan"); sys.exit()
ops = sum(p["ops"] for p in phases.values())
try:
    cpu = (float(c1) - float(c0)) * 1e6 / os.sysconf("SC_CLK_TCK") / ops
except (ValueError, ZeroDivisionError):
    cpu = float("nan")
for name, p in phases.items():
    lat = p["latency_us"]
    print(f"{t}\t{v}\t{tree}\t{r}\t{name}\t{p['ops_per_s']:.0f}\t{lat['p50']:.0f}\t{lat['p99']:.0f}\t{p['errors']}\t{p.get('verify_failures', 0)}\t{rc}\t{load}\t{cpu:.2f}")
PY
  log "  $t v$v $tree r$r: rc=$rc $(awk -F'\t' -v t="$t" -v v="$v" -v tr="$tree" -v r="$r" '$1==t && $2==v && $3==tr && $4==r {printf "%s %s/s; ", $5, $6}' "$RESULTS")"
  [ "$rc" = 0 ] || sed 's/^/      bench: /' "$j.stderr" | head -5 | tee -a "$OUT/log.txt" >&2
}

for r in $(seq 1 "$ROUNDS"); do
  order=$ACTIVE
  [ $((r % 2)) = 0 ] && order=$(echo $ACTIVE | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $VERSIONS; do
    for tree in $TREES; do
      for t in $order; do md_run "$t" "$v" "$tree" "$r"; done
    done
  done
done
cleanup
trap - EXIT

python3 - "$RESULTS" "$OUT" "$ROUNDS" "$CONNS" "$QD" "$FILES" <<'PY'
import csv, math, os, statistics as st, sys
res, out, rounds, conns, qd, files = sys.argv[1:7]
rows = [r for r in csv.DictReader(open(res), delimiter="\t") if r["phase"] != "all"]
def f(x):
    try: return float(x)
    except ValueError: return math.nan
def ok(r): return r["rc"] == "0" and r["errors"] == "0" and r["verify_failures"] == "0"
def med(key, t, v, tree, ph):
    xs = [f(r[key]) for r in rows if (r["target"], r["nfs"], r["tree"], r["phase"]) == (t, v, tree, ph) and ok(r)]
    xs = [x for x in xs if not math.isnan(x)]
    return st.median(xs) if xs else math.nan
def fmt(x, d=0): return "—" if math.isnan(x) else f"{x:,.{d}f}"
def ratio(a, b): return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan
keys = list(dict.fromkeys((r["nfs"], r["tree"], r["phase"]) for r in rows))
goal = {"readdir", "create", "stat", "remove"}
L = [f"Medians of {rounds} interleaved rounds; bench md --verify, {conns} connections x QD{qd}, {files} files per connection, NFS over TCP on 127.0.0.1; gateway (fs backend) and ganesha on one directory.\n",
     "| NFS | tree | phase | gateway ops/s | ganesha ops/s | × | gateway p99 µs | ganesha p99 µs | p99 × | goal (≥3×, p99 ≤1×) |",
     "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
for v, tree, ph in keys:
    g, n = med("ops_per_s", "gateway", v, tree, ph), med("ops_per_s", "ganesha", v, tree, ph)
    gp, np_ = med("p99_us", "gateway", v, tree, ph), med("p99_us", "ganesha", v, tree, ph)
    rr, rp = ratio(g, n), ratio(gp, np_)
    met = ""
    if ph in goal and not math.isnan(rr):
        met = "yes" if rr >= 3 and rp <= 1 else f"no ({'rate' if rr < 3 else ''}{' ' if rr < 3 and rp > 1 else ''}{'p99' if rp > 1 else ''})"
    L.append(f"| {v} | {tree} | {ph} | {fmt(g)} | {fmt(n)} | {fmt(rr, 2)}× | {fmt(gp)} | {fmt(np_)} | {fmt(rp, 2)}× | {met} |")
L.append("\nServer CPU µs per op over a whole bench run (all phases), medians:\n")
for v, tree in dict.fromkeys((k[0], k[1]) for k in keys):
    c = {t: st.median([f(r["cpu_us_op"]) for r in rows if (r["target"], r["nfs"], r["tree"], r["phase"]) == (t, v, tree, "mkdir") and ok(r)] or [math.nan]) for t in ("gateway", "ganesha")}
    L.append(f"- v{v} {tree}: gateway {fmt(c['gateway'], 1)}, ganesha {fmt(c['ganesha'], 1)} ({fmt(ratio(c['gateway'], c['ganesha']), 2)}×)")
bad = sorted({(r["target"], r["nfs"], r["tree"], r["round"], r["rc"], r["errors"], r["verify_failures"]) for r in csv.DictReader(open(res), delimiter="\t") if not ok(r)})
if bad:
    L.append("\nRuns with errors (target, nfs, tree, round, rc, errors, verify failures): " + "; ".join(" ".join(b) for b in bad))
loads = [f(r["load1"]) for r in rows]
L.append(f"\n1-min load average after each run: {min(loads):.2f}–{max(loads):.2f} (2 CPUs).")
md = "\n".join(L) + "\n"
open(os.path.join(out, "results.md"), "w").write(md)
print("\n" + md)
PY
echo "results: $OUT (results.tsv, results.md, env.txt, json/)"
