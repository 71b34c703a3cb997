#!/usr/bin/env bash
# compare.sh - the gateway beside nfs-ganesha and the floor, one client, one run.
#
# TARGETS may name "floor": tools/src/bin/nfs-floor, the least an NFSv3 server can do on
# this machine (memory, no checks, one thread per connection); the table then gives every
# other server's CPU per op as a multiple of the floor's (docs/performance.md, "Floor and
# peers"). The floor keeps its files in memory: bench.bin plus one write file per round.
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
#   GW_CORES="0"  GW_HUGEPAGES=auto  GW_WORKERS=32  GW_LOG=  (RUST_LOG-style value, optional)
#   GW_CACHE_MIB=256 (the gateway's reactor-side page cache, cache.size_mib)
#   GANESHA_PORT=20490 (MOUNT on +1)  PRECREATE=server (server|disk)
#   FLOOR=<target dir>/release/nfs-floor  FLOOR_PORT=20047  FLOOR_CPUS= (taskset list)
#   WARM_PASS=1 (one sequential 64 KiB read pass through each server before the rounds)
#   FIO=/opt/fio-nfs/bin/fio  FIO_CPUS= (taskset list for fio; empty = not pinned)
#   GANESHA_CPUS= (taskset list for all of ganesha's threads; empty = not pinned)
#   BASE=/var/tmp/perf-compare (data + runs)  KEEP_DATA=0
#   GW_IO= (backend.io; empty = the build's default)  GW_IDLE_SPIN_US= (engine.idle_spin_us;
#     empty = default; leave empty for builds older than the key)  GW_TASKSET= (taskset CPU
#     list for the gateway process: its workers and other unpinned threads; the reactors
#     pin themselves to GW_CORES)
#   GW_VARIANTS= several gateways in the same interleaved run, space-separated
#     NAME:key=val,key=val with keys bin (binary), io, cores ("0+1" for two reactors), idle,
#     spin_us, bulk_us (engine.idle_bulk_spin_us), splice (backend.splice: true|false), workers, taskset (as GW_TASKSET),
#     retask (CPU list, "0+1" for 0,1: every thread, reactors included, moved there with
#     `taskset -a` once the gateway listens, which undoes the reactors' pinning), fio
#     (taskset CPU list for fio while it
#     drives this target); unset keys take the GW_* values. Example:
#     GW_VARIANTS="auto:io=auto workers:io=workers prev:bin=/work/wt-prev/target/release/gateway"
#     TARGETS then defaults to the variant names plus ganesha.
#     Every target runs for the whole script, so a variant with idle=busy takes its core
#     while the others are measured: measure busy variants in a run of their own.
#
# Server CPU per operation: the server process's CPU time (utime + stime of all its
# threads, /proc/PID/stat) over each fio run divided by the operations of that run (fio's
# IOPS x (runtime + ramp)); the run's setup (mount, open) is billed too, so it is an
# upper bound, the same way for every server. An adaptive reactor's idle spin is billed
# as well: at QD1 the reactor never reaches the end of its spin between calls.
# "of it sys" is the kernel's share (stime): on loopback a 1 MiB reply costs mostly its
# copies, which callgrind does not see.
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
GW_VARIANTS=${GW_VARIANTS:-}
GANESHA_CPUS=${GANESHA_CPUS:-}
if [ -n "$GW_VARIANTS" ]; then
  TARGETS=${TARGETS:-"$(for v in $GW_VARIANTS; do printf '%s ' "${v%%:*}"; done)ganesha"}
else
  TARGETS=${TARGETS:-"gateway ganesha"}
fi
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
GW_PORT=${GW_PORT:-20049}
GW_IDLE=${GW_IDLE:-adaptive}
GW_CORES=${GW_CORES:-0}
GW_HUGEPAGES=${GW_HUGEPAGES:-auto}
GW_WORKERS=${GW_WORKERS:-32}
GW_CACHE_MIB=${GW_CACHE_MIB:-256}
GW_LOG=${GW_LOG:-}
GW_IO=${GW_IO:-}
GW_IDLE_SPIN_US=${GW_IDLE_SPIN_US:-}
GW_TASKSET=${GW_TASKSET:-}
GANESHA_PORT=${GANESHA_PORT:-20490}
FLOOR=${FLOOR:-${CARGO_TARGET_DIR:-$ROOT/target}/release/nfs-floor}
FLOOR_PORT=${FLOOR_PORT:-20047}
FLOOR_CPUS=${FLOOR_CPUS:-}
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

declare -A PID=()   # target -> server pid (CPU sampling; gateways: stopped by cleanup)
declare -A GWS=()   # gateway target -> pid this script started
GANESHA_UP=0
cleanup() {
  local t p
  for t in "${!GWS[@]}"; do
    p=${GWS[$t]}
    if kill -0 "$p" 2>/dev/null; then
      log "stopping $t (pid $p)"
      kill -TERM "$p" 2>/dev/null
      for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && { log "$t ignored TERM; KILL"; kill -KILL "$p" 2>/dev/null; }
      wait "$p" 2>/dev/null
    fi
  done
  GWS=()
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
  echo "knobs: ROUNDS=$ROUNDS RUNTIME=$RUNTIME RAMP=$RAMP SIZE=$SIZE SEQ_QD=$SEQ_QD GW_IDLE=$GW_IDLE GW_CORES=$GW_CORES GW_HUGEPAGES=$GW_HUGEPAGES GW_IO=${GW_IO:-default} GW_IDLE_SPIN_US=${GW_IDLE_SPIN_US:-default} GW_TASKSET=${GW_TASKSET:-none} PRECREATE=$PRECREATE FIO_CPUS=${FIO_CPUS:-unpinned}"
  [ -n "$GW_VARIANTS" ] && echo "variants: $GW_VARIANTS"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2

declare -A URL=() DIR=()

# ---- servers
declare -A FIOCPU=()   # target -> taskset list for fio (empty = FIO_CPUS)
# start_gateway NAME SPEC INDEX: SPEC is "key=val,key=val" (see GW_VARIANTS above)
start_gateway() {
  local name=$1 spec=$2 idx=$3 kv k v
  local bin=$GATEWAY io=$GW_IO cores=$GW_CORES idle=$GW_IDLE spin=$GW_IDLE_SPIN_US workers=$GW_WORKERS ts=$GW_TASKSET bulk= splice= retask=
  FIOCPU[$name]=$FIO_CPUS
  IFS=, read -r -a kv <<< "$spec"
  for k in "${kv[@]}"; do
    [ -n "$k" ] || continue
    v=${k#*=}; k=${k%%=*}
    case $k in
      bin) bin=$v;; io) io=$v;; cores) cores=${v//+/ };; idle) idle=$v;; spin_us) spin=$v;; bulk_us) bulk=$v;;
      workers) workers=$v;; taskset) ts=$v;; fio) FIOCPU[$name]=$v;; splice) splice=$v;; retask) retask=${v//+/,};;
      *) log "skip $name: unknown variant key $k"; return 1;;
    esac
  done
  local port=$((GW_PORT + 2 * idx)) w=$WORK/$name
  [ -x "$bin" ] || { log "skip $name: $bin not found"; return 1; }
  port_open "$port" && { log "skip $name: port $port already in use"; return 1; }
  DIR[$name]=$w/data
  mkdir -p "$w/data" "$w/state"
  cores=$(echo "$cores" | sed 's/[ ,]\+/, /g')
  cat > "$w/gateway.toml" <<TOML
[engine]
cores = [$cores]
idle = "$idle"
hugepages = "$GW_HUGEPAGES"
${spin:+idle_spin_us = $spin}
${bulk:+idle_bulk_spin_us = $bulk}

[tcp]
listen = "127.0.0.1:$port"

[rdma]
provider = "off"

[backend]
kind = "fs"
root = "$w/data"
workers = $workers
${io:+io = \"$io\"}
${splice:+splice = $splice}

[cache]
size_mib = $GW_CACHE_MIB

[state]
dir = "$w/state"

[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML
  cp "$w/gateway.toml" "$OUT/$name.toml"
  if [ -n "$GW_LOG" ]; then export RUST_LOG=$GW_LOG; fi
  local pin=()
  [ -n "$ts" ] && pin=(taskset -c "$ts")
  "${pin[@]}" "$bin" --config "$w/gateway.toml" > "$OUT/$name.log" 2>&1 < /dev/null &
  GWS[$name]=$!; PID[$name]=$!
  log "started $name pid $!: ${pin[*]} $bin --config $w/gateway.toml (fio cpus: ${FIOCPU[$name]:-unpinned})"
  for _ in $(seq 1 200); do
    port_open "$port" && break
    kill -0 "${GWS[$name]}" 2>/dev/null || { log "$name exited during startup:"; tail -20 "$OUT/$name.log" >&2; unset "GWS[$name]"; return 1; }
    sleep 0.1
  done
  port_open "$port" || { log "$name: port $port not open after 20 s"; return 1; }
  if [ -n "$retask" ]; then   # after start-up, so it overrides the reactors' own pinning
    taskset -a -c -p "$retask" "${GWS[$name]}" > /dev/null && log "$name: all threads moved to CPUs $retask"
  fi
  URL[$name]="nfs://127.0.0.1/?version=3&nfsport=$port&mountport=$port"
}
start_ganesha() {
  command -v ganesha.nfsd >/dev/null || true   # ganesha.sh installs it if missing
  DIR[ganesha]=$WORK/ganesha-export
  mkdir -p "$WORK/ganesha-export"
  local u
  u=$("$HERE/ganesha.sh" start "$WORK/ganesha-export" "$GANESHA_PORT" 2> >(tee -a "$OUT/log.txt" >&2)) || { log "skip ganesha: did not start"; return 1; }
  GANESHA_UP=1
  URL[ganesha]=$u
  PID[ganesha]=$(cat "$(cat "${TMPDIR:-/tmp}/perf-ganesha.$GANESHA_PORT")/ganesha.pid" 2>/dev/null)
  if [ -n "$GANESHA_CPUS" ] && [ -n "${PID[ganesha]}" ]; then
    taskset -a -c -p "$GANESHA_CPUS" "${PID[ganesha]}" > /dev/null && log "ganesha pinned (all threads) to CPUs $GANESHA_CPUS"
  fi
  FIOCPU[ganesha]=$FIO_CPUS
}
start_floor() {
  [ -x "$FLOOR" ] || { log "skip floor: $FLOOR not found (cargo build --release -p tools --bin nfs-floor)"; return 1; }
  port_open "$FLOOR_PORT" && { log "skip floor: port $FLOOR_PORT already in use"; return 1; }
  local pin=()
  [ -n "$FLOOR_CPUS" ] && pin=(taskset -c "$FLOOR_CPUS")
  "${pin[@]}" "$FLOOR" --listen "127.0.0.1:$FLOOR_PORT" > "$OUT/floor.log" 2>&1 < /dev/null &
  GWS[floor]=$!; PID[floor]=$!
  for _ in $(seq 1 50); do port_open "$FLOOR_PORT" && break; sleep 0.1; done
  port_open "$FLOOR_PORT" || { log "floor did not listen on $FLOOR_PORT"; return 1; }
  log "started floor pid ${PID[floor]}: ${pin[*]} $FLOOR (memory only: no export dir)"
  DIR[floor]=""
  FIOCPU[floor]=$FIO_CPUS
  URL[floor]="nfs://127.0.0.1/?version=3&nfsport=$FLOOR_PORT&mountport=$FLOOR_PORT"
}
variant_spec() { # NAME -> the spec of GW_VARIANTS entry NAME, exit 1 if none
  local v
  for v in $GW_VARIANTS; do
    [ "${v%%:*}" = "$1" ] && { [ "$v" = "${v#*:}" ] && echo "" || echo "${v#*:}"; return 0; }
  done
  return 1
}
ACTIVE=""
i=0
for t in $TARGETS; do
  case $t in
    ganesha) start_ganesha && ACTIVE="$ACTIVE ganesha";;
    floor) start_floor && ACTIVE="$ACTIVE floor";;
    *)
      if spec=$(variant_spec "$t"); then :
      elif [ "$t" = gateway ]; then spec=""
      else log "unknown target $t"; continue; fi
      start_gateway "$t" "$spec" "$i" && ACTIVE="$ACTIVE $t"
      i=$((i + 1));;
  esac
done
[ -n "$ACTIVE" ] || { log "no target started"; exit 1; }
for t in $ACTIVE; do log "$t: ${URL[$t]}"; done

# ---- fio wrapper: target test round file rw bs qd extra-args...
printf "target\ttest\tround\tiops\tMiBps\tp50_us\tp99_us\terr\tload1\tcpu_us_op\tsys_us_op\n" > "$RESULTS"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo nan; }
# the kernel's share (stime): on loopback a 1 MiB reply's cost is mostly its copies
sys_ticks() { awk '{print $15}' "/proc/$1/stat" 2>/dev/null || echo nan; }
fio_run() {
  local t=$1 test=$2 r=$3 file=$4 rw=$5 bs=$6 qd=$7; shift 7
  local j=$OUT/json/$t.$test.r$r.json c0 c1 s0 s1 pin=()
  [ -n "${FIOCPU[$t]:-}" ] && pin=(taskset -c "${FIOCPU[$t]}")
  c0=$(cpu_ticks "${PID[$t]:-0}"); s0=$(sys_ticks "${PID[$t]:-0}")
  timeout -k 10 $((RUNTIME + RAMP + 90)) "${pin[@]}" "$FIO" --name="$t-$test" --ioengine=nfs \
      --nfs_url="${URL[$t]}" --filename="$file" --rw="$rw" --bs="$bs" --iodepth="$qd" \
      --size="$SIZE" --lat_percentiles=1 --output-format=json --output="$j" "$@" 2>"$j.stderr"
  local rc=$?
  c1=$(cpu_ticks "${PID[$t]:-0}"); s1=$(sys_ticks "${PID[$t]:-0}")
  python3 - "$j" "$t" "$test" "$r" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" "$c0" "$c1" "$RAMP" "$s0" "$s1" >> "$RESULTS" <<'PY'
import json, sys, os
path, t, test, r, rc, load, c0, c1, ramp, s0, s1 = sys.argv[1:12]
try:
    text = open(path).read()           # fio also writes log_err() lines into --output
    job = json.loads(text[text.index("{"):])["jobs"][0]
except Exception:
    print(f"{t}\t{test}\t{r}\tnan\tnan\tnan\tnan\tno-json(rc={rc})\t{load}\tnan\tnan"); sys.exit()
d = job["write"] if job["write"]["io_bytes"] else job["read"]
pct = d.get("lat_ns", {}).get("percentile", {}) or d.get("clat_ns", {}).get("percentile", {})
p50 = pct.get("50.000000", float("nan")) / 1000
p99 = pct.get("99.000000", float("nan")) / 1000
err = job.get("error", 0)
if rc != "0" and not err: err = f"rc={rc}"
try:
    ticks = float(c1) - float(c0)
except ValueError:
    ticks = float("nan")
ramp_s = float(ramp) if job.get("job_runtime", 0) else 0.0
ops = d["iops"] * (job.get("job_runtime", 0) / 1000 + ramp_s)
cpu = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / ops if ops > 0 else float("nan")
try:
    sys_cpu = (float(s1) - float(s0)) * 1e6 / os.sysconf("SC_CLK_TCK") / ops
except (ValueError, ZeroDivisionError):
    sys_cpu = float("nan")
print(f"{t}\t{test}\t{r}\t{d['iops']:.0f}\t{d['bw_bytes']/2**20:.1f}\t{p50:.1f}\t{p99:.1f}\t{err}\t{load}\t{cpu:.2f}\t{sys_cpu:.2f}")
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
  if [ "$ok" != 1 ] && [ -z "${DIR[$t]}" ]; then
    log "$t: write through the server failed and it has no export dir; dropping it"
    ACTIVE=$(echo " $ACTIVE " | sed "s/ $t / /"); continue
  fi
  if [ "$ok" != 1 ]; then
    [ "$PRECREATE" = server ] && log "$t: write through the server failed; copying the file into ${DIR[$t]} instead"
    [ -f "$WORK/src.bin" ] || head -c $((SIZE_B + (16 << 20))) /dev/urandom > "$WORK/src.bin"
    cp "$WORK/src.bin" "${DIR[$t]}/bench.bin"
  fi
done
sync
for t in $ACTIVE; do
  [ -n "${DIR[$t]}" ] || continue   # the floor: in memory
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
      if [ -n "${GWS[$t]:-}" ] && ! kill -0 "${GWS[$t]}" 2>/dev/null; then
        log "$t DIED during $test round $r; last log lines:"; tail -20 "$OUT/$t.log" | tee -a "$OUT/log.txt" >&2
        unset "GWS[$t]"; ACTIVE=$(echo " $ACTIVE " | sed "s/ $t / /")
      fi
    done
  done
done
cleanup
trap - EXIT

# ---- table + markdown fragment
python3 - "$RESULTS" "$OUT" "$ROUNDS" "$SIZE" "$SEQ_QD" <<'PY'
import csv, sys, math, statistics as st, os
res, out, rounds, size, seqqd = sys.argv[1:6]
allrows = list(csv.DictReader(open(res), delimiter="\t"))
rows = [r for r in allrows if r["test"] not in ("precreate", "warmup")]
def f(x):
    try: return float(x)
    except: return math.nan
def ok(r): return r["err"] == "0" and f(r["iops"]) > 0
def med(key, t, test):
    v = [f(r[key]) for r in rows if r["target"] == t and r["test"] == test and ok(r) and not math.isnan(f(r[key]))]
    return st.median(v) if v else math.nan
tests = list(dict.fromkeys(r["test"] for r in rows))
targets = list(dict.fromkeys(r["target"] for r in rows))
gws = [t for t in targets if t != "ganesha"]
base = "ganesha" if "ganesha" in targets else None
floor = "floor" if "floor" in targets else None
names = {"rr4k_qd1": "4 KiB random read, QD1", "rr4k_qd32": "4 KiB random read, QD32",
         "seqrd_1m": f"1 MiB sequential read, QD{seqqd}", "seqwr_1m": f"1 MiB sequential write, QD{seqqd}"}
# the data-path targets: (throughput key, >= ratio), CPU/op <= ratio; p99 <= ganesha's on 4 KiB reads
goal = {"rr4k_qd1": ("iops", 2.0, 0.25), "rr4k_qd32": ("iops", 2.0, 0.25),
        "seqrd_1m": ("MiBps", 1.5, 0.5), "seqwr_1m": ("MiBps", 1.5, 0.5)}
def fmt(x, d=0):
    return "—" if math.isnan(x) else (f"{x:,.{d}f}")
def ratio(a, b):
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan
def runs(t, test, key, d=0):
    return ", ".join(("ERR" if not ok(r) else fmt(f(r[key]), d)) for r in rows if r["target"] == t and r["test"] == test)
lines = [f"Medians of {rounds} interleaved rounds; fio 3.33 nfs ioengine (libnfs), NFSv3 over TCP on 127.0.0.1, {size} file in page cache. CPU = server process CPU µs per operation.\n"]
lines.append("| test | server | IOPS | MiB/s | p50 µs | p99 µs | CPU µs/op | of it sys |" + (" CPU × floor |" if floor else "") + (" × ganesha (thr.) | p99 × | CPU × | met? |" if base else ""))
lines.append("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if floor else "") + ("---:|---:|---:|---|" if base else ""))
for test in tests:
    key, want, cpuwant = goal.get(test, ("iops", 1.0, 1.0))
    for t in targets:
        c = [fmt(med("iops", t, test)), fmt(med("MiBps", t, test), 1), fmt(med("p50_us", t, test), 1),
             fmt(med("p99_us", t, test), 1), fmt(med("cpu_us_op", t, test), 2), fmt(med("sys_us_op", t, test), 2)]
        line = f"| {names.get(test, test)} | {t} | " + " | ".join(c) + " |"
        rf = ratio(med("cpu_us_op", t, test), med("cpu_us_op", floor, test)) if floor else math.nan
        if floor:
            line += f" {fmt(rf, 2)}× |" if t != floor else " |"
        if base and t != base:
            rt = ratio(med(key, t, test), med(key, base, test))
            rp = ratio(med("p99_us", t, test), med("p99_us", base, test))
            rc = ratio(med("cpu_us_op", t, test), med("cpu_us_op", base, test))
            met = []
            if not math.isnan(rt): met.append(f"thr {'yes' if rt >= want else 'no'} (≥{want:g}×)")
            if test.startswith("rr4k") and not math.isnan(rp): met.append(f"p99 {'yes' if rp <= 1 else 'no'}")
            if not math.isnan(rc): met.append(f"CPU {'yes' if rc <= cpuwant else 'no'} (≤{cpuwant:g}×)")
            if test.startswith("seq") and t != floor and not math.isnan(rf):
                met.append(f"CPU vs floor {'yes' if rf <= 1.3 else 'no'} (≤1.3×)")
            line += f" {fmt(rt, 2)}× | {fmt(rp, 2)}× | {fmt(rc, 2)}× | {'; '.join(met)} |"
        elif base:
            line += " | | | |"
        lines.append(line)
lines.append("\nPer-run values in run order (IOPS / p99 µs / CPU µs per op; ERR = fio error):\n")
for test in tests:
    for t in targets:
        lines.append(f"- {test} {t}: {runs(t, test, 'iops')} / {runs(t, test, 'p99_us')} / {runs(t, test, 'cpu_us_op', 2)}")
loads = [f(r["load1"]) for r in rows if not math.isnan(f(r["load1"]))]
if loads:
    lines.append(f"\n1-min load average sampled after each run: {min(loads):.2f}–{max(loads):.2f} (median {st.median(loads):.2f}; 2 CPUs; includes fio and the servers).")
errs = [r for r in allrows if r["err"] != "0"]
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
print()
print(md)
PY
echo "results: $OUT (results.tsv, results.md, env.txt, json/, <gateway>.log, <gateway>.toml)"
