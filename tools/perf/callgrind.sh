#!/usr/bin/env bash
# callgrind.sh - instructions per NFS operation in the gateway, with valgrind's callgrind.
#
# Starts target/release/gateway under 'valgrind --tool=callgrind' (fs backend on a temp
# dir, one reactor), writes a test file through it, warms up, zeroes the counters
# (callgrind_control -z), runs ONE fixed fio job with a fixed operation count
# (--number_ios=$OPS, default 4 KiB random read at QD1), dumps the counters
# (callgrind_control -d) and reports instructions (Ir) per operation plus the top
# functions. Deterministic enough to compare commits: Ir do not depend on the noise of a
# shared machine the way IOPS do. Idle polling of the reactor is counted too, so keep
# GW_IDLE=adaptive and a small GW_IDLE_SPINS (default 1, the minimum) when comparing.
#
# Env (defaults): OPS=20000 RW=randread BS=4k QD=1 SIZE=64m GW_PORT=20149 GW_IDLE=adaptive
#   GW_IDLE_SPINS=1 GATEWAY=<repo>/target/release/gateway FIO=/opt/fio-nfs/bin/fio
#   OUT=/var/tmp/perf-callgrind/<stamp>  TOP=30
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OPS=${OPS:-20000}; RW=${RW:-randread}; BS=${BS:-4k}; QD=${QD:-1}; SIZE=${SIZE:-64m}
GW_PORT=${GW_PORT:-20149}; GW_IDLE=${GW_IDLE:-adaptive}; GW_IDLE_SPINS=${GW_IDLE_SPINS:-1}
# engine.idle_spin_us (builds since 2026-11-24 poll that long after each call, which
# callgrind counts): 0 by default; GW_IDLE_SPIN_US= (empty) for older builds.
GW_IDLE_SPIN_US=${GW_IDLE_SPIN_US-0}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}; FIO=${FIO:-/opt/fio-nfs/bin/fio}
OUT=${OUT:-/var/tmp/perf-callgrind/$(date +%Y%m%d-%H%M%S)}; TOP=${TOP:-30}
mkdir -p "$OUT/data" "$OUT/state"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
[ -x "$GATEWAY" ] || { log "no gateway at $GATEWAY"; exit 1; }
command -v valgrind >/dev/null || { log "installing valgrind"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >&2; }
"$FIO" --enghelp=nfs >/dev/null 2>&1 || { log "no fio with the nfs ioengine at $FIO"; exit 1; }
port_open "$GW_PORT" && { log "port $GW_PORT in use"; exit 1; }

cat > "$OUT/gateway.toml" <<TOML
[engine]
cores = [0]
idle = "$GW_IDLE"
idle_spins = $GW_IDLE_SPINS
hugepages = "off"
${GW_IDLE_SPIN_US:+idle_spin_us = $GW_IDLE_SPIN_US}

[tcp]
listen = "127.0.0.1:$GW_PORT"

[backend]
kind = "fs"
root = "$OUT/data"

[state]
dir = "$OUT/state"

[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML

VG_PID=""
cleanup() {
  [ -n "$VG_PID" ] || return 0
  if kill -0 "$VG_PID" 2>/dev/null; then
    kill -TERM "$VG_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$VG_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$VG_PID" 2>/dev/null && kill -KILL "$VG_PID" 2>/dev/null
  fi
  wait "$VG_PID" 2>/dev/null; VG_PID=""
  rm -rf "$OUT/data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p" --dump-instr=no \
    "$GATEWAY" --config "$OUT/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
VG_PID=$!
log "gateway under callgrind: pid $VG_PID"
for _ in $(seq 1 600); do
  port_open "$GW_PORT" && break
  kill -0 "$VG_PID" 2>/dev/null || { log "gateway exited:"; tail -20 "$OUT/gateway.log" >&2; exit 1; }
  sleep 0.1
done
port_open "$GW_PORT" || { log "port $GW_PORT not open after 60 s"; exit 1; }
URL="nfs://127.0.0.1/?version=3&nfsport=$GW_PORT&mountport=$GW_PORT"

fio_job() { # name json extra...
  local n=$1 j=$2; shift 2
  timeout -k 10 1200 "$FIO" --name="$n" --ioengine=nfs --nfs_url="$URL" --filename=cg.bin \
      --output-format=json --output="$j" "$@" 2>"$j.stderr"
  local rc=$?
  grep -v 'code:-4)' "$j.stderr" | head -8 | sed 's/^/  fio: /' >&2
  return $rc
}
log "writing $SIZE through the gateway"
# fio's nfs engine ends a job with up to iodepth-1 writes still in flight (libnfs cancels
# them, "code:-4"), so the file may come out short: write 16 MiB more than is read.
SIZE_B=$(python3 -c "import sys;s=sys.argv[1].lower();m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$SIZE")
fio_job prep "$OUT/prep.json" --rw=write --bs=1m --iodepth=4 --size=$((SIZE_B + (16 << 20))) || { log "write through the gateway failed"; exit 1; }
log "warm-up: 2000 ops"
JOB=(--rw="$RW" --bs="$BS" --iodepth="$QD" --size="$SIZE" --norandommap --randrepeat=1 --io_size=1024g)  # number_ios ends the job (time_based would override it)
fio_job warm "$OUT/warm.json" "${JOB[@]}" --number_ios=2000 || { log "warm-up failed"; exit 1; }
callgrind_control -z "$VG_PID" >/dev/null || { log "callgrind_control -z failed"; exit 1; }
log "measured job: $RW bs=$BS iodepth=$QD number_ios=$OPS"
fio_job measure "$OUT/measure.json" "${JOB[@]}" --number_ios="$OPS" || { log "measured job failed"; exit 1; }
callgrind_control -d measured "$VG_PID" >/dev/null || { log "callgrind_control -d failed"; exit 1; }
sleep 1
DUMP=$(ls -t "$OUT"/callgrind.out.$VG_PID.* 2>/dev/null | head -1)
[ -n "$DUMP" ] || { log "no dump file"; exit 1; }
cleanup; trap - EXIT

python3 - "$OUT/measure.json" "$DUMP" "$TOP" <<'PY' | tee "$OUT/summary.txt"
import json, sys, re, collections
t = open(sys.argv[1]).read()          # fio writes log_err() lines into --output too
j = json.loads(t[t.index("{"):])["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] else j["read"]
ops = d["total_ios"]
ir = None
for line in open(sys.argv[2]):
    m = re.match(r"^(summary|totals):\s+(\d+)", line)
    if m: ir = int(m.group(2))
print(f"operations (fio total_ios): {ops}")
print(f"instructions (Ir) in the measured window: {ir:,}")
print(f"instructions per operation: {ir/ops:,.0f}")
if j.get("error"): print(f"fio error: {j['error']}")
# self cost per function: cost lines not preceded by a calls= line (those are inclusive
# costs of a call). Names are compressed as "(id) name" on first use, "(id)" after.
names, selfc = {}, collections.Counter()
fn, after_calls = None, False
def name(v):
    m = re.match(r"\((\d+)\)(?:\s+(.*))?", v)
    if not m: return v
    if m.group(2): names[m.group(1)] = m.group(2)
    return names.get(m.group(1), v)
for line in open(sys.argv[2]):
    line = line.rstrip("\n")
    if line.startswith("fn="): fn = name(line[3:]); after_calls = False; continue
    if line.startswith("cfn="): name(line[4:]); continue
    if line.startswith("calls="): after_calls = True; continue
    if line and (line[0].isdigit() or line[0] in "+-*"):
        if after_calls: after_calls = False; continue
        parts = line.split()
        if len(parts) >= 2 and fn: selfc[fn] += int(parts[1])
top = int(sys.argv[3])
print(f"\ntop {top} functions by self instructions (share of the window, per op):")
for f, c in selfc.most_common(top):
    print(f"{c/ir*100:6.2f}% {c/ops:10,.0f}  {f[:110]}")
PY
echo "dump: $DUMP (inclusive view: callgrind_annotate --inclusive=yes $DUMP)"
