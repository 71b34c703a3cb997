#!/usr/bin/env bash
# idle-spin.sh - QD1 4 KiB cached random-read latency of one gateway build over several
# adaptive idle settings, interleaved rounds (docs/tuning.md, "Idle spin").
#
#   tools/perf/idle-spin.sh        # ROUNDS=2 DURATION=5
#
# CONFIGS: space-separated NAME:IDLE_SPINS:IDLE_SPIN_US. Each run: a fresh gateway (fs
# backend, one reactor on core 0, adaptive idle), bench writes an 8 MiB file and warms
# the cache with 3,000 reads, then DURATION seconds of randread QD1 4 KiB; prints
# name, round, ops/s, latency p50 p90 p99 p99.9 mean (µs) and the gateway's CPU ticks.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GW=${GW:-$ROOT/target/release/gateway}
BENCH=${BENCH:-$ROOT/target/release/bench}
ROUNDS=${ROUNDS:-2}; DURATION=${DURATION:-5}
CONFIGS=${CONFIGS:-"spins2000:2000:0 us0:1:0 us10:1:10 us50:1:50 us200:1:200 us1000:1:1000"}
W=$(mktemp -d /tmp/spinrun.XXXX)
for r in $(seq 1 $ROUNDS); do
for c in $CONFIGS; do
  IFS=: read name spins us <<<"$c"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  d=$W/$name-$r; mkdir -p $d/data $d/state
  cat > $d/gw.toml <<T
[engine]
cores = [0]
idle = "adaptive"
idle_spins = $spins
idle_spin_us = $us
hugepages = "off"
[tcp]
listen = "127.0.0.1:$port"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$d/data"
[state]
dir = "$d/state"
[[exports]]
path = "/"
squash = "none"
T
  $GW --config $d/gw.toml > $d/gw.log 2>&1 &
  gp=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
  common=(--target tcp://127.0.0.1:$port --workload randread --bs 4096 --qd 1 --size-mib 8 --files 1)
  $BENCH "${common[@]}" --ops 3000 > /dev/null 2>&1
  $BENCH "${common[@]}" --duration $DURATION --json > $d/bench.json 2>$d/bench.err
  cpu=$(awk '{print $14+$15}' /proc/$gp/stat)
  kill -TERM $gp; wait $gp 2>/dev/null
  rm -rf "$d/data"
  python3 - "$name" "$r" "$d/bench.json" "$cpu" "$DURATION" <<'P'
import json,sys
name,r,f,cpu,dur=sys.argv[1:]
t=open(f).read(); j=json.loads(t[t.index("{"):t.rindex("}")+1])
tot=j.get("total",j)
lat=tot.get("latency_us") or tot.get("lat_us") or {}
print(name, r, round(tot["ops_per_s"]), lat.get("p50"), lat.get("p90"), lat.get("p99"), lat.get("p99_9"), lat.get("mean"), "cpu_ticks", cpu)
P
done
done
rm -rf "$W"
