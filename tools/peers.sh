#!/usr/bin/env bash
# peers.sh - the same `bench` workload against the gateway and against NFS-Ganesha, in
# one run, interleaved, and the ratios.
#
#   tools/peers.sh [bench args...]
#   tools/peers.sh --workload randread --bs 4096 --qd 8 --duration 10 --size-mib 64
#
# The bench arguments are passed through unchanged to every run (add no --target,
# --export or --json: this script sets them). Each server gets a fresh data directory
# on the same file system; ROUNDS rounds alternate gateway/ganesha so both see the
# same background noise; the table shows the median of each figure and the ratio
# gateway/ganesha (for p99, lower is better, so a ratio < 1 favours the gateway).
#
# Ganesha is started with tools/perf/ganesha.sh (installs nfs-ganesha with apt-get if
# missing; needs root and rpcbind on port 111). It serves MOUNT on its own port, so bench
# must be able to send MNT there (`--mount-port`); with a bench that sends MOUNT on the
# NFS port only, or when ganesha cannot be installed or started, the ganesha column is
# skipped with the reason and only the gateway is measured.
#
# The Linux kernel server: run inside the VM rig (tools/vm, ../shared/rig), where the
# guest exports a directory with knfsd; not started by this script. To compare by hand:
# boot the rig, export a directory with `exportfs -o rw,no_root_squash 10.0.2.0/24:/srv`,
# run the gateway on the host, and run bench from the guest against both with the same
# arguments (tests/vm/kernel-rdma-compare.sh shows the RDMA variant of this).
#
# Env (defaults): ROUNDS=3 GATEWAY=<repo>/target/release/gateway
#   BENCH=<repo>/target/release/bench GW_CORES=0 GW_IDLE=adaptive BASE=/var/tmp/perf-peers
#   SKIP_GANESHA=0
# Not run in CI (it installs and starts system daemons).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=${ROUNDS:-3}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
BENCH=${BENCH:-$ROOT/target/release/bench}
GW_CORES=${GW_CORES:-0}; GW_IDLE=${GW_IDLE:-adaptive}
BASE=${BASE:-/var/tmp/perf-peers}; SKIP_GANESHA=${SKIP_GANESHA:-0}
OUT="$BASE/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
log() { echo "[peers $(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

[ -x "$GATEWAY" ] && [ -x "$BENCH" ] || { log "build first: cargo build --release --workspace"; exit 1; }
for a in "$@"; do
  case "$a" in --target*|--export*|--json) log "do not pass $a; this script sets it"; exit 2;; esac
done

GW_PORT=$(free_port); GW_RDMA=$(free_port)
mkdir -p "$OUT/gw-data" "$OUT/gw-state" "$OUT/ganesha-data"
cat > "$OUT/gateway.toml" <<TOML
[engine]
cores = [$GW_CORES]
idle = "$GW_IDLE"
[tcp]
listen = "127.0.0.1:$GW_PORT"
[rdma]
provider = "off"
listen = "127.0.0.1:$GW_RDMA"
[backend]
kind = "fs"
root = "$OUT/gw-data"
[state]
dir = "$OUT/gw-state"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
TOML

GW_PID=""; GANESHA_PORT=""
cleanup() {
  if [ -n "$GW_PID" ] && kill -0 "$GW_PID" 2>/dev/null; then
    kill -TERM "$GW_PID"; wait "$GW_PID" 2>/dev/null
  fi
  [ -n "$GANESHA_PORT" ] && "$ROOT/tools/perf/ganesha.sh" stop "$GANESHA_PORT" >/dev/null 2>&1
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$GATEWAY" --config "$OUT/gateway.toml" > "$OUT/gateway.log" 2>&1 < /dev/null &
GW_PID=$!
for _ in $(seq 1 200); do port_open "$GW_PORT" && break; sleep 0.1; done
port_open "$GW_PORT" || { log "gateway did not start:"; tail "$OUT/gateway.log" >&2; exit 1; }
log "gateway pid $GW_PID on 127.0.0.1:$GW_PORT"

TARGETS="gateway"
GANESHA_ARGS=()
if [ "$SKIP_GANESHA" = 1 ]; then
  log "ganesha: skipped (SKIP_GANESHA=1)"
elif [ "$(id -u)" != 0 ]; then
  log "ganesha: skipped (needs root to install and start it)"
elif ! "$BENCH" --help 2>/dev/null | grep -q -- '--mount-port'; then
  log "ganesha: skipped: this bench sends MOUNT on the NFS port and ganesha serves MOUNT on its own port; needs a bench with --mount-port"
else
  p=$(free_port)
  if "$ROOT/tools/perf/ganesha.sh" start "$OUT/ganesha-data" "$p" > "$OUT/ganesha.url" 2> "$OUT/ganesha.start.log"; then
    GANESHA_PORT=$p
    GANESHA_ARGS=(--target "tcp://127.0.0.1:$p" --export "$OUT/ganesha-data" --mount-port $((p + 1)))
    TARGETS="gateway ganesha"
    log "ganesha on 127.0.0.1:$p (MOUNT on $((p + 1)))"
  else
    log "ganesha: skipped: could not be installed or started ($(tail -1 "$OUT/ganesha.start.log"))"
  fi
fi

run_one() { # target round -> appends a TSV row
  local t=$1 r=$2 args json
  shift 2
  if [ "$t" = gateway ]; then args=(--target "tcp://127.0.0.1:$GW_PORT" --export /); else args=("${GANESHA_ARGS[@]}"); fi
  json="$OUT/$t.$r.json"
  if ! "$BENCH" "${args[@]}" "$@" --json > "$json" 2> "$json.stderr"; then
    log "$t round $r: bench failed: $(tail -1 "$json.stderr")"
  fi
  python3 - "$json" "$t" "$r" >> "$OUT/results.tsv" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
try:
    j = json.loads(t[t.index("{"):t.rindex("}") + 1])
except ValueError:
    sys.exit(0)
tot = j.get("total", j)
p99 = tot["latency_us"]["p99"] if "latency_us" in tot else tot["p99_us"]
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{tot['ops_per_s']}\t{tot.get('mib_per_s', 0)}\t{p99}\t{tot['errors']}")
PY
}

: > "$OUT/results.tsv"
for r in $(seq 1 "$ROUNDS"); do
  for t in $TARGETS; do
    log "round $r/$ROUNDS: $t"
    run_one "$t" "$r" "$@"
  done
done

python3 - "$OUT/results.tsv" "$*" <<'PY' | tee "$OUT/summary.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
by = {}
for t, r, ops, mib, p99, err in rows:
    by.setdefault(t, []).append((float(ops), float(mib), float(p99), int(float(err))))
print(f"bench {sys.argv[2]}")
print(f"{'server':<10} {'runs':>4} {'ops/s':>12} {'MiB/s':>10} {'p99 µs':>10} {'errors':>7}")
med = {}
for t, v in by.items():
    m = tuple(statistics.median(x[i] for x in v) for i in range(3))
    med[t] = m
    print(f"{t:<10} {len(v):>4} {m[0]:>12.0f} {m[1]:>10.1f} {m[2]:>10.1f} {sum(x[3] for x in v):>7}")
if "gateway" in med and "ganesha" in med:
    g, n = med["gateway"], med["ganesha"]
    r = lambda a, b: f"{a / b:.2f}" if b else "-"
    print(f"{'ratio':<10} {'':>4} {r(g[0], n[0]):>12} {r(g[1], n[1]):>10} {r(g[2], n[2]):>10}   (gateway / ganesha)")
else:
    print("(no ganesha figures: see the log above for why)")
PY
log "results in $OUT"
