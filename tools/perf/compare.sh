#!/usr/bin/env bash
# compare.sh - the gateway beside nfs-ganesha, one client, one run.
#
# Starts target/release/gateway (fs backend on a temp dir, one reactor on core 0) and
# nfs-ganesha 4.3 / FSAL_VFS (tools/perf/ganesha.sh) on 127.0.0.1, then runs the same
# fio jobs (fio's libnfs "nfs" ioengine, NFSv3, tools/perf/build-fio-libnfs.sh) against
# each, in interleaved rounds so that both see the same background noise:
#   rr4k_qd1   4 KiB random read,  iodepth 1
#   rr4k_qd32  4 KiB random read,  iodepth 32
#   seqrd_1m   1 MiB sequential read,  iodepth $SEQ_QD
#   seqwr_1m   1 MiB sequential write, iodepth $SEQ_QD (fresh file per run)
# Reads use a $SIZE file written through each server before the rounds (PRECREATE=server;
# falls back to copying it into the export directory) and then read once from disk so
# it sits in the page cache. Prints medians, gateway/ganesha ratios and the targets, and
# writes results.tsv, fio JSON and a markdown fragment (results.md) under $OUT.
#
# Env knobs (defaults):
#   ROUNDS=3 RUNTIME=10 (s per fio run) RAMP=1 (s) SIZE=1g SEQ_QD=4
#   TESTS="rr4k_qd1 rr4k_qd32 seqrd_1m seqwr_1m"  TARGETS="gateway ganesha"
#   GATEWAY=<repo>/target/release/gateway  GW_PORT=20049  GW_IDLE=adaptive (busy|adaptive)
#   GW_CORES="0"  GW_HUGEPAGES=auto  GW_WORKERS=4  GW_LOG=  (RUST_LOG-style value, optional)
#   GW_CACHE_MIB=256 (the gateway's reactor-side page cache, cache.size_mib)
#   GANESHA_PORT=20490 (MOUNT on +1)  PRECREATE=server (server|disk)
#   WARM_PASS=1 (one sequential 64 KiB read pass through each server before the rounds)
#   FIO=/opt/fio-nfs/bin/fio  FIO_CPUS= (taskset list for fio; empty = not pinned)
#   BASE=/var/tmp/perf-compare (data + runs)  KEEP_DATA=0
# Needs root (ganesha, rpcbind, libnfs privileged source ports). Only 127.0.0.1 is used.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-1}
SIZE=${SIZE:-1g}
SEQ_QD=${SEQ_QD:-4}
TESTS=${TESTS:-"rr4k_qd1 rr4k_qd32 seqrd_1m seqwr_1m"}
TARGETS=${TARGETS:-"gateway ganesha"}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
GW_PORT=${GW_PORT:-20049}
GW_IDLE=${GW_IDLE:-adaptive}
GW_CORES=${GW_CORES:-0}
GW_HUGEPAGES=${GW_HUGEPAGES:-auto}
GW_WORKERS=${GW_WORKERS:-4}
GW_CACHE_MIB=${GW_CACHE_MIB:-256}
GW_LOG=${GW_LOG:-}
GANESHA_PORT=${GANESHA_PORT:-20490}
PRECREATE=${PRECREATE:-server}
FIO=${FIO:-/opt/fio-nfs/bin/fio}
FIO_CPUS=${FIO_CPUS:-}
BASE=${BASE:-/var/tmp/perf-compare}
KEEP_DATA=${KEEP_DATA:-0}

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$BASE/results-$STAMP}
WORK=$BASE/work-$STAMP
mkdir -p "$OUT/json" "$WORK"
RESULTS=$OUT/results.tsv
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }

GW_PID=""
GANESHA_UP=0
cleanup() {
  if [ -n "$GW_PID" ] && kill -0 "$GW_PID" 2>/dev/null; then
    log "stopping gateway (pid $GW_PID)"
    kill -TERM "$GW_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$GW_PID" 2>/dev/null && { log "gateway ignored TERM; KILL"; kill -KILL "$GW_PID" 2>/dev/null; }
    wait "$GW_PID" 2>/dev/null
  fi
  GW_PID=""
  if [ "$GANESHA_UP" = 1 ]; then "$HERE/ganesha.sh" stop "$GANESHA_PORT" 2>&1 | tee -a "$OUT/log.txt" >&2; GANESHA_UP=0; fi
  if [ "$KEEP_DATA" != 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
size_bytes() { python3 -c "import sys;s=sys.argv[1].lower();m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
SIZE_B=$(size_bytes "$SIZE")

[ "$(id -u)" = 0 ] || { echo "compare.sh needs root" >&2; exit 1; }
"$FIO" --enghelp=nfs >/dev/null 2>&1 || { echo "no fio with the nfs ioengine at $FIO; run tools/perf/build-fio-libnfs.sh" >&2; exit 1; }
FIO_PIN=()
[ -n "$FIO_CPUS" ] && FIO_PIN=(taskset -c "$FIO_CPUS")

# ---- environment record
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -srm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory: $(free -g | awk '/Mem:/{print $2" GiB"}')"
  echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "fio: $("$FIO" --version) (libnfs $(dpkg-query -W -f='${Version}' libnfs13 2>/dev/null))"
  echo "ganesha: $(ganesha.nfsd -v 2>/dev/null | grep -m1 -o 'V[0-9.]*' || echo '?') FSAL_VFS"
  [ -x "$GATEWAY" ] && echo "gateway: $GATEWAY ($(stat -c '%y' "$GATEWAY" | cut -d. -f1), sha256 $(sha256sum "$GATEWAY" | cut -c1-12)); git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
  echo "knobs: ROUNDS=$ROUNDS RUNTIME=$RUNTIME RAMP=$RAMP SIZE=$SIZE SEQ_QD=$SEQ_QD GW_IDLE=$GW_IDLE GW_CORES=$GW_CORES GW_HUGEPAGES=$GW_HUGEPAGES PRECREATE=$PRECREATE FIO_CPUS=${FIO_CPUS:-unpinned}"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2

declare -A URL=() DIR=()

# ---- servers
start_gateway() {
  [ -x "$GATEWAY" ] || { log "skip gateway: $GATEWAY not found"; return 1; }
  port_open "$GW_PORT" && { log "skip gateway: port $GW_PORT already in use"; return 1; }
  DIR[gateway]=$WORK/gw-data
  mkdir -p "$WORK/gw-data" "$WORK/gw-state"
  local cores; cores=$(echo "$GW_CORES" | sed 's/[ ,]\+/, /g')
  cat > "$WORK/gateway.toml" <<TOML
[engine]
cores = [$cores]
idle = "$GW_IDLE"
hugepages = "$GW_HUGEPAGES"

[tcp]
listen = "127.0.0.1:$GW_PORT"

[backend]
kind = "fs"
root = "$WORK/gw-data"
workers = $GW_WORKERS

[cache]
size_mib = $GW_CACHE_MIB

[state]
dir = "$WORK/gw-state"

[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML
  cp "$WORK/gateway.toml" "$OUT/gateway.toml"
  if [ -n "$GW_LOG" ]; then export RUST_LOG=$GW_LOG; fi
  "$GATEWAY" --config "$WORK/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
  GW_PID=$!
  log "started gateway pid $GW_PID: $GATEWAY --config $WORK/gateway.toml"
  for _ in $(seq 1 200); do
    port_open "$GW_PORT" && break
    kill -0 "$GW_PID" 2>/dev/null || { log "gateway exited during startup:"; tail -20 "$OUT/gateway.log" >&2; GW_PID=""; return 1; }
    sleep 0.1
  done
  port_open "$GW_PORT" || { log "gateway: port $GW_PORT not open after 20 s"; return 1; }
  URL[gateway]="nfs://127.0.0.1/?version=3&nfsport=$GW_PORT&mountport=$GW_PORT"
}
start_ganesha() {
  command -v ganesha.nfsd >/dev/null || true   # ganesha.sh installs it if missing
  DIR[ganesha]=$WORK/ganesha-export
  mkdir -p "$WORK/ganesha-export"
  local u
  u=$("$HERE/ganesha.sh" start "$WORK/ganesha-export" "$GANESHA_PORT" 2> >(tee -a "$OUT/log.txt" >&2)) || { log "skip ganesha: did not start"; return 1; }
  GANESHA_UP=1
  URL[ganesha]=$u
}
ACTIVE=""
for t in $TARGETS; do
  case $t in
    gateway) start_gateway && ACTIVE="$ACTIVE gateway";;
    ganesha) start_ganesha && ACTIVE="$ACTIVE ganesha";;
    *) log "unknown target $t";;
  esac
done
[ -n "$ACTIVE" ] || { log "no target started"; exit 1; }
for t in $ACTIVE; do log "$t: ${URL[$t]}"; done

# ---- fio wrapper: target test round file rw bs qd extra-args...
printf "target\ttest\tround\tiops\tMiBps\tp50_us\tp99_us\terr\tload1\n" > "$RESULTS"
fio_run() {
  local t=$1 test=$2 r=$3 file=$4 rw=$5 bs=$6 qd=$7; shift 7
  local j=$OUT/json/$t.$test.r$r.json
  timeout -k 10 $((RUNTIME + RAMP + 90)) "${FIO_PIN[@]}" "$FIO" --name="$t-$test" --ioengine=nfs \
      --nfs_url="${URL[$t]}" --filename="$file" --rw="$rw" --bs="$bs" --iodepth="$qd" \
      --size="$SIZE" --lat_percentiles=1 --output-format=json --output="$j" "$@" 2>"$j.stderr"
  local rc=$?
  python3 - "$j" "$t" "$test" "$r" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" >> "$RESULTS" <<'PY'
import json, sys
path, t, test, r, rc, load = sys.argv[1:7]
try:
    text = open(path).read()           # fio also writes log_err() lines into --output
    job = json.loads(text[text.index("{"):])["jobs"][0]
except Exception:
    print(f"{t}\t{test}\t{r}\tnan\tnan\tnan\tnan\tno-json(rc={rc})\t{load}"); sys.exit()
d = job["write"] if job["write"]["io_bytes"] else job["read"]
pct = d.get("lat_ns", {}).get("percentile", {}) or d.get("clat_ns", {}).get("percentile", {})
p50 = pct.get("50.000000", float("nan")) / 1000
p99 = pct.get("99.000000", float("nan")) / 1000
err = job.get("error", 0)
if rc != "0" and not err: err = f"rc={rc}"
print(f"{t}\t{test}\t{r}\t{d['iops']:.0f}\t{d['bw_bytes']/2**20:.1f}\t{p50:.1f}\t{p99:.1f}\t{err}\t{load}")
PY
  tail -1 "$RESULTS" | tr '\t' ' ' | sed "s/^/[$(date +%T)]   /" | tee -a "$OUT/log.txt" >&2
  # libnfs cancels the I/Os still queued when fio destroys the context at the end of a
  # time-based job; each prints "Failed NFS operation(code:-4)" (-EINTR). Count, don't show.
  if [ -s "$j.stderr" ]; then
    local nc; nc=$(grep -c 'code:-4)' "$j.stderr")
    [ "$nc" -gt 0 ] && echo "      fio: $nc in-flight I/O(s) cancelled at teardown (code -4, harmless)" | tee -a "$OUT/log.txt" >&2
    grep -v 'code:-4)' "$j.stderr" | head -8 | sed 's/^/      fio: /' | tee -a "$OUT/log.txt" >&2
  fi
  return $rc
}

# ---- data file: written through each server (or copied in), then read into page cache
for t in $ACTIVE; do
  ok=0
  if [ "$PRECREATE" = server ]; then
    log "$t: writing bench.bin ($SIZE) through the server"
    # fio's nfs engine ends with up to iodepth-1 writes in flight (cancelled, "code:-4"),
    # so the file can come out short: write 16 MiB more than the reads cover.
    fio_run "$t" precreate 0 bench.bin write 1m 4 --size=$((SIZE_B + (16 << 20))) && ok=1
    # the write succeeded only if fio says err=0 and moved the whole size
    [ "$(tail -1 "$RESULTS" | cut -f8)" = 0 ] || ok=0
  fi
  if [ "$ok" != 1 ]; then
    [ "$PRECREATE" = server ] && log "$t: write through the server failed; copying the file into ${DIR[$t]} instead"
    [ -f "$WORK/src.bin" ] || head -c $((SIZE_B + (16 << 20))) /dev/urandom > "$WORK/src.bin"
    cp "$WORK/src.bin" "${DIR[$t]}/bench.bin"
  fi
done
sync
for t in $ACTIVE; do
  find "${DIR[$t]}" -type f -exec cat {} + > /dev/null 2>&1
  log "$t: export dir holds $(du -sh "${DIR[$t]}" | cut -f1) (page cache warmed)"
done
# Same treatment for every server: one sequential pass through the server itself
# (64 KiB reads), so whatever cache the server keeps of its own is warm, as the
# kernel page cache is. WARM_PASS=0 measures servers with only the page cache warm.
if [ "${WARM_PASS:-1}" = 1 ]; then
  for t in $ACTIVE; do
    log "$t: warm-up pass (sequential 64 KiB reads through the server)"
    fio_run "$t" warmup 0 bench.bin read 64k 4 > /dev/null 2>&1 || true
  done
fi

# ---- rounds, interleaved: round -> test -> target (target order alternates by round)
for r in $(seq 1 "$ROUNDS"); do
  order=$ACTIVE
  [ $((r % 2)) = 0 ] && order=$(echo $ACTIVE | tr ' ' '\n' | tac | tr '\n' ' ')
  for test in $TESTS; do
    for t in $order; do
      case $test in
        rr4k_qd1)  fio_run "$t" "$test" "$r" bench.bin randread 4k 1  --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap --randrepeat=0;;
        rr4k_qd32) fio_run "$t" "$test" "$r" bench.bin randread 4k 32 --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap --randrepeat=0;;
        seqrd_1m)  fio_run "$t" "$test" "$r" bench.bin read 1m "$SEQ_QD" --time_based --runtime="$RUNTIME" --ramp_time="$RAMP";;
        seqwr_1m)  fio_run "$t" "$test" "$r" "wr-r$r.bin" write 1m "$SEQ_QD" --time_based --runtime="$RUNTIME" --ramp_time="$RAMP"; sync;;
        *) log "unknown test $test";;
      esac
      if [ "$t" = gateway ] && [ -n "$GW_PID" ] && ! kill -0 "$GW_PID" 2>/dev/null; then
        log "GATEWAY DIED during $test round $r; last log lines:"; tail -20 "$OUT/gateway.log" | tee -a "$OUT/log.txt" >&2
        GW_PID=""; ACTIVE=$(echo " $ACTIVE " | sed 's/ gateway / /')
      fi
    done
  done
done
cleanup
trap - EXIT

# ---- table + markdown fragment
python3 - "$RESULTS" "$OUT" "$ROUNDS" "$SIZE" "$SEQ_QD" <<'PY'
import csv, sys, math, statistics as st, glob, os
res, out, rounds, size, seqqd = sys.argv[1:6]
rows = [r for r in csv.DictReader(open(res), delimiter="\t") if r["test"] not in ("precreate", "warmup")]
def f(x):
    try: return float(x)
    except: return math.nan
def ok(r): return r["err"] == "0" and f(r["iops"]) > 0
def med(key, t, test):
    v = [f(r[key]) for r in rows if r["target"] == t and r["test"] == test and ok(r) and not math.isnan(f(r[key]))]
    return st.median(v) if v else math.nan
tests = list(dict.fromkeys(r["test"] for r in rows))
targets = [t for t in ("gateway", "ganesha") if any(r["target"] == t for r in rows)]
names = {"rr4k_qd1": "4 KiB random read, QD1", "rr4k_qd32": "4 KiB random read, QD32",
         "seqrd_1m": f"1 MiB sequential read, QD{seqqd}", "seqwr_1m": f"1 MiB sequential write, QD{seqqd}"}
# targets: IOPS >= 2x ganesha on 4 KiB reads; MiB/s >= 1x ganesha on 1 MiB
goal = {"rr4k_qd1": ("iops", 2.0), "rr4k_qd32": ("iops", 2.0), "seqrd_1m": ("MiBps", 1.0), "seqwr_1m": ("MiBps", 1.0)}
def fmt(x, d=0):
    return "—" if math.isnan(x) else (f"{x:,.{d}f}")
def runs(t, test, key):
    return ", ".join(("ERR" if not ok(r) else fmt(f(r[key]), 0)) for r in rows if r["target"] == t and r["test"] == test)
lines = []
lines.append(f"Medians of {rounds} interleaved rounds; fio 3.33 nfs ioengine (libnfs 4.0), NFSv3 over TCP on 127.0.0.1, {size} file in page cache.\n")
hdr = "| test | " + " | ".join(f"{t} IOPS | {t} MiB/s | {t} p50 µs" for t in targets)
hdr += " | gateway/ganesha | target | met? |" if len(targets) == 2 else " |"
lines.append(hdr)
lines.append("|---" * (1 + 3 * len(targets) + (3 if len(targets) == 2 else 0)) + "|")
for test in tests:
    cells = []
    for t in targets:
        cells += [fmt(med("iops", t, test)), fmt(med("MiBps", t, test), 1), fmt(med("p50_us", t, test), 1)]
    line = f"| {names.get(test, test)} | " + " | ".join(cells)
    if len(targets) == 2:
        key, want = goal.get(test, ("iops", 1.0))
        g, b = med(key, "gateway", test), med(key, "ganesha", test)
        ratio = g / b if b and not math.isnan(b) and not math.isnan(g) else math.nan
        met = "—" if math.isnan(ratio) else ("yes" if ratio >= want else "no")
        line += f" | {fmt(ratio, 2)}× ({'IOPS' if key == 'iops' else 'MiB/s'}) | ≥ {want:g}× | {met} |"
    else:
        line += " |"
    lines.append(line)
lines.append("")
lines.append("Per-run values (IOPS, in run order; ERR = fio error, see below):\n")
for test in tests:
    for t in targets:
        lines.append(f"- {test} {t}: {runs(t, test, 'iops')}")
loads = [f(r["load1"]) for r in rows if not math.isnan(f(r["load1"]))]
if loads:
    lines.append(f"\n1-min load average during the runs: {min(loads):.2f}–{max(loads):.2f} (2 CPUs; includes fio and the servers).")
errs = [r for r in csv.DictReader(open(res), delimiter="\t") if r["err"] != "0"]
if errs:
    lines.append("\nFailed runs (fio stderr, first lines):\n")
    for r in errs:
        p = os.path.join(out, "json", f"{r['target']}.{r['test']}.r{r['round']}.json.stderr")
        txt = [x for x in open(p).read().strip().splitlines() if "code:-4)" not in x][:8] if os.path.exists(p) else []
        lines.append(f"- {r['target']} {r['test']} round {r['round']}: err={r['err']}")
        if txt:
            lines.append("  ```\n" + "\n".join("  " + x for x in txt) + "\n  ```")
md = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(md)
# plain table on stdout
print()
print(f"{'test':<10} {'target':<8} {'IOPS':>9} {'MiB/s':>8} {'p50 us':>8} {'p99 us':>8}  runs(IOPS)")
for test in tests:
    for t in targets:
        print(f"{test:<10} {t:<8} {fmt(med('iops',t,test)):>9} {fmt(med('MiBps',t,test),1):>8} {fmt(med('p50_us',t,test),1):>8} {fmt(med('p99_us',t,test),1):>8}  {runs(t,test,'iops')}")
    if len(targets) == 2:
        key, want = goal.get(test, ("iops", 1.0))
        g, b = med(key, "gateway", test), med(key, "ganesha", test)
        ratio = g / b if b and not math.isnan(b) and not math.isnan(g) else math.nan
        print(f"{'':<10} {'ratio':<8} gateway/ganesha {key} = {fmt(ratio,2)} (target >= {want:g})")
print()
print(md)
PY
echo "results: $OUT (results.tsv, results.md, env.txt, json/, gateway.log)"
