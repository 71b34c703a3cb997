#!/usr/bin/env bash
# rdma-soft.sh - the gateway's RPC-over-RDMA ceilings over the `soft` provider, driven by
# `bench` from a second process: throughput and server CPU per operation for NULL,
# GETATTR, 4 KiB READ, 64 KiB READ (cached) and 64 KiB WRITE; optionally callgrind
# instructions per operation on the server.
#
#   tools/perf/rdma-soft.sh                 CPU/op and ops/s (gateway runs natively)
#   CALLGRIND=1 tools/perf/rdma-soft.sh     instructions/op (gateway under callgrind)
#
# Server CPU per op = (utime + stime of the gateway process over the measured run, from
# /proc/PID/stat) / operations completed. The reactor runs the adaptive idle policy so
# idle spinning between calls is not billed to the operations it did not do (busy
# polling would bill a whole core). The machine is small and shared with the client, so
# ops/s are the client-plus-server ceiling here; CPU/op is the server's own cost.
#
# Env (defaults): DURATION=5 QD=16 GW_IDLE=adaptive GW_IDLE_SPINS=200 CORE=0 BENCH_CORE=1
#   OPS_CG=20000 (callgrind: operations per workload) OUT=/var/tmp/perf-rdma/<stamp>
#   EXTRA_TOML=$'[stats]\nper_client = false': sections appended to the gateway's config
#   WORKLOADS_ONLY="getattr:4096 randread:4096": a subset of the workloads below
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DURATION=${DURATION:-5}; QD=${QD:-16}; GW_IDLE=${GW_IDLE:-adaptive}; GW_IDLE_SPINS=${GW_IDLE_SPINS:-200}
# engine.idle_spin_us: 0 keeps the spin a count of polls as before (GW_IDLE_SPINS);
# GW_IDLE_SPIN_US= (empty) for builds older than the key.
GW_IDLE_SPIN_US=${GW_IDLE_SPIN_US-0}
CORE=${CORE:-0}; BENCH_CORE=${BENCH_CORE:-1}; OPS_CG=${OPS_CG:-20000}; CALLGRIND=${CALLGRIND:-0}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}; BENCH=${BENCH:-$ROOT/target/release/bench}
OUT=${OUT:-/var/tmp/perf-rdma/$(date +%Y%m%d-%H%M%S)}
TCP_PORT=${TCP_PORT:-20349}; RDMA_PORT=${RDMA_PORT:-20350}
mkdir -p "$OUT/data" "$OUT/state"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
[ -x "$GATEWAY" ] && [ -x "$BENCH" ] || { log "build first: cargo build --release -p gateway -p bench"; exit 1; }
if [ "$CALLGRIND" = 1 ] && ! command -v valgrind >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >&2
fi

cat > "$OUT/gateway.toml" <<TOML
[engine]
cores = [$CORE]
idle = "$GW_IDLE"
idle_spins = $GW_IDLE_SPINS
hugepages = "auto"
${GW_IDLE_SPIN_US:+idle_spin_us = $GW_IDLE_SPIN_US}

[tcp]
listen = "127.0.0.1:$TCP_PORT"

[rdma]
provider = "soft"
listen = "127.0.0.1:$RDMA_PORT"

[backend]
kind = "fs"
root = "$OUT/data"

[cache]
size_mib = 256

[state]
dir = "$OUT/state"

[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
${EXTRA_TOML:-}
TOML

GW_PID=""
cleanup() {
  [ -n "$GW_PID" ] || return 0
  kill -TERM "$GW_PID" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; GW_PID=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$CALLGRIND" = 1 ]; then
  valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p" --dump-instr=no \
      "$GATEWAY" --config "$OUT/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
else
  "$GATEWAY" --config "$OUT/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
fi
GW_PID=$!
for _ in $(seq 1 600); do port_open "$TCP_PORT" && break; sleep 0.1; done
port_open "$TCP_PORT" || { log "gateway did not start"; tail "$OUT/gateway.log" >&2; exit 1; }
sleep 0.5

cpu_ticks() { awk '{print $14 + $15}' "/proc/$GW_PID/stat"; }
HZ=$(getconf CLK_TCK)
bench() { taskset -c "$BENCH_CORE" "$BENCH" --target "rdma://127.0.0.1:$RDMA_PORT" --json "$@"; }

log "preparing and warming a 64 MiB file (read into the reactor cache)"
bench --workload seqread --bs 65536 --ops 1024 --qd 8 --file r.dat --size-mib 64 > /dev/null
bench --workload seqread --bs 65536 --ops 1024 --qd 8 --file r.dat --size-mib 64 > /dev/null

WORKLOADS=("null:4096" "getattr:4096" "randread:4096" "randread:65536" "randwrite:65536")
if [ -n "${WORKLOADS_ONLY:-}" ]; then read -r -a WORKLOADS <<< "$WORKLOADS_ONLY"; fi
printf "%-10s %7s %12s %10s %12s %10s\n" workload bs ops/s MiB/s "srv µs/op" "Ir/op" | tee "$OUT/summary.txt"
for w in "${WORKLOADS[@]}"; do
  wl=${w%%:*}; bs=${w##*:}
  file=r.dat; [ "$wl" = randwrite ] && file=w.dat
  if [ "$CALLGRIND" = 1 ]; then
    bench --workload "$wl" --bs "$bs" --ops 2000 --qd "$QD" --file "$file" --size-mib 64 > /dev/null
    callgrind_control -z "$GW_PID" > /dev/null
    j=$(bench --workload "$wl" --bs "$bs" --ops "$OPS_CG" --qd "$QD" --file "$file" --size-mib 64)
    callgrind_control -d "$wl-$bs" "$GW_PID" > /dev/null; sleep 1
    dump=$(ls -t "$OUT"/callgrind.out.$GW_PID.* | head -1)
    ir=$(grep -E '^(summary|totals):' "$dump" | tail -1 | awk '{print $2}')
    python3 - "$j" "$ir" "$wl" "$bs" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
j = json.loads(sys.argv[1]); ir = int(sys.argv[2])
print(f"{sys.argv[3]:<10} {sys.argv[4]:>7} {j['total']['ops_per_s']:>12.0f} {j['total']['mib_per_s']:>10.1f} {'-':>12} {ir/j['total']['ops']:>10,.0f}")
PY
  else
    t0=$(cpu_ticks)
    j=$(bench --workload "$wl" --bs "$bs" --duration "$DURATION" --qd "$QD" --file "$file" --size-mib 64)
    t1=$(cpu_ticks)
    python3 - "$j" "$t0" "$t1" "$HZ" "$wl" "$bs" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
j = json.loads(sys.argv[1]); t0, t1, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
us = (t1 - t0) / hz * 1e6 / max(j["total"]["ops"], 1)
print(f"{sys.argv[5]:<10} {sys.argv[6]:>7} {j['total']['ops_per_s']:>12.0f} {j['total']['mib_per_s']:>10.1f} {us:>12.2f} {'-':>10}")
PY
  fi
done
log "results in $OUT"
