#!/usr/bin/env bash
# thread-cpu.sh - where a gateway's time goes during one fio run: per thread, CPU time,
# time spent runnable but waiting for a CPU (run-queue wait), sleeps (voluntary context
# switches) and preemptions (involuntary ones), from /proc/PID/task/*/schedstat and
# status before and after the run. Used for "Where the tail goes" in docs/performance-history.md.
#
#   tools/perf/thread-cpu.sh NAME                       default layout, 4 KiB randread QD1
#   ENGINE=$'cores = [0]\nidle_spin_us = 0' tools/perf/thread-cpu.sh spin0
#   ENGINE='cores = [1]' FIO_CPUS=0 tools/perf/thread-cpu.sh r1f0
#   RW=write BS=1m QD=4 FILE=w.bin IO=workers tools/perf/thread-cpu.sh wr-workers
#   RW=read BS=1m QD=4 BACKEND='splice = true' tools/perf/thread-cpu.sh rd-splice
#
# Env (defaults): ENGINE='cores = [0]' (lines of [engine]) IO=auto (backend.io)
#   BACKEND= (more lines of [backend], e.g. 'splice = true')
#   RW=randread BS=4k QD=1 FILE=b.bin RUNTIME=10 FIO_CPUS= (taskset list for fio)
#   GATEWAY=<repo>/target/release/gateway FIO=/opt/fio-nfs/bin/fio PORT=20149
#   BASE=/var/tmp/perf-threads (NAME/ holds the config, log, fio JSON, snapshots)
# A 1 GiB file is written through the gateway first and read into the page cache; the
# data directory is removed at the end. Threads shorter-lived than the run (io_uring's
# iou-wrk workers) are counted from when they appear.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
name=${1:?usage: thread-cpu.sh NAME}
ENGINE=${ENGINE:-'cores = [0]'}; IO=${IO:-auto}
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}; FIO=${FIO:-/opt/fio-nfs/bin/fio}
PORT=${PORT:-20149}; RUNTIME=${RUNTIME:-10}; FIO_CPUS=${FIO_CPUS:-}
d=${BASE:-/var/tmp/perf-threads}/$name
rm -rf "$d"; mkdir -p "$d/data" "$d/state"
cat > "$d/gateway.toml" <<T
[engine]
$ENGINE
[tcp]
listen = "127.0.0.1:$PORT"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$d/data"
io = "$IO"
${BACKEND:-}
[state]
dir = "$d/state"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
T
"$GATEWAY" --config "$d/gateway.toml" > "$d/gateway.log" 2>&1 < /dev/null &
gp=$!
trap 'kill -TERM $gp 2>/dev/null; wait $gp 2>/dev/null; rm -rf "$d/data"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
url="nfs://127.0.0.1/?version=3&nfsport=$PORT&mountport=$PORT"
pin=(); [ -n "$FIO_CPUS" ] && pin=(taskset -c "$FIO_CPUS")
"$FIO" --name=w --ioengine=nfs --nfs_url="$url" --filename=b.bin --rw=write --bs=1m --iodepth=4 \
  --size=1040m --output=/dev/null 2>/dev/null
cat "$d/data/b.bin" > /dev/null
snap() {
  local t
  for t in /proc/$gp/task/*; do
    printf '%s %s %s %s %s\n' "${t##*/}" "$(cat "$t/comm")" "$(cat "$t/schedstat")" \
      "$(awk '/^voluntary_ctxt/{print $2}' "$t/status")" "$(awk '/^nonvoluntary_ctxt/{print $2}' "$t/status")"
  done
}
snap > "$d/before"
"${pin[@]}" "$FIO" --name=r --ioengine=nfs --nfs_url="$url" --filename="${FILE:-b.bin}" --rw="${RW:-randread}" \
  --bs="${BS:-4k}" --iodepth="${QD:-1}" --size=1g --time_based --runtime="$RUNTIME" --norandommap \
  --randrepeat=0 --lat_percentiles=1 --output-format=json --output="$d/fio.json" 2>/dev/null
snap > "$d/after"
python3 - "$d" "$name" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
d, name, load = sys.argv[1:4]
text = open(f"{d}/fio.json").read()
job = json.loads(text[text.index("{"):])["jobs"][0]
j = job["write"] if job["write"]["io_bytes"] else job["read"]
p = j["lat_ns"]["percentile"]
print(f"{name}: {j['bw_bytes']/2**20:.0f} MiB/s {j['iops']:.0f} IOPS p50 {p['50.000000']/1e3:.1f} "
      f"p99 {p['99.000000']/1e3:.1f} p99.9 {p['99.900000']/1e3:.1f} µs (load {load})")
def load_snap(f):
    out = {}
    for l in open(f):
        tid, comm, run, wait, slices, vol, nvol = l.split()
        out[tid] = (comm, int(run), int(wait), int(slices), int(vol), int(nvol))
    return out
a, b = load_snap(f"{d}/before"), load_snap(f"{d}/after")
for tid, v in b.items():
    u = a.get(tid, (v[0], 0, 0, 0, 0, 0))
    run, wait, sl, vol, nvol = (v[i] - u[i] for i in range(1, 6))
    if run > 1e6 or nvol > 10:
        print(f"  {v[0]:<16} cpu {run/1e6:8.1f} ms  runq-wait {wait/1e6:7.1f} ms  "
              f"slices {sl:7d}  vol-cs {vol:7d}  invol-cs {nvol:6d}")
PY
