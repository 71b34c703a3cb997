#!/usr/bin/env bash
# pnfs-scale.sh - `bench --nfs 4.1 --pnfs` (docs/bench.md "pNFS") over 1, 2 and 3 data
# servers, and a data server's CPU per op against a plain NFSv3 gateway (issue 27,
# "Performance"). Used for "`bench --pnfs` over 1, 2 and 3 data servers" in
# docs/performance.md.
#
# One shared `fs` directory (`backend.shared = true`) for every gateway. For each N in
# DS_COUNTS: starts N data-server gateways (plain gateways: no [pnfs]) and one metadata
# server whose [pnfs] names them, fills the file set once (untimed), then for each round
# and workload runs `bench --pnfs --json` at the metadata server. Around every run it
# reads each gateway's CPU time (/proc/PID/stat utime+stime, all threads) and its own
# counters (`nfsgw_ops_total`, `nfsgw_bytes_{in,out}_total` from its stats endpoint):
# CPU µs per op of a data server = its CPU / the calls it served; of the metadata server
# and of all the gateways together = their CPU / the calls all data servers served. The
# metadata server's bytes must stay ~0 (it carries no file data).
# With V3=1 and N=1 the same job also runs as plain NFSv3 (`bench --nfs 3`) straight at
# the one data server (same process and config, same file set, bs, qd, connections):
# its CPU per op there is the "plain NFSv3 gateway" the pNFS data server is compared with.
#
#   tools/perf/pnfs-scale.sh
#   DS_COUNTS=1 ROUNDS=3 DURATION=10 tools/perf/pnfs-scale.sh      # the 5 % comparison
#   WORKLOADS="randread:4k" DS_COUNTS="1 3" tools/perf/pnfs-scale.sh
#
# Env (defaults): DS_COUNTS="1 2 3" ROUNDS=1 V3=1 (also run plain NFSv3 at N=1)
#   WORKLOADS="seqwrite:1m randread:4k randread:64k seqread:1m" (workload:bs)
#   FILES=12 FILE_SIZE=64m THREADS=2 CONNS=6 QD=8 DURATION=10 WARMUP=1
#   CORES=auto: each gateway's engine.cores: the metadata server on the machine's first
#     core, data server k on core k mod nproc (so on a 4-core machine one core each for
#     the metadata server and three data servers); or "all0": every reactor on core 0;
#     or a list "MDS DS1 DS2 DS3" of core ids
#   BENCH_CPUS= (bench --cpus; default: bench's own choice, every usable core)
#   IDLE=adaptive (engine.idle of every gateway) PORT=22150 (metadata server; data
#   server k on PORT+k, stats endpoints on PORT+100+k)
#   STRIPE=0 (1: the metadata server stripes every file over all N data servers,
#     `stripe_width = N` for N > 1, in units of STRIPE_UNIT=1048576; bench takes striped
#     layouts: README "Scaling out with pNFS", "Striping")
#   GATEWAY=<repo>/target/release/gateway BENCH=<repo>/target/release/bench
#   BASE=/var/tmp/perf-pnfs-scale OUT=$BASE/results-<stamp> (results.md, results.tsv,
#   env.txt, json/, the gateways' configs and logs); the data directory is removed at the end.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DS_COUNTS=${DS_COUNTS:-"1 2 3"}; ROUNDS=${ROUNDS:-1}; V3=${V3:-1}
WORKLOADS=${WORKLOADS:-"seqwrite:1m randread:4k randread:64k seqread:1m"}
FILES=${FILES:-12}; FILE_SIZE=${FILE_SIZE:-64m}; THREADS=${THREADS:-2}; CONNS=${CONNS:-6}
QD=${QD:-8}; DURATION=${DURATION:-10}; WARMUP=${WARMUP:-1}
CORES=${CORES:-auto}; BENCH_CPUS=${BENCH_CPUS:-}; IDLE=${IDLE:-adaptive}; PORT=${PORT:-22150}
STRIPE=${STRIPE:-0}; STRIPE_UNIT=${STRIPE_UNIT:-1048576}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}; BENCH=${BENCH:-$ROOT/target/release/bench}
BASE=${BASE:-/var/tmp/perf-pnfs-scale}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$BASE/results-$STAMP}
WORK=$BASE/work-$STAMP
DATA=$WORK/data
NCPU=$(nproc)
mkdir -p "$OUT/json" "$DATA"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

[ -x "$GATEWAY" ] || { echo "no gateway at $GATEWAY (cargo build --release -p gateway)" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "no bench at $BENCH (cargo build --release -p bench)" >&2; exit 1; }

# core_of K: engine.cores of gateway K (0 = the metadata server, 1.. = data servers).
core_of() {
  case $CORES in
    auto) echo $(($1 % NCPU));;
    all0) echo 0;;
    *) local a; read -r -a a <<<"$CORES"; echo "${a[$1]:-${a[-1]}}";;
  esac
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -srm); $NCPU CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "gateway: $GATEWAY (sha256 $(sha256sum "$GATEWAY" | cut -c1-12)); bench: $BENCH"
  echo "knobs: DS_COUNTS=$DS_COUNTS ROUNDS=$ROUNDS V3=$V3 WORKLOADS=$WORKLOADS FILES=$FILES FILE_SIZE=$FILE_SIZE THREADS=$THREADS CONNS=$CONNS QD=$QD DURATION=$DURATION WARMUP=$WARMUP IDLE=$IDLE STRIPE=$STRIPE STRIPE_UNIT=$STRIPE_UNIT"
  echo "cores: metadata server $(core_of 0); data servers $(for k in 1 2 3; do printf '%s ' "$(core_of $k)"; done)(CORES=$CORES); bench --cpus ${BENCH_CPUS:-all}"
  echo "directory: $DATA on $(stat -f -c %T "$DATA")"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2

declare -A PID=()
stop_all() {
  local k
  for k in "${!PID[@]}"; do kill -TERM "${PID[$k]}" 2>/dev/null; done
  for k in "${!PID[@]}"; do
    for _ in $(seq 1 50); do kill -0 "${PID[$k]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${PID[$k]}" 2>/dev/null; wait "${PID[$k]}" 2>/dev/null
  done
  PID=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

# start_gw K N: gateway K (0 = the metadata server naming data servers 1..N).
start_gw() {
  local k=$1 n=$2 name=ds$1 pnfs="" i
  [ "$k" = 0 ] && name=mds
  if [ "$k" = 0 ]; then
    pnfs=$'[pnfs]\nenabled = true'
    if [ "$STRIPE" = 1 ] && [ "$n" -gt 1 ]; then
      pnfs+=$'\nstripe_width = '$n$'\nstripe_unit = '$STRIPE_UNIT
    fi
    for i in $(seq 1 "$n"); do pnfs+=$'\n[[pnfs.data_servers]]\naddress = "127.0.0.1:'$((PORT + i))'"'; done
  fi
  mkdir -p "$WORK/state-$name"
  cat > "$OUT/$name.n$n.toml" <<TOML
[engine]
cores = [$(core_of "$k")]
idle = "$IDLE"
hugepages = "off"
[tcp]
listen = "127.0.0.1:$((PORT + k))"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$DATA"
shared = true
[state]
dir = "$WORK/state-$name"
[stats]
listen = "127.0.0.1:$((PORT + 100 + k))"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
$pnfs
TOML
  "$GATEWAY" --config "$OUT/$name.n$n.toml" > "$OUT/$name.n$n.log" 2>&1 < /dev/null &
  PID[$k]=$!
  for _ in $(seq 1 300); do port_open $((PORT + k)) && break; kill -0 "${PID[$k]}" 2>/dev/null || break; sleep 0.1; done
  port_open $((PORT + k)) || { log "$name did not start:"; tail -20 "$OUT/$name.n$n.log" >&2; return 1; }
}

# snap N: one line per gateway 0..N: "k cpu_ticks ops bytes_in bytes_out".
snap() {
  local k
  for k in $(seq 0 "$1"); do
    python3 - "$k" "${PID[$k]}" $((PORT + 100 + k)) <<'PY'
import sys, urllib.request
k, pid, port = sys.argv[1:4]
f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
ticks = int(f[11]) + int(f[12])   # utime + stime (fields 14, 15), every thread
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
tot = {"nfsgw_ops_total": 0, "nfsgw_bytes_in_total": 0, "nfsgw_bytes_out_total": 0}
for line in text.splitlines():
    name = line.split("{", 1)[0].split(" ", 1)[0]
    if name in tot:
        tot[name] += int(float(line.rsplit(" ", 1)[1]))
print(k, ticks, tot["nfsgw_ops_total"], tot["nfsgw_bytes_in_total"], tot["nfsgw_bytes_out_total"])
PY
  done
}

RESULTS=$OUT/results.tsv
printf "n\tmode\tworkload\tbs\tround\tops_per_s\tmib_per_s\tp99_us\terrors\trc\tload1\tds_ops\tmds_bytes\tcpu_us_op_ds\tcpu_us_op_mds\tcpu_us_op_all\tper_ds\n" > "$RESULTS"

# one_run N MODE WL BS R: MODE pnfs (at the metadata server) or v3 (at data server 1).
one_run() {
  local n=$1 mode=$2 wl=$3 bs=$4 r=$5 j=$OUT/json/n$1.$2.$3-$4.r$5.json rc args
  if [ "$mode" = pnfs ]; then args=(--target "tcp://127.0.0.1:$PORT" --nfs 4.1 --pnfs)
  else args=(--target "tcp://127.0.0.1:$((PORT + 1))" --nfs 3); fi
  [ -n "$BENCH_CPUS" ] && args+=(--cpus "$BENCH_CPUS")
  snap "$n" > "$j.before"
  timeout -k 10 $((DURATION * 4 + 300)) "$BENCH" "${args[@]}" --json --workload "$wl" --bs "$bs" \
    --files "$FILES" --file pnf.dat --file-size "$FILE_SIZE" --threads "$THREADS" --conns "$CONNS" \
    --qd "$QD" --duration "$DURATION" --warmup "$WARMUP" > "$j" 2> "$j.stderr"
  rc=$?
  snap "$n" > "$j.after"
  python3 - "$j" "$n" "$mode" "$wl" "$bs" "$r" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" >> "$RESULTS" <<'PY'
import json, os, sys
j, n, mode, wl, bs, r, rc, load = sys.argv[1:9]
tck = os.sysconf("SC_CLK_TCK")
def rd(p): return {int(l.split()[0]): [int(x) for x in l.split()[1:]] for l in open(p)}
a, b = rd(j + ".before"), rd(j + ".after")
d = {k: [y - x for x, y in zip(a[k], b[k])] for k in b}
us = lambda ticks: ticks * 1e6 / tck
ds = [k for k in d if k > 0] if mode == "pnfs" else [1]
ds_ops = sum(d[k][1] for k in ds)
per = lambda c, o: us(c) / o if o else float("nan")
try:
    t = json.load(open(j))["total"]
    rate, mib, p99, err = t["ops_per_s"], t["mib_per_s"], t["latency_us"]["p99"], t["errors"]
except Exception:
    rate = mib = p99 = err = float("nan")
mds_bytes = d[0][2] + d[0][3] if mode == "pnfs" else 0
# what each data server did: ops, MiB in+out, CPU µs per op (its CPU / its own calls)
per_ds = ";".join(f"ds{k}:{d[k][1]}:{(d[k][2] + d[k][3]) / 2**20:.0f}:{per(d[k][0], d[k][1]):.1f}" for k in sorted(d) if k > 0)
mds_cpu = per(d[0][0], ds_ops) if mode == "pnfs" else float("nan")
all_cpu = per(sum(d[k][0] for k in (d if mode == "pnfs" else ds)), ds_ops)
print(f"{n}\t{mode}\t{wl}\t{bs}\t{r}\t{rate:.0f}\t{mib:.1f}\t{p99:.0f}\t{err}\t{rc}\t{load}\t{ds_ops}\t{mds_bytes}\t"
      f"{per(sum(d[k][0] for k in ds), ds_ops):.2f}\t{mds_cpu:.2f}\t{all_cpu:.2f}\t{per_ds}")
PY
  log "  N=$n $mode $wl $bs r$r: rc=$rc $(tail -1 "$RESULTS" | awk -F'\t' '{printf "%s ops/s %s MiB/s, DS %s µs/op, MDS bytes %s", $6, $7, $14, $13}')"
  [ "$rc" = 0 ] || sed 's/^/      bench: /' "$j.stderr" | tail -5 | tee -a "$OUT/log.txt" >&2
}

for n in $DS_COUNTS; do
  stop_all
  ok=1
  for k in $(seq 1 "$n") 0; do start_gw "$k" "$n" || ok=0; done
  [ "$ok" = 1 ] || { log "N=$n: a gateway did not start, skipped"; continue; }
  log "N=$n: metadata server pid ${PID[0]} core $(core_of 0); data servers $(for k in $(seq 1 "$n"); do printf 'pid %s core %s; ' "${PID[$k]}" "$(core_of "$k")"; done)"
  # Fill the file set (untimed): a read run fills files shorter than FILE_SIZE.
  "$BENCH" --target "tcp://127.0.0.1:$PORT" --nfs 4.1 --pnfs --workload seqread --bs 1m \
    --files "$FILES" --file pnf.dat --file-size "$FILE_SIZE" --ops "$FILES" > "$OUT/fill.n$n.txt" 2>&1 \
    || { log "N=$n: fill failed"; tail -5 "$OUT/fill.n$n.txt" >&2; continue; }
  for r in $(seq 1 "$ROUNDS"); do
    for w in $WORKLOADS; do
      modes=pnfs
      if [ "$V3" = 1 ] && [ "$n" = 1 ]; then modes="pnfs v3"; [ $((r % 2)) = 0 ] && modes="v3 pnfs"; fi
      for m in $modes; do one_run "$n" "$m" "${w%%:*}" "${w#*:}" "$r"; done
    done
  done
done
stop_all

python3 - "$RESULTS" "$OUT" "$ROUNDS" <<'PY'
import csv, math, os, statistics as st, sys
res, out, rounds = sys.argv[1:4]
rows = list(csv.DictReader(open(res), delimiter="\t"))
def f(x):
    try: return float(x)
    except ValueError: return math.nan
def ok(r): return r["rc"] == "0" and r["errors"] in ("0", "0.0")
def med(key, sel):
    xs = [f(r[key]) for r in rows if sel(r) and ok(r) and not math.isnan(f(r[key]))]
    return st.median(xs) if xs else math.nan
def fmt(x, d=0): return "—" if math.isnan(x) else f"{x:,.{d}f}"
jobs = list(dict.fromkeys((r["workload"], r["bs"]) for r in rows))
ns = sorted({r["n"] for r in rows}, key=int)
L = [f"Medians of {rounds} round(s). `bench --nfs 4.1 --pnfs` at the metadata server; CPU µs per op = the "
     "processes' utime+stime over the run / the calls the data servers counted (`nfsgw_ops_total`).\n",
     "| workload | N data servers | ops/s | MiB/s | p99 µs | CPU µs/op, data servers | CPU µs/op, metadata server | CPU µs/op, all gateways | metadata server bytes | per data server, last round (calls, MiB in+out, CPU µs/op) |",
     "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
for wl, bs in jobs:
    for n in ns:
        sel = lambda r: (r["workload"], r["bs"], r["n"], r["mode"]) == (wl, bs, n, "pnfs")
        got = [r for r in rows if sel(r)]
        if not got: continue
        per = got[-1]["per_ds"].replace(";", "; ").replace(":", " ")
        L.append(f"| {wl} {bs} | {n} | {fmt(med('ops_per_s', sel))} | {fmt(med('mib_per_s', sel), 1)} | {fmt(med('p99_us', sel))} | "
                 f"{fmt(med('cpu_us_op_ds', sel), 1)} | {fmt(med('cpu_us_op_mds', sel), 1)} | {fmt(med('cpu_us_op_all', sel), 1)} | "
                 f"{fmt(max(f(r['mds_bytes']) for r in got))} | {per} |")
v3 = [r for r in rows if r["mode"] == "v3"]
if v3:
    L += ["\nOne data server through `--pnfs` against the same job as plain NFSv3 (`bench --nfs 3`) at the same gateway:\n",
          "| workload | pNFS ops/s | NFSv3 ops/s | pNFS DS CPU µs/op | NFSv3 CPU µs/op | pNFS / NFSv3 |",
          "|---|---:|---:|---:|---:|---:|"]
    for wl, bs in jobs:
        p = lambda r: (r["workload"], r["bs"], r["n"], r["mode"]) == (wl, bs, "1", "pnfs")
        q = lambda r: (r["workload"], r["bs"], r["n"], r["mode"]) == (wl, bs, "1", "v3")
        a, b = med("cpu_us_op_ds", p), med("cpu_us_op_ds", q)
        L.append(f"| {wl} {bs} | {fmt(med('ops_per_s', p))} | {fmt(med('ops_per_s', q))} | {fmt(a, 1)} | {fmt(b, 1)} | "
                 f"{fmt(a / b if b else math.nan, 3)} |")
bad = [r for r in rows if not ok(r)]
if bad:
    L.append("\nRuns with errors (n, mode, workload, round, rc): " + "; ".join(f"{r['n']} {r['mode']} {r['workload']} {r['bs']} r{r['round']} rc={r['rc']}" for r in bad))
loads = [f(r["load1"]) for r in rows]
if loads:
    L.append(f"\n1-min load average after each run: {min(loads):.2f}–{max(loads):.2f} ({os.cpu_count()} CPUs).")
md = "\n".join(L) + "\n"
open(os.path.join(out, "results.md"), "w").write(md)
print("\n" + md)
PY
echo "results: $OUT (results.tsv, results.md, env.txt, json/)"
