#!/usr/bin/env bash
# callgrind-ab.sh - instructions per NFS operation of two gateway binaries, side by side,
# with our own `bench` as the client (no fio build needed).
#
#   tools/perf/callgrind-ab.sh A=/path/to/gateway-a B=/path/to/gateway-b
#
# For each binary and each workload (WORKLOADS, default "randread getattr randwrite"):
# starts the gateway under `valgrind --tool=callgrind` (fs backend on a temp dir, one
# reactor, adaptive idle with idle_spins = 1 so idle polling counts little), lets bench
# create its file and warm up, zeroes the counters (callgrind_control -z), runs
# `bench --ops $OPS`, dumps (callgrind_control -d) and prints Ir per operation. Ir are
# deterministic enough to compare builds on a noisy shared machine (wall time is not).
#
# Env (defaults): OPS=20000 BS=4k QD=1 SIZE_MIB=16 WORKLOADS="randread getattr randwrite"
#   BENCH=<repo>/target/release/bench OUT=/var/tmp/perf-callgrind-ab/<stamp>
#   BENCH_EXTRA="--nfs 4.1": more bench flags (here: NFSv4.1 COMPOUNDs on a session)
#   ENGINE_EXTRA_<NAME>="key = value": one more [engine] line for binary NAME only, e.g.
#   ENGINE_EXTRA_now="idle_spin_us = 0" (builds with engine.idle_spin_us poll that long
#   after every operation, which callgrind counts; older builds reject the key).
#   EXTRA_TOML_<NAME>=$'[stats]\nper_client = false': more sections appended to the
#   config of NAME only, so one binary can run under two configs (A=bin B=bin).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OPS=${OPS:-20000}; BS=${BS:-4k}; QD=${QD:-1}; SIZE_MIB=${SIZE_MIB:-16}
WORKLOADS=${WORKLOADS:-"randread getattr randwrite"}
BENCH=${BENCH:-$ROOT/target/release/bench}
OUT=${OUT:-/var/tmp/perf-callgrind-ab/$(date +%Y%m%d-%H%M%S)}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "no bench at $BENCH (cargo build --release -p bench)" >&2; exit 1; }
declare -A BIN
for kv in "$@"; do BIN[${kv%%=*}]=${kv#*=}; done
[ ${#BIN[@]} -ge 1 ] || { echo "usage: $0 NAME=GATEWAY_BINARY [NAME=GATEWAY_BINARY ...]" >&2; exit 2; }
mkdir -p "$OUT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

measure() {  # name binary workload -> prints Ir/op
  local name=$1 bin=$2 wl=$3 dir="$OUT/$1-$3" port extra_var="ENGINE_EXTRA_$1" toml_var="EXTRA_TOML_$1"
  port=$(free_port)
  mkdir -p "$dir/data" "$dir/state"
  cat > "$dir/gateway.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
idle_spins = 1
hugepages = "off"
${!extra_var:-}
[tcp]
listen = "127.0.0.1:$port"
[backend]
kind = "fs"
root = "$dir/data"
[state]
dir = "$dir/state"
[[exports]]
path = "/"
squash = "none"
${!toml_var:-}
TOML
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
    "$bin" --config "$dir/gateway.toml" > "$dir/gateway.log" 2>&1 &
  local vg=$!
  for _ in $(seq 1 600); do
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
    kill -0 $vg 2>/dev/null || { cat "$dir/gateway.log" >&2; return 1; }
    sleep 0.1
  done
  local common=(--target "tcp://127.0.0.1:$port" --workload "$wl" --bs "$BS" --qd "$QD" --size-mib "$SIZE_MIB" --files 1)
  # BENCH_EXTRA: more bench flags for every run, e.g. "--nfs 4.1".
  read -r -a extra <<<"${BENCH_EXTRA:-}"
  common+=("${extra[@]}")
  # Warm-up: creates the file (bench writes it first) and fills caches.
  "$BENCH" "${common[@]}" --ops 2000 > "$dir/warmup.txt" 2>&1
  callgrind_control -z $vg > /dev/null
  "$BENCH" "${common[@]}" --ops "$OPS" > "$dir/bench.txt" 2>&1
  callgrind_control -d $vg > /dev/null
  kill -TERM $vg; wait $vg || true
  local ir
  ir=$(cat "$dir"/callgrind.out.* 2>/dev/null | awk '/^summary:|^totals:/ {print $2; exit}')
  [ -n "$ir" ] || { echo "no callgrind dump in $dir" >&2; return 1; }
  echo $(( ir / OPS ))
}

printf '| workload | %s |\n' "$(printf '%s | ' "${!BIN[@]}" | sed 's/ | $//')"
printf '|---|%s\n' "$(for _ in "${!BIN[@]}"; do printf -- '---:|'; done)"
for wl in $WORKLOADS; do
  row="| $wl ($BS, QD$QD, $OPS ops) |"
  for name in "${!BIN[@]}"; do
    row="$row $(measure "$name" "${BIN[$name]}" "$wl") |"
  done
  echo "$row"
done
echo "(Ir per operation, whole gateway process; output in $OUT)"
