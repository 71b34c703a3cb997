#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1 tools/vm/vm.sh
# run-script; host side: tools/perf/vm-rdma-compare.sh). Compares the gateway with the
# guest's own kernel NFS server (nfsd) under the same kernel NFSv3 client and the same
# fio jobs, both over RPC-over-RDMA (and over TCP unless PROTOS says otherwise), with
# NFSv3 (and NFSv4.1 when VERS says so: VERS="3 4.1"):
#   gateway: memory backend, rdma.provider = "verbs", RDMA 10.0.2.15:20049, TCP :2049,
#            one reactor core (GW_CORES), idle = "adaptive" (GW_IDLE, GW_IDLE_SPINS);
#   knfsd:   tmpfs export /export, 4 nfsd threads (NFSD_THREADS), RDMA port 20050
#            (portlist), TCP :2050, max_block_size 1 MiB like the gateway (NFSD_MAX_BLOCK);
#            with NFSv4.1 in VERS the export is the NFSv4 pseudo-root (fsid=0): v4.1
#            mounts ADDR:/, v3 ADDR:/export, both the same tmpfs.
# Mounts: one per (transport, version, server), same client options for both servers
# (vers=4.1,proto=rdma,port=... for v4.1: no MOUNT protocol).
# Jobs (libaio, O_DIRECT, SIZE_MIB files per server: one for reads, written and read once
# before the measurements, one for writes; RUNTIME seconds each after a 1 s ramp):
#   randread-4k-qd16, seqread-1m-qd4, seqwrite-1m-qd4.
# Servers alternate job by job; with ROUNDS > 1 the median of the rounds is reported.
# Prints a Markdown table and lines "RESULT case job server value unit", where case is the
# transport ("rdma", "tcp") for NFSv3 and transport-v4.1 ("rdma-v4.1") for NFSv4.1.
# Under QEMU's software CPU (TCG) and Soft-RoCE these figures are valid only as ratios.
# The CI boot (tests/vm/kernel-nfs-rdma.sh) runs a short version after its checks:
# RUNTIME=3 ROUNDS=1 PROTOS=rdma VERS="3 4.1" SIZE_MIB=16 (about two minutes).
# Usage: kernel-rdma-compare.sh GATEWAY_BINARY
set -euo pipefail
GW=${1:?gateway binary (built with --features rdma)}
ADDR=${RDMA_ADDR:-10.0.2.15}
RUNTIME=${RUNTIME:-10}
ROUNDS=${ROUNDS:-3}
PROTOS=${PROTOS:-rdma tcp}
VERS=${VERS:-3}                             # NFS versions: "3", "4.1" or "3 4.1"
SIZE_MIB=${SIZE_MIB:-128}
JOBS=${JOBS:-randread-4k-qd16 seqread-1m-qd4 seqwrite-1m-qd4}
NFSD_THREADS=${NFSD_THREADS:-4}
NFSD_MAX_BLOCK=${NFSD_MAX_BLOCK:-1048576}   # rsize/wsize knfsd offers (the gateway: 1 MiB)
GW_IDLE=${GW_IDLE:-adaptive}                # engine.idle of the gateway
GW_IDLE_SPINS=${GW_IDLE_SPINS:-2000}        # engine.idle_spins (the gateway's default)
GW_CORES=${GW_CORES:-0}                     # engine.cores of the gateway, comma-separated
GW_RDMA=20049 GW_TCP=2049 KN_RDMA=20050 KN_TCP=2050
# CASES: one per (transport, version): "rdma" (v3), "rdma-v4.1", ...
CASES=""
for v in $VERS; do
  case $v in 3|4.1) ;; *) echo "VERS: $v is not 3 or 4.1"; exit 2;; esac
  for p in $PROTOS; do if [ "$v" = 3 ]; then CASES="$CASES $p"; else CASES="$CASES $p-v$v"; fi; done
done
CASES=${CASES# }
case_proto() { echo "${1%%-v*}"; }
case_vers() { case $1 in *-v*) echo "${1##*-v}";; *) echo 3;; esac; }
W=$(mktemp -d)
mkdir -p "$W/res"

cat > "$W/gw.toml" <<TOML
[engine]
cores = [$GW_CORES]
idle = "$GW_IDLE"
idle_spins = $GW_IDLE_SPINS
[tcp]
listen = "$ADDR:$GW_TCP"
[rdma]
provider = "verbs"
listen = "$ADDR:$GW_RDMA"
[backend]
kind = "memory"
[state]
dir = "$W/state"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
on_exit() {
  local rc=$? m
  for m in /mnt/gw-* /mnt/kn-*; do umount -f "$m" 2>/dev/null || true; done
  [ -n "${GWPID:-}" ] && kill "$GWPID" 2>/dev/null || true
  rpc.nfsd 0 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "KERNEL RDMA COMPARE: FAILED (rc=$rc)"
    echo "--- gateway log tail"; tail -n 20 "$W/gw.log" || true
    echo "--- dmesg tail"; dmesg | tail -n 30 || true
  fi
}
trap on_exit EXIT
say() { echo "[compare] $*"; }

modprobe rpcrdma
echo "kernel $(uname -r); $(nproc) vCPUs; $(rdma link show | head -n 1)"

# ---- the gateway
RUST_LOG=${RUST_LOG:-info} "$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
GWPID=$!
for _ in $(seq 1 200); do
  grep -q "verbs provider opened" "$W/gw.log" && (exec 3<>/dev/tcp/$ADDR/$GW_TCP) 2>/dev/null && break
  kill -0 $GWPID 2>/dev/null || { echo "gateway exited at startup"; cat "$W/gw.log"; exit 1; }
  sleep 0.1
done
say "gateway up (pid $GWPID)"

# ---- the kernel NFS server, exporting a tmpfs (the guest's / is an overlay: not exportable)
modprobe nfsd
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
mkdir -p /export /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery /run/rpcbind
mountpoint -q /var/lib/nfs/rpc_pipefs || mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs 2>/dev/null || true
mount -t tmpfs -o size=$(( SIZE_MIB * 2 + 64 ))m tmpfs /export
# NFSv4 needs a pseudo-root: fsid=0 makes /export it (the overlay / cannot be exported)
FSID=1; [[ " $VERS " == *" 4.1 "* ]] && FSID=0
echo "/export *(rw,no_root_squash,insecure,no_subtree_check,fsid=$FSID)" > /etc/exports
echo "$NFSD_MAX_BLOCK" > /proc/fs/nfsd/max_block_size   # only while no thread runs
if [ "$FSID" = 0 ]; then
  # a fresh nfsd refuses non-reclaim OPENs for its grace period (90 s by default): the
  # shortest one it takes; the NFSv3 jobs (and the layout) run first anyway
  echo 10 > /proc/fs/nfsd/nfsv4leasetime; echo 10 > /proc/fs/nfsd/nfsv4gracetime
fi
rpcbind -w
exportfs -ra
rpc.mountd
rpc.nfsd -p "$KN_TCP" "$NFSD_THREADS"
echo "rdma $KN_RDMA" > /proc/fs/nfsd/portlist
say "knfsd up: portlist $(tr '\n' ' ' < /proc/fs/nfsd/portlist), threads $(cat /proc/fs/nfsd/threads), versions $(cat /proc/fs/nfsd/versions)"

# ---- mounts: same client options for both servers (MOUNT: the gateway's on its TCP
# port, knfsd's rpc.mountd through rpcbind)
mount_all() {
  local c p v
  for c in $CASES; do
    p=$(case_proto "$c") v=$(case_vers "$c")
    local gp=$GW_TCP kp=$KN_TCP
    [ "$p" = rdma ] && gp=$GW_RDMA kp=$KN_RDMA
    mkdir -p /mnt/gw-$c /mnt/kn-$c
    if [ "$v" = 3 ]; then
      mount -t nfs -o vers=3,proto=$p,port=$gp,mountport=$GW_TCP,mountproto=tcp,nolock,retry=0 "$ADDR:/" /mnt/gw-$c
      mount -t nfs -o vers=3,proto=$p,port=$kp,mountproto=tcp,nolock,retry=0 "$ADDR:/export" /mnt/kn-$c
    else
      # RFC 8267 §6.3: NFSv4 goes straight to the port, no rpcbind or MOUNT
      mount -t nfs -o vers=$v,proto=$p,port=$gp,retry=0 "$ADDR:/" /mnt/gw-$c
      mount -t nfs -o vers=$v,proto=$p,port=$kp,retry=0 "$ADDR:/" /mnt/kn-$c
    fi
  done
  grep -E ' /mnt/(gw|kn)-' /proc/mounts | awk '{print "  " $2 ": " $4}' | sed 's/,\(namlen\|hard\|timeo\|retrans\|sec\|local_lock\|mountaddr\|mountvers\)=[^,]*//g'
}
mount_all

# run_job CASE JOB SERVER ROUND: one fio run; prints "value unit" to the result file
run_job() {
  local p=$1 j=$2 s=$3 r=$4 dir=/mnt/$3-$1 rw bs qd
  case $j in
    randread-4k-qd16) rw=randread bs=4k qd=16;;
    seqread-1m-qd4) rw=read bs=1m qd=4;;
    seqwrite-1m-qd4) rw=write bs=1m qd=4;;
    *) echo "unknown job $j"; return 1;;
  esac
  # the write job has its own file: rewriting the read file would invalidate the
  # gateway's read cache and the next read job would measure a cold cache
  local f=fio.dat; [ "$rw" = write ] && f=fio-w.dat
  sync; echo 3 > /proc/sys/vm/drop_caches
  fio --name="$j" --filename="$dir/$f" --size="${SIZE_MIB}m" --rw=$rw --bs=$bs \
    --ioengine=libaio --iodepth=$qd --direct=1 --numjobs=1 --runtime="$RUNTIME" --time_based \
    --ramp_time=1 --output-format=json --output="$W/res/$p-$j-$s-$r.json"
  python3 -S - "$W/res/$p-$j-$s-$r.json" "$rw" <<'PY' > "$W/res/$p-$j-$s-$r.txt"
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["write" if sys.argv[2] == "write" else "read"]
clat = side.get("clat_ns", {})
pct = clat.get("percentile", {})
us = lambda v: v / 1000
# value unit | p50 p99 max (µs) | p50 last (the table's latency column reads $NF)
v = ("%.0f IOPS" % side["iops"]) if sys.argv[2] == "randread" else ("%.1f MiB/s" % (side["bw"] / 1024))
print("%s | p50 %.0f p99 %.0f max %.0f us | %.0f" % (v, us(pct.get("50.000000", 0)),
      us(pct.get("99.000000", 0)), us(clat.get("max", 0)), us(pct.get("50.000000", 0))))
PY
  echo "RESULT $p $j $s $(cut -d'|' -f1,2 "$W/res/$p-$j-$s-$r.txt") round $r"
}

# One file per server for the read jobs (both transports mount the same export; the
# write job has its own): written once, then read once with 64 KiB READs, the largest the gateway's read cache fills (its first READs of a
# page copy it into the cache, registered for RDMA once; knfsd's tmpfs is memory
# already), so both servers are measured warm.
first=${CASES%% *}
for s in gw kn; do
  fio --name=layout --filename=/mnt/$s-$first/fio.dat --size="${SIZE_MIB}m" --rw=write --bs=1m \
    --ioengine=libaio --iodepth=4 --direct=1 --output="$W/layout-$s.log"
  fio --name=warm --filename=/mnt/$s-$first/fio.dat --size="${SIZE_MIB}m" --rw=read --bs=64k \
    --ioengine=libaio --iodepth=4 --direct=1 --output="$W/warm-$s.log"
  fio --name=layout-w --filename=/mnt/$s-$first/fio-w.dat --size="${SIZE_MIB}m" --rw=write --bs=1m \
    --ioengine=libaio --iodepth=4 --direct=1 --output="$W/layout-w-$s.log"
done
say "files laid out and read once ($SIZE_MIB MiB per server)"

for r in $(seq 1 "$ROUNDS"); do
  for p in $CASES; do for j in $JOBS; do
    # alternate which server goes first, round by round
    if [ $(( r % 2 )) = 1 ]; then order="gw kn"; else order="kn gw"; fi
    for s in $order; do run_job "$p" "$j" "$s" "$r"; done
  done; done
done
kill -0 "$GWPID" || { echo "gateway died"; exit 1; }
! grep -qi panic "$W/gw.log" || { echo "panic in the gateway log"; exit 1; }

# ---- the table: median over rounds per (proto, job, server)
median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }
val() { cat "$W"/res/"$1-$2-$3"-*.txt | awk '{print $1}' | median; }
lat() { cat "$W"/res/"$1-$2-$3"-*.txt | awk '{print $NF}' | median; }
echo
echo "| job | transport | gateway | kernel nfsd | gateway / nfsd | p50 latency gateway / nfsd (µs) |"
echo "|---|---|---:|---:|---:|---:|"
for j in $JOBS; do for p in $CASES; do
  unit=$(awk '{print $2; exit}' "$W/res/$p-$j-gw-1.txt")
  g=$(val "$p" "$j" gw); k=$(val "$p" "$j" kn)
  ratio=$(awk -v g="$g" -v k="$k" 'BEGIN { if (k > 0) printf "%.2f", g / k; else print "n/a" }')
  echo "| $j | $p | $g $unit | $k $unit | $ratio | $(lat "$p" "$j" gw) / $(lat "$p" "$j" kn) |"
done; done
echo
echo "(RUNTIME=${RUNTIME}s per job, NFS versions $VERS, ROUNDS=$ROUNDS, SIZE_MIB=$SIZE_MIB; nfsd: $NFSD_THREADS threads, max_block_size $NFSD_MAX_BLOCK; gateway: cores [$GW_CORES], idle $GW_IDLE, idle_spins $GW_IDLE_SPINS)"
echo "KERNEL RDMA COMPARE: DONE"
