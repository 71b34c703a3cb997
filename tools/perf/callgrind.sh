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
# GW_IDLE=adaptive and a small GW_IDLE_SPINS (default 0) when comparing.
#
# Env (defaults): OPS=20000 RW=randread BS=4k QD=1 SIZE=64m GW_PORT=20149 GW_IDLE=adaptive
#   GW_IDLE_SPINS=0 GATEWAY=<repo>/target/release/gateway FIO=/opt/fio-nfs/bin/fio
#   OUT=/var/tmp/perf-callgrind/<stamp>  TOP=30
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OPS=${OPS:-20000}; RW=${RW:-randread}; BS=${BS:-4k}; QD=${QD:-1}; SIZE=${SIZE:-64m}
GW_PORT=${GW_PORT:-20149}; GW_IDLE=${GW_IDLE:-adaptive}; GW_IDLE_SPINS=${GW_IDLE_SPINS:-0}
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
  timeout -k 10 1200 "$FIO" --name="$n" --ioengine=nfs --nfs_url="$URL" --filename=cg.bin --size="$SIZE" \
      --output-format=json --output="$j" "$@" 2>"$j.stderr"
  local rc=$?
  grep -v 'code:-4)' "$j.stderr" | head -8 | sed 's/^/  fio: /' >&2
  return $rc
}
log "writing $SIZE through the gateway"
fio_job prep "$OUT/prep.json" --rw=write --bs=1m --iodepth=4 || { log "write through the gateway failed"; exit 1; }
log "warm-up: 2000 ops"
fio_job warm "$OUT/warm.json" --rw="$RW" --bs="$BS" --iodepth="$QD" --number_ios=2000 --randrepeat=1 || { log "warm-up failed"; exit 1; }
callgrind_control -z "$VG_PID" >/dev/null || { log "callgrind_control -z failed"; exit 1; }
log "measured job: $RW bs=$BS iodepth=$QD number_ios=$OPS"
fio_job measure "$OUT/measure.json" --rw="$RW" --bs="$BS" --iodepth="$QD" --number_ios="$OPS" --randrepeat=1 || { log "measured job failed"; exit 1; }
callgrind_control -d measured "$VG_PID" >/dev/null || { log "callgrind_control -d failed"; exit 1; }
sleep 1
DUMP=$(ls -t "$OUT"/callgrind.out.$VG_PID.* 2>/dev/null | head -1)
[ -n "$DUMP" ] || { log "no dump file"; exit 1; }
cleanup; trap - EXIT

python3 - "$OUT/measure.json" "$DUMP" <<'PY'
import json, sys, re
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] else j["read"]
ops = d["total_ios"]
ir = None
for line in open(sys.argv[2]):
    m = re.match(r"^(summary|totals):\s+(\d+)", line)
    if m: ir = int(m.group(2))
print(f"operations (fio total_ios): {ops}")
print(f"instructions (Ir) in the measured window: {ir:,}")
print(f"instructions per operation: {ir/ops:,.0f}")
PY
echo "dump: $DUMP"
callgrind_annotate --inclusive=no "$DUMP" 2>/dev/null | sed -n "1,$((TOP + 25))p" > "$OUT/annotate.txt"
head -n $((TOP + 25)) "$OUT/annotate.txt"
