#!/usr/bin/env bash
# The s3 backend against plain S3 on the same loopback server (moto), side by side in
# one run (docs/performance-history.md, "s3 backend"):
#   1. 1 MiB sequential writes through the gateway (bench seqwrite + COMMIT, wall time)
#      vs one multipart upload of the same size straight through object_store;
#   2. cold sequential 1 MiB reads (gateway restarted: empty caches) vs a loop of
#      4 MiB ranged GETs straight through object_store;
#   3. cached 4 KiB random reads, s3 backend vs fs backend (same gateway build), after
#      one sequential 64 KiB pass has loaded the file into the reactor's page cache.
#
#   tools/perf/s3.sh            # SIZE_MIB=256 ROUNDS=2 DURATION=5
#   SKIP_BULK=1 tools/perf/s3.sh   # only test 3
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE_MIB=${SIZE_MIB:-256}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-5}
bash tests/setup.sh >/dev/null
cargo build --release -p gateway -p bench --example s3_baseline 2>&1 | tail -n 1
GW=target/release/gateway
BENCH=target/release/bench
BASE=target/release/examples/s3_baseline
W=$(mktemp -d /tmp/nfsgw-s3perf.XXXXXX)
eval "$(bash tests/s3/moto-server.sh start "$W/moto.log")"
PORT=$((20000 + RANDOM % 20000))
cleanup() { pkill -f "$W/gw" 2>/dev/null || true; kill "$S3_PID" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
curl -sf -X PUT "$S3_URL/perf" >/dev/null

config() { # kind
  cat <<EOT
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:$PORT"
[rdma]
provider = "off"
[backend]
kind = "$1"
root = "$W/data"
EOT
  if [[ $1 == s3 ]]; then cat <<EOT
[backend.s3]
endpoint = "$S3_URL"
bucket = "perf"
path_style = true
allow_http = true
access_key_id = "testing"
secret_access_key = "testing"
EOT
  fi
  cat <<EOT
[state]
dir = "$W/state-$1"
[[exports]]
path = "/"
squash = "none"
EOT
}
start() { # kind
  config "$1" >"$W/gw-$1.toml"
  "$GW" --config "$W/gw-$1.toml" >>"$W/gw-$1.log" 2>&1 &
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return; sleep 0.1; done
  echo "gateway did not start"; tail "$W/gw-$1.log"; exit 1
}
stop() { pkill -f "$W/gw" || true; sleep 0.5; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
B=(--target "tcp://127.0.0.1:$PORT" --json)

printf '%-6s %-34s %10s\n' round test MiB/s
for r in $(seq "$ROUNDS"); do
  [[ ${SKIP_BULK:-0} == 1 ]] && break
  out=$("$BASE" --endpoint "$S3_URL" --bucket perf --key "base$r.bin" --size-mib "$SIZE_MIB" put)
  printf '%-6s %-34s %10s\n' "$r" "plain multipart upload (8 MiB parts)" "$(echo "$out" | awk '{print $4}')"
  start s3
  t0=$(date +%s.%N)
  "$BENCH" "${B[@]}" --workload seqwrite --bs 1m --qd 4 --file "w$r.dat" --file-size "${SIZE_MIB}m" \
      --ops "$SIZE_MIB" >/dev/null
  t1=$(date +%s.%N)
  printf '%-6s %-34s %10.1f\n' "$r" "gateway seqwrite 1 MiB + COMMIT" "$(echo "$SIZE_MIB / ($t1 - $t0)" | bc -l)"
  stop
  out=$("$BASE" --endpoint "$S3_URL" --bucket perf --key "base$r.bin" --size-mib "$SIZE_MIB" get)
  printf '%-6s %-34s %10s\n' "$r" "plain ranged-GET loop (4 MiB)" "$(echo "$out" | awk '{print $4}')"
  start s3
  mibs=$("$BENCH" "${B[@]}" --workload seqread --bs 1m --qd 4 --file "w$r.dat" --file-size "${SIZE_MIB}m" \
      --ops "$SIZE_MIB" | field "['total']['mib_per_s']")
  printf '%-6s %-34s %10.1f\n' "$r" "gateway cold seqread 1 MiB" "$mibs"
  stop
done
echo
printf '%-6s %-34s %10s %10s\n' round test ops/s p99_us
for r in $(seq "$ROUNDS"); do
  # Alternate which backend goes first (the machine's load drifts).
  kinds="s3 fs"; (( r % 2 == 0 )) && kinds="fs s3"
  for kind in $kinds; do
    start "$kind"
    # One sequential 64 KiB pass loads the file into the reactor's page cache (READs
    # up to 64 KiB are cached); the measured random reads then hit the cache.
    "$BENCH" "${B[@]}" --workload seqread --bs 64k --qd 4 --file "c.dat" --file-size 32m --ops 512 >/dev/null
    # On s3, bench's first write of c.dat is uploaded after backend.s3.flush_idle_s and
    # the warm pass's read-ahead GETs may still run: moto (Python) then takes a core of
    # this 2-vCPU machine. Measure once the object is stored and moto is idle (< 5 % CPU
    # over a second), or the s3 figure counts moto's work, not the gateway's.
    if [[ $kind == s3 ]]; then
      for _ in $(seq 120); do curl -sfI "$S3_URL/perf/c.dat" >/dev/null && break; sleep 0.5; done
      for _ in $(seq 60); do
        a=$(awk '{print $14+$15}' "/proc/$S3_PID/stat"); sleep 1; b=$(awk '{print $14+$15}' "/proc/$S3_PID/stat")
        (( b - a < 5 )) && break
      done
    fi
    json=$("$BENCH" "${B[@]}" --workload randread --bs 4k --qd 16 --file "c.dat" --file-size 32m \
        --warmup 2 --duration "$DURATION")
    printf '%-6s %-34s %10.0f %10.1f\n' "$r" "cached randread 4 KiB ($kind)" \
      "$(echo "$json" | field "['total']['ops_per_s']")" "$(echo "$json" | field "['total']['latency_us']['p99']")"
    stop
  done
done
