#!/usr/bin/env bash
# bench-ab.sh - two gateway builds side by side under our own `bench`, interleaved rounds,
# so the noise of a small shared machine hits both alike. Prints median IOPS, median
# p99 latency and the ratio B/A per workload.
#
#   tools/perf/bench-ab.sh A=/path/to/gateway-a B=/path/to/gateway-b
#
# Env (defaults): ROUNDS=3 DURATION=5 WORKLOADS="randread:4k:16 getattr:4k:16 randwrite:4k:16
#   seqwrite:1m:4 seqread:1m:4" (workload:bs:qd) SIZE_MIB=64 TRANSPORT=tcp (tcp|rdma: soft
#   RDMA) BENCH=<repo>/target/release/bench OUT=/var/tmp/perf-bench-ab/<stamp>
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}; DURATION=${DURATION:-5}; SIZE_MIB=${SIZE_MIB:-64}; TRANSPORT=${TRANSPORT:-tcp}
WORKLOADS=${WORKLOADS:-"randread:4k:16 getattr:4k:16 randwrite:4k:16 seqwrite:1m:4 seqread:1m:4"}
BENCH=${BENCH:-$ROOT/target/release/bench}
OUT=${OUT:-/var/tmp/perf-bench-ab/$(date +%Y%m%d-%H%M%S)}
[ $# -eq 2 ] || { echo "usage: $0 A=GATEWAY B=GATEWAY" >&2; exit 2; }
NA=${1%%=*}; A=${1#*=}; NB=${2%%=*}; B=${2#*=}
mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() {  # name binary workload bs qd round -> "iops p99_us"
  local dir="$OUT/$1-$3-$4-$6" port rport gw
  port=$(free_port); rport=$(free_port)
  mkdir -p "$dir/data" "$dir/state"
  cat > "$dir/gateway.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:$port"
[rdma]
provider = "$([ "$TRANSPORT" = rdma ] && echo soft || echo off)"
listen = "127.0.0.1:$rport"
[backend]
kind = "fs"
root = "$dir/data"
[state]
dir = "$dir/state"
[[exports]]
path = "/"
squash = "none"
TOML
  "$2" --config "$dir/gateway.toml" > "$dir/gateway.log" 2>&1 &
  gw=$!
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
  local target="tcp://127.0.0.1:$port"
  [ "$TRANSPORT" = rdma ] && target="rdma://127.0.0.1:$rport"
  "$BENCH" --target "$target" --mount-port "$port" --workload "$3" --bs "$4" --qd "$5" \
    --size-mib "$SIZE_MIB" --warmup 1 --duration "$DURATION" --json > "$dir/bench.json" 2> "$dir/bench.err" || true
  kill -TERM $gw; wait $gw || true
  python3 - "$dir/bench.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("nan nan"); sys.exit()
t = d.get("total") or {}
print(t.get("ops_per_s", float("nan")), (t.get("latency_us") or {}).get("p99", float("nan")))
PY
}

median() { python3 -c 'import sys,statistics as s; v=[float(x) for x in sys.argv[1:] if x!="nan"]; print(round(s.median(v),1) if v else "nan")' "$@"; }

echo "| workload ($TRANSPORT) | $NA IOPS | $NB IOPS | $NB/$NA | $NA p99 µs | $NB p99 µs |"
echo "|---|---:|---:|---:|---:|---:|"
for w in $WORKLOADS; do
  IFS=: read -r wl bs qd <<< "$w"
  ia=(); ib=(); pa=(); pb=()
  for r in $(seq 1 "$ROUNDS"); do
    read -r i p <<< "$(run "$NA" "$A" "$wl" "$bs" "$qd" "$r")"; ia+=("$i"); pa+=("$p")
    read -r i p <<< "$(run "$NB" "$B" "$wl" "$bs" "$qd" "$r")"; ib+=("$i"); pb+=("$p")
  done
  ma=$(median "${ia[@]}"); mb=$(median "${ib[@]}")
  ratio=$(python3 -c "a,b=float('$ma'),float('$mb'); print(f'{b/a:.2f}' if a==a and a>0 else 'nan')")
  echo "| $wl $bs QD$qd | $ma | $mb | $ratio | $(median "${pa[@]}") | $(median "${pb[@]}") |"
done
echo "(medians of $ROUNDS interleaved rounds of ${DURATION}s; output in $OUT)"
