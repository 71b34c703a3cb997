#!/usr/bin/env bash
# The s3 backend against a three-node Garage cluster (rf=3, loopback), beside plain
# object_store calls against the same cluster, in one run (docs/performance-history.md, "Garage"):
#   1. 1 MiB sequential writes through the gateway (bench seqwrite + COMMIT, wall time)
#      vs one multipart upload of the same size (8 MiB parts) straight through object_store;
#   2. cold sequential 1 MiB reads (gateway restarted: empty caches) vs a loop of 4 MiB
#      ranged GETs straight through object_store;
#   3. cached 4 KiB random reads, s3 backend on Garage vs fs backend (same build), after
#      one sequential 64 KiB pass has loaded the file into the reactor's page cache.
# The baseline is gateway/examples/s3_baseline.rs (the gateway's object_store, no NFS).
#
#   tools/perf/garage.sh            # SIZE_MIB=128 ROUNDS=2 DURATION=5
# Needs the cached Garage binary (tools/garage/install.sh). Prints `uptime` before and
# after: on a shared machine only the side-by-side ratios mean anything.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE_MIB=${SIZE_MIB:-128}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-5}
GARAGE_BIN=$(bash tools/garage/install.sh)
export GARAGE_BIN
cargo build --release -p gateway -p bench --example s3_baseline 2>&1 | tail -n 1
GW=target/release/gateway
BENCH=target/release/bench
BASE=target/release/examples/s3_baseline
W=$(mktemp -d /tmp/nfsgw-garageperf.XXXXXX)
GW_PID=
cleanup() {
  [[ -n "$GW_PID" ]] && kill "$GW_PID" 2>/dev/null || true
  bash tools/garage/cluster.sh stop "$W/garage" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
NFSGW_GARAGE_OWNER_PID=$$ bash tools/garage/cluster.sh start "$W/garage" >/dev/null
eval "$(bash tools/garage/cluster.sh env "$W/garage")"
PORT=$((20000 + RANDOM % 20000))

endpoints_toml() { # every node (failover) when the gateway knows `endpoints`, else node 1
  local list
  list=$(printf '"%s", ' $GARAGE_S3_ENDPOINTS)
  printf '[backend]\nkind = "s3"\n[backend.s3]\nbucket = "b"\nallow_http = true\nendpoints = [%s]\n[state]\ndir = "%s"\n[[exports]]\npath = "/"\n' \
    "${list%, }" "$W/probe" >"$W/probe.toml"
  if "$GW" --check-config "$W/probe.toml" >/dev/null 2>&1; then
    echo "endpoints = [${list%, }]"
  else
    echo "endpoint = \"$GARAGE_S3_ENDPOINT\""
  fi
}
EPS=$(endpoints_toml)

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
$EPS
region = "$GARAGE_REGION"
bucket = "$GARAGE_BUCKET"
path_style = true
allow_http = true
access_key_id = "$GARAGE_ACCESS_KEY"
secret_access_key = "$GARAGE_SECRET_KEY"
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
  GW_PID=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return; sleep 0.1; done
  echo "gateway did not start"; tail "$W/gw-$1.log"; exit 1
}
stop() { kill "$GW_PID" 2>/dev/null || true; wait "$GW_PID" 2>/dev/null || true; GW_PID=; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
B=(--target "tcp://127.0.0.1:$PORT" --json)
base() { # put|get KEY
  AWS_ACCESS_KEY_ID=$GARAGE_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET_KEY "$BASE" \
    --endpoint "$GARAGE_S3_ENDPOINT" --region "$GARAGE_REGION" --bucket "$GARAGE_BUCKET" \
    --key "$2" --size-mib "$SIZE_MIB" "$1"
}

echo "garage $("$GARAGE_BIN" --version 2>&1 | head -n 1); gateway $EPS"
echo "load before: $(uptime)"
printf '%-6s %-40s %10s\n' round test MiB/s
for r in $(seq "$ROUNDS"); do
  printf '%-6s %-40s %10s\n' "$r" "plain multipart upload (8 MiB parts)" "$(base put "base$r.bin" | awk '{print $4}')"
  start s3
  t0=$(date +%s.%N)
  "$BENCH" "${B[@]}" --workload seqwrite --bs 1m --qd 4 --file "w$r.dat" --file-size "${SIZE_MIB}m" \
      --ops "$SIZE_MIB" >/dev/null
  t1=$(date +%s.%N)
  printf '%-6s %-40s %10.1f\n' "$r" "gateway seqwrite 1 MiB + COMMIT" "$(echo "$SIZE_MIB / ($t1 - $t0)" | bc -l)"
  stop
  printf '%-6s %-40s %10s\n' "$r" "plain ranged-GET loop (4 MiB)" "$(base get "base$r.bin" | awk '{print $4}')"
  start s3
  mibs=$("$BENCH" "${B[@]}" --workload seqread --bs 1m --qd 4 --file "w$r.dat" --file-size "${SIZE_MIB}m" \
      --ops "$SIZE_MIB" | field "['total']['mib_per_s']")
  printf '%-6s %-40s %10.1f\n' "$r" "gateway cold seqread 1 MiB" "$mibs"
  stop
done
echo
printf '%-6s %-40s %10s %10s\n' round test ops/s p99_us
for r in $(seq "$ROUNDS"); do
  for kind in s3 fs; do
    start "$kind"
    # One sequential 64 KiB pass loads the file into the reactor's page cache (READs
    # up to 64 KiB are cached); the measured random reads then hit the cache.
    "$BENCH" "${B[@]}" --workload seqread --bs 64k --qd 4 --file "c.dat" --file-size 32m --ops 512 >/dev/null
    json=$("$BENCH" "${B[@]}" --workload randread --bs 4k --qd 16 --file "c.dat" --file-size 32m \
        --warmup 2 --duration "$DURATION")
    label=$kind; [[ $kind == s3 ]] && label="s3 on garage"
    printf '%-6s %-40s %10.0f %10.1f\n' "$r" "cached randread 4 KiB ($label)" \
      "$(echo "$json" | field "['total']['ops_per_s']")" "$(echo "$json" | field "['total']['latency_us']['p99']")"
    stop
  done
done
echo "load after: $(uptime)"
