#!/usr/bin/env bash
# callgrind-v4read.sh - Ir/op of the gateway process for a cached 4 KiB READ (randread,
# QD1) over NFSv3 and NFSv4.1, over TCP and RPC-over-RDMA (`soft` provider), for one or
# more gateway binaries, with `bench` as the client (v4.1 within 1.3x of v3).
#
#   tools/perf/callgrind-v4read.sh before=/var/tmp/gw-before after=target/release/gateway
#
# Per binary: one gateway under callgrind (fs backend, one reactor, adaptive idle with
# idle_spins = 1, 256 MiB cache); a SIZE_MIB file is written and read twice sequentially;
# then per case two counted bench runs (WARM ops, WARM + OPS ops) and
# (Ir(second) - Ir(first)) / OPS = the steady-state Ir of one cached READ.
# Env (defaults): OPS=20000 WARM=2000 SIZE_MIB=1 CASES="3:tcp 4.1:tcp 3:rdma 4.1:rdma"
#   BENCH=<repo>/target/release/bench OUT=/var/tmp/perf-v4read/<stamp>
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OPS=${OPS:-20000}; SIZE_MIB=${SIZE_MIB:-1}; WARM=${WARM:-2000}
CASES=${CASES:-"3:tcp 4.1:tcp 3:rdma 4.1:rdma"}
BENCH=${BENCH:-$ROOT/target/release/bench}
OUT=${OUT:-/var/tmp/perf-v4read/$(date +%Y%m%d-%H%M%S)}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_binary() {  # name binary
  local name=$1 bin=$2 dir="$OUT/$1" tport rport
  tport=$(free_port); rport=$(free_port)
  mkdir -p "$dir/data" "$dir/state"
  cat > "$dir/gateway.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
idle_spins = 1
hugepages = "off"
[tcp]
listen = "127.0.0.1:$tport"
[rdma]
provider = "soft"
listen = "127.0.0.1:$rport"
[backend]
kind = "fs"
root = "$dir/data"
[cache]
size_mib = 256
[state]
dir = "$dir/state"
[[exports]]
path = "/"
squash = "none"
TOML
  valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$dir/callgrind.out.%p" \
    "$bin" --config "$dir/gateway.toml" > "$dir/gateway.log" 2>&1 < /dev/null &
  local vg=$!
  for _ in $(seq 1 600); do
    (exec 3<>/dev/tcp/127.0.0.1/$tport) 2>/dev/null && break
    kill -0 $vg 2>/dev/null || { cat "$dir/gateway.log" >&2; return 1; }
    sleep 0.1
  done
  sleep 1
  local file=(--file r.dat --size-mib "$SIZE_MIB" --files 1)
  "$BENCH" --target "tcp://127.0.0.1:$tport" --workload seqread --bs 65536 --ops $((SIZE_MIB * 16)) "${file[@]}" > /dev/null
  "$BENCH" --target "tcp://127.0.0.1:$tport" --workload seqread --bs 65536 --ops $((SIZE_MIB * 16)) "${file[@]}" > /dev/null
  for c in $CASES; do
    local vers=${c%%:*} tr=${c##*:} target
    if [ "$tr" = tcp ]; then target="tcp://127.0.0.1:$tport"; else target="rdma://127.0.0.1:$rport"; fi
    local common=(--target "$target" --provider soft --nfs "$vers" --workload randread --bs 4k --qd 1 "${file[@]}")
    # Every bench run opens its file (bench's v4.1 OPEN is OPEN4_CREATE, which the
    # gateway counts as a namespace change: every cached page is invalidated) and
    # connects afresh; so two runs, WARM ops and WARM + OPS ops, and the difference per
    # op is the steady-state cost of a cached READ (setup and refill cancel out).
    local ir1 ir2 d1 d2
    callgrind_control -z $vg > /dev/null
    "$BENCH" "${common[@]}" --ops "$WARM" > "$dir/warm-$vers-$tr.txt" 2>&1
    callgrind_control -d "w$vers-$tr" $vg > /dev/null; sleep 1
    d1=$(ls -t "$dir"/callgrind.out.$vg.* | head -1)
    callgrind_control -z $vg > /dev/null
    "$BENCH" "${common[@]}" --ops $((WARM + OPS)) > "$dir/bench-$vers-$tr.txt" 2>&1
    callgrind_control -d "v$vers-$tr" $vg > /dev/null; sleep 1
    d2=$(ls -t "$dir"/callgrind.out.$vg.* | head -1)
    ir1=$(grep -E '^(summary|totals):' "$d1" | tail -1 | awk '{print $2}')
    ir2=$(grep -E '^(summary|totals):' "$d2" | tail -1 | awk '{print $2}')
    echo "$name v$vers $tr $(( (ir2 - ir1) / OPS )) first-run=$(( ir2 / (WARM + OPS) )) $d2" | tee -a "$OUT/results.txt"
  done
  kill -TERM $vg; wait $vg || true
}
mkdir -p "$OUT"
for kv in "$@"; do run_binary "${kv%%=*}" "${kv#*=}"; done
echo "(Ir per operation, whole gateway process; output in $OUT)"
