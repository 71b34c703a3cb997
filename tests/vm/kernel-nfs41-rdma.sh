#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1 tools/vm/vm.sh
# run-script); called by tests/vm/kernel-nfs-rdma.sh after its NFSv3 parts, in the same
# boot (NFSv4.1 over RPC-over-RDMA, RFC 8267 §6 + RFC 8167). It starts its own
# gateway (memory backend, rdma.provider = "verbs" on 10.0.2.15:20049, TCP :2049, stats
# on 127.0.0.1:9108) and drives it with the kernel's NFSv4.1 client over RDMA:
#   files:  `mount -o vers=4.1,proto=rdma,port=20049` (/proc/mounts must say vers=4.1 and
#           proto=rdma); a file of V41R_FILE_MIB written and read back byte-exact after
#           dropping the page cache (WRITE data in read chunks, READ data in write
#           chunks: R8267-18/22); fio write+verify jobs (1 MiB sequential, 4 KiB random at
#           QD 16, O_DIRECT, crc32c); V41R_DIR_ENTRIES entries in one directory listed
#           back exactly (READDIR replies in reply chunks); rename, symlink (readlink),
#           chmod, remove, checked again from the server after a remount;
#   locks:  flock and fcntl locks from two processes conflict (EWOULDBLOCK) and the
#           second gets the lock once the first releases it (LOCK/LOCKT/LOCKU over RDMA);
#   deleg:  a delegation recalled over the RDMA back channel (R8267-29, R8167): a reader
#           holds a file open on the v4.1/RDMA mount (read delegation), a vers=3 mount
#           of the same export (V41R_V3_PROTO, tcp by default) rewrites it; the gateway's
#           stats must show nfsgw_delegation_recalls_total sent and answered and
#           nfsgw_callbacks_total sent and replied going up -- with transport="rdma"
#           when the binary labels them (label-aware: unlabelled counters are read as
#           they are, and said so) -- and the reader then sees the new data;
#   kill:   a client killed in the middle of a transfer (dd SIGKILLed, forced lazy
#           unmount): a new v4.1/RDMA mount works, data reads back, the gateway is alive
#           and its log free of panics. The guest kernel's NFS/RDMA client can oops in
#           that teardown (see kernel-nfs-rdma.sh part 3): then this is reported as a
#           client bug and the after-checks run over a v4.1/TCP mount instead.
# Every check prints "ok v4.1/rdma <what> (<secs>)" or "FAIL v4.1/rdma <what>" and exits
# 1; the last line is "KERNEL NFSV4.1/RDMA: PASS".
# Usage: kernel-nfs41-rdma.sh GATEWAY_BINARY (built with --features rdma)
# Knobs (environment): V41R_FILE_MIB [256], V41R_FIO_MIB [64], V41R_DIR_ENTRIES [10000],
# V41R_PARTS ["files locks deleg kill"], V41R_V3_PROTO [tcp], V41R_MOUNT_EXTRA [""]
# (extra mount options, e.g. "soft,timeo=100,retrans=1" while developing against a
# server that may not answer), V41R_KEEP_GOING [0] (1: go on after a failed check, to
# see every failure while developing; the script still fails at the end), GW_CORES ["0, 1"], V41R_OP_TIMEOUT [300] seconds for any
# single data-moving command.
set -euo pipefail
GW=${1:?gateway binary (built with --features rdma)}
BENCH=${BENCH:-$(dirname "$GW")/bench}   # a userspace client for after a client oops
GW_CORES=${GW_CORES:-0, 1}
ADDR=${RDMA_ADDR:-10.0.2.15}
PORT=20049
STATS=127.0.0.1:9108
MIB=${V41R_FILE_MIB:-256}
FIO_MIB=${V41R_FIO_MIB:-64}
NDIR=${V41R_DIR_ENTRIES:-10000}
PARTS=${V41R_PARTS:-files locks deleg kill}
V3_PROTO=${V41R_V3_PROTO:-tcp}
OPT_EXTRA=${V41R_MOUNT_EXTRA:-}
OPT_EXTRA=${OPT_EXTRA:+,$OPT_EXTRA}
TMO=${V41R_OP_TIMEOUT:-300}
M=/mnt41
M3=/mnt41v3
W=$(mktemp -d)
want() { [[ " $PARTS " == *" $1 "* ]]; }
cat > "$W/gw.toml" <<TOML
[engine]
cores = [$GW_CORES]
idle = "adaptive"
[tcp]
listen = "$ADDR:2049"
[rdma]
provider = "verbs"
listen = "$ADDR:$PORT"
[backend]
kind = "memory"
[state]
dir = "$W/state"
[stats]
listen = "$STATS"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
# A short lease: a recall the client never answers ends in a revocation within seconds,
# not after the default lease, so a broken back channel fails the check quickly.
cp "$W/gw.toml" "$W/gw-short.toml"
printf '[nfs4]\nlease_time_s = 20\n' >> "$W/gw-short.toml"
if "$GW" --check-config "$W/gw-short.toml" >/dev/null 2>&1; then mv "$W/gw-short.toml" "$W/gw.toml"; fi

umount_bounded() { # ARGS...: umount in the background, given up on (not killed) after 20 s
  umount "$@" 2>/dev/null & local p=$! i
  for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || { wait "$p"; return; }; sleep 0.2; done
  return 1
}
on_exit() {
  local rc=$?
  exec 7<&- 2>/dev/null || true
  [ -n "${DDPID:-}" ] && kill -9 "$DDPID" 2>/dev/null || true
  # Bounded: after a client oops (below) an unmount can block for ever in the kernel,
  # unkillable (D state), so it is never waited for more than 20 s.
  umount_bounded -f -l $M3 || true
  umount_bounded -f $M || umount_bounded -f -l $M || true
  [ -n "${GWPID:-}" ] && kill "$GWPID" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "KERNEL NFSV4.1/RDMA: FAILED (rc=$rc)"
    echo "--- gateway log tail"; grep -v ' DEBUG ' "$W/gw.log" | tail -n 30 || true
    echo "--- gateway debug tail"; tail -n 15 "$W/gw.log" || true
    echo "--- dmesg tail"; dmesg | tail -n 30 || true
    # the whole gateway log and dmesg, kept on the host in the run's directory
    # (tools/vm/vm.sh: VM_DIR/runs/run.*/)
    if [ -w /vmrun ]; then cp "$W/gw.log" /vmrun/gw-v41-rdma.log; dmesg > /vmrun/dmesg-v41-rdma.log; fi
  fi
}
trap on_exit EXIT
T0=$(date +%s.%N)
# shellcheck source=tests/vm/metrics.sh
. "$(dirname "$0")/metrics.sh"
# check DESCRIPTION CMD...: run CMD, print the result, abort on failure (as in
# kernel-nfs-rdma.sh; `set -e` is off inside CMD, so helpers return failures explicitly).
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   v4.1/rdma %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL v4.1/rdma $d"; [ "${V41R_KEEP_GOING:-0}" = 1 ] || exit 1; NFAIL=$((NFAIL + 1)); fi
}
NFAIL=0
say() { echo "v4.1/rdma: $*"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
gw_alive() { kill -0 "$GWPID" 2>/dev/null; }
gw_healthy() { gw_alive && ! grep -qi panic "$W/gw.log"; }

# RFC 8267 §6.3: NFSv4 over RDMA on port 20049, no rpcbind/MOUNT involved.
RDMA_OPTS=vers=4.1,proto=rdma,port=$PORT$OPT_EXTRA
TCP_OPTS=vers=4.1,proto=tcp,port=2049$OPT_EXTRA
V3_OPTS=vers=3,proto=$V3_PROTO,port=2049,mountport=2049,mountproto=tcp,nolock,retry=0
[ "$V3_PROTO" = rdma ] && V3_OPTS=vers=3,proto=rdma,port=$PORT,mountport=2049,mountproto=tcp,nolock,retry=0
v41_mount() { # rdma|tcp: the mount and /proc/mounts showing vers=4.1 and the transport
  local o=$RDMA_OPTS; [ "$1" = tcp ] && o=$TCP_OPTS
  timeout -s KILL 120 mount -t nfs -o "$o" "$ADDR:/" $M || return 1
  local opts; opts=$(awk -v m=$M '$2 == m {print $4}' /proc/mounts)
  grep -q 'vers=4\.1' <<<"$opts" && grep -qE "(^|,)proto=$1(,|$)" <<<"$opts"
}

# write_file MIB PATH SUMFILE / same_sum PATH SUMFILE: as in kernel-nfs-rdma.sh.
write_file() {
  head -c "$(( $1 << 20 ))" /dev/urandom | tee >(sha256sum > "$3") \
    | timeout -s KILL "$TMO" dd of="$2" bs=1M iflag=fullblock conv=fsync status=none || return 1
  local i; for i in $(seq 1 100); do [ -s "$3" ] && return 0; sleep 0.1; done; return 1
}
same_sum() { [ "$(timeout -s KILL "$TMO" sha256sum < "$1")" = "$(cat "$2")" ]; }
fio_verify() { # NAME FILE SIZE RW BS QD: O_DIRECT write, read back, crc32c of every block
  if timeout -s KILL "$TMO" fio --name="$1" --filename="$2" --size="$3" --rw="$4" --bs="$5" \
      --ioengine=libaio --iodepth="$6" --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --output="$W/fio-$1.log" && grep -q "err= 0" "$W/fio-$1.log"; then
    grep -E '^ +(READ|WRITE):' "$W/fio-$1.log" | sed "s/^ */  fio $1 /; s/, [0-9.]*[kMG]*B\/s-.*//"
  else
    tail -n 25 "$W/fio-$1.log" 2>/dev/null; return 1
  fi
}
# make_entries DIR N: N/10 files (OPEN+CLOSE each) and the rest directories (CREATE
# NF4DIR each); list_entries DIR N: after dropping caches the listing is exact.
make_entries() {
  local e; e="$W/$(basename "$1").expected"
  local nf=$(( $2 / 10 )) nd=$(( $2 - $2 / 10 ))
  mkdir "$1" || return 1
  { seq -f 'd%05g' 1 "$nd"; seq -f 'f%05g' 1 "$nf"; } > "$e"
  (cd "$1" && seq -f 'd%05g' 1 "$nd" | timeout -s KILL "$TMO" xargs -n 2000 mkdir \
     && seq -f 'f%05g' 1 "$nf" | while read -r n; do : > "$n" || exit 1; done)
}
list_entries() {
  local e; e="$W/$(basename "$1")"
  drop_caches
  LC_ALL=C timeout -s KILL "$TMO" ls "$1" > "$e.listed" || return 1
  [ "$(wc -l < "$e.listed")" -eq "$2" ] && cmp -s "$e.expected" "$e.listed"
}

# metric NAME[:RESULT]...: one scrape of the stats endpoint; prints, space-separated, the
# sum of the samples of each NAME (with result=RESULT when given) on RDMA connections
# (where samples carry a `transport` label only transport="rdma" counts; the
# nfsgw_delegations gauge has no such label).
metric() { metric_sum "$STATS" rdma "$@"; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(b > a)}'; }

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
modprobe rpcrdma 2>/dev/null || true
mkdir -p $M $M3
RUST_LOG=${RUST_LOG:-info,engine=debug} "$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
GWPID=$!
for _ in $(seq 1 200); do
  grep -q "verbs provider opened" "$W/gw.log" && (exec 3<>/dev/tcp/$ADDR/2049) 2>/dev/null && break
  gw_alive || { echo "gateway exited at startup"; cat "$W/gw.log"; exit 1; }
  sleep 0.1
done
stats_up() { metric nfsgw_delegations > /dev/null; }
check "gateway up (verbs provider, stats on $STATS)" stats_up

echo "=== NFSv4.1 over RDMA (mount -o $RDMA_OPTS)"
check "mount -t nfs -o $RDMA_OPTS $ADDR:/ $M: /proc/mounts says vers=4.1, proto=rdma" v41_mount rdma
grep " $M " /proc/mounts

# ---- files, fio, entries, namespace operations
if want files; then
check "$MIB MiB written (dd conv=fsync; WRITE data in RDMA read chunks)" write_file "$MIB" $M/big "$W/big.sum"
drop_caches
check "$MIB MiB read back, sha256 matches after dropping caches (READ data in write chunks)" \
  same_sum $M/big "$W/big.sum"
check "fio: $FIO_MIB MiB 1 MiB sequential write QD 4, read back, crc32c verified (O_DIRECT)" \
  fio_verify seq $M/fio-seq "${FIO_MIB}m" write 1m 4
check "fio: 8 MiB 4 KiB random write QD 16, read back, crc32c verified (O_DIRECT)" \
  fio_verify rand $M/fio-rand 8m randwrite 4k 16
rm -f $M/fio-seq $M/fio-rand
check "$NDIR entries (90 % directories, 10 % files) created in one directory" make_entries $M/many "$NDIR"
check "$NDIR entries listed back after dropping caches: count and names exact (READDIR, reply chunks)" \
  list_entries $M/many "$NDIR"
d=$M/ops
mkdir $d && echo "hello v41" > $d/a && mkdir $d/sub && : > $d/gone
mv $d/a $d/b
check "rename" test -f $d/b -a ! -e $d/a
ln -s b $d/link
check "symlink, readlink matches" test "$(readlink $d/link)" = b
check "symlink followed" test "$(cat $d/link)" = "hello v41"
chmod 640 $d/b; chmod 751 $d/sub
check "chmod" test "$(stat -c %a $d/b) $(stat -c %a $d/sub)" = "640 751"
rm $d/gone
check "remove (file)" test ! -e $d/gone
check "unmount" umount $M
check "mount again over RDMA" v41_mount rdma
check "after remount: mode 640/751, readlink b, rename and remove kept" \
  test "$(stat -c %a $d/b) $(stat -c %a $d/sub) $(readlink $d/link) $(cat $d/link) $(ls $d | tr '\n' ' ')" \
    = "640 751 b hello v41 b link sub "
check "after remount: $MIB MiB file intact" same_sum $M/big "$W/big.sum"
check "after remount: $NDIR entries listed exactly" list_entries $M/many "$NDIR"
rm $d/link $d/b && rmdir $d/sub $d
check "remove (symlink, file, directories)" test ! -e $d
fi

# ---- locks: two processes (the same rules as kernel-nfs41.sh over TCP)
if want locks; then
cat > "$W/locks.py" <<'PY'
"""Two processes lock one file: the second's non-blocking attempt gets EWOULDBLOCK while
the first holds the lock; its blocking attempt returns once the first releases.
MODE: flock | fcntl."""
import errno, fcntl, os, signal, sys, time
path, mode = sys.argv[1], sys.argv[2]
ex = fcntl.LOCK_EX
lock = (lambda fd, f: fcntl.flock(fd, f)) if mode == "flock" else (lambda fd, f: fcntl.lockf(fd, f))
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
lock(fd, ex)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    fd2 = os.open(path, os.O_RDWR)
    try:
        lock(fd2, ex | fcntl.LOCK_NB)
        os._exit(3)                       # got a lock the other process holds
    except OSError as e:
        if e.errno != errno.EWOULDBLOCK:
            print(f"second process: {e!r}", flush=True); os._exit(4)
    os.write(w, b"x")
    signal.alarm(90)
    t = time.monotonic()
    lock(fd2, ex)                         # blocks until the first releases
    print(f"second process got the lock {time.monotonic() - t:.1f}s after asking", flush=True)
    os._exit(0)
os.close(w)
if os.read(r, 1) != b"x":
    sys.exit(f"second process did not see the conflict (exit {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])})")
print("second process: non-blocking attempt got EWOULDBLOCK", flush=True)
time.sleep(1)
lock(fd, fcntl.LOCK_UN)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(0 if code == 0 else f"second process exited {code}")
PY
check "flock: second process gets EWOULDBLOCK, then the lock after release" \
  timeout -s KILL 120 python3 -S "$W/locks.py" $M/flock.lck flock
check "fcntl: second process gets EWOULDBLOCK, then the lock after release" \
  timeout -s KILL 120 python3 -S "$W/locks.py" $M/fcntl.lck fcntl
rm -f $M/flock.lck $M/fcntl.lck
fi

# ---- a delegation recalled over the RDMA back channel (RFC 8267 §6.5.2, RFC 8167)
if want deleg; then
printf 'old data\n' > $M/deleg.txt
check "mount -o $V3_OPTS $ADDR:/ $M3 (second client: NFSv3 over $V3_PROTO)" \
  timeout -s KILL 120 mount -t nfs -o "$V3_OPTS" "$ADDR:/" $M3
drop_caches
dg0=$(metric nfsgw_delegations) || { echo "FAIL v4.1/rdma reading the stats endpoint"; exit 1; }
exec 7< $M/deleg.txt                     # the reader: keeps the file open for reading
check "v4.1/RDMA reader opens the file and reads the old data" test "$(timeout -s KILL 60 cat <&7)" = "old data"
dg=$(metric nfsgw_delegations) || { echo "FAIL v4.1/rdma reading the stats endpoint"; exit 1; }
say "nfsgw_delegations: $dg0 -> $dg"
check "a read delegation is held by the v4.1/RDMA client (nfsgw_delegations went up)" gt "$dg0" "$dg"
read_counters() { # into rs ra cs cr rv
  local v
  v=$(metric nfsgw_delegation_recalls_total:sent nfsgw_delegation_recalls_total:answered \
        nfsgw_callbacks_total:sent nfsgw_callbacks_total:replied nfsgw_delegation_recalls_total:revoked) || return 1
  read -r rs ra cs cr rv <<<"$v"
}
read_counters || { echo "FAIL v4.1/rdma reading the stats endpoint"; exit 1; }
rs0=$rs ra0=$ra cs0=$cs cr0=$cr
check "NFSv3 writer rewrites the file (the gateway recalls the delegation first)" \
  timeout -s KILL 120 sh -c "printf 'new data\n' > $M3/deleg.txt"
read_counters || { echo "FAIL v4.1/rdma reading the stats endpoint"; exit 1; }
say "nfsgw_delegation_recalls_total (rdma): sent $rs0 -> $rs, answered $ra0 -> $ra;" \
  "nfsgw_callbacks_total (rdma): sent $cs0 -> $cs, replied $cr0 -> $cr; recalls revoked: $rv"
check "CB_RECALL sent over the RDMA back channel (recalls sent went up)" gt "$rs0" "$rs"
check "CB_RECALL answered by the client (recalls answered went up)" gt "$ra0" "$ra"
check "callbacks sent and replied over RDMA (nfsgw_callbacks_total sent, replied went up)" \
  sh -c "awk -v a=$cs0 -v b=$cs 'BEGIN {exit !(b > a)}' && awk -v a=$cr0 -v b=$cr 'BEGIN {exit !(b > a)}'"
check "v4.1/RDMA reader sees the new data" test "$(timeout -s KILL 60 cat $M/deleg.txt)" = "new data"
exec 7<&-
check "unmount the NFSv3 mount" umount $M3
rm $M/deleg.txt
fi

# ---- a client killed in the middle of a transfer
if want kill; then
dd if=/dev/zero of=$M/killed bs=1M count=512 status=none &
DDPID=$!
sleep 2
check "dd (512 MiB) still writing after 2 s" kill -0 "$DDPID"
kill -9 "$DDPID"
check "umount -f -l $M during the transfer" umount -f -l $M
dd_gone() { local i; for i in $(seq 1 150); do kill -0 "$DDPID" 2>/dev/null || return 0; sleep 0.2; done; return 1; }
# The guest's NFS/RDMA client (Debian 6.1) can oops tearing a forced unmount down
# mid-transfer (kernel-nfs-rdma.sh part 3; seen again 2026-11-24: __list_add_valid BUG
# under frwr_unmap_sync, and the kworker died holding its locks, so even a new TCP mount
# then hangs). A client kernel bug, reported loudly. What this part is about -- the
# gateway survives and serves every byte -- is then checked with a userspace client
# (bench over TCP, verified), and nothing else touches the guest's broken NFS client. VM_ASSUME_CLIENT_OOPS=4 takes that path without an oops (to test it; 3: kernel-nfs-rdma.sh part 3).
client_oopsed() { dmesg | grep -qE 'RIP: .*|BUG: |list_(add|del) corruption' && dmesg | grep -qE 'rpcrdma|frwr_|xprt_rdma'; }
OOPSED=
if [ "${VM_ASSUME_CLIENT_OOPS:-}" = 4 ] || { ! dd_gone && client_oopsed; }; then
  echo "WARN the guest kernel's NFS/RDMA client oopsed during the forced unmount (client bug, see dmesg below); the gateway is checked with a userspace client (bench over TCP)"
  dmesg | grep -E 'BUG: |RIP: |corruption' | head -n 5 || true
  OOPSED=1
else
  check "killed dd exited" dd_gone
  wait "$DDPID" 2>/dev/null || true
fi
DDPID=
check "gateway still running" gw_alive
# The oops can also come later, while the next mount tears the dead connection down
# (2026-11-30: list_del corruption under frwr_unmap_sync in rpciod; the dd had exited,
# the new mount hung until its timeout): a failed mount with that oops in dmesg takes
# the same userspace path; a failed mount without it fails the check.
if [ -z "$OOPSED" ]; then
  if v41_mount rdma; then check "new v4.1 mount over rdma works" true
  elif client_oopsed; then
    echo "WARN the guest kernel's NFS/RDMA client oopsed after the forced unmount (client bug, see dmesg below); the new mount hung; the gateway is checked with a userspace client (bench over TCP)"
    dmesg | grep -E 'BUG: |RIP: |corruption' | head -n 5 || true
    OOPSED=1
  else check "new v4.1 mount over rdma works" false
  fi
fi
if [ -n "$OOPSED" ]; then
  # libnfs's tools cannot mount from inside this guest (its MOUNT call is reset; they
  # work on the host), so the fresh client is our own bench over TCP (user space).
  bench_tcp() { # 16 x 1 MiB written and read back, every byte verified
    RUST_BACKTRACE=0 timeout -s KILL "$TMO" "$BENCH" --target "tcp://$ADDR:2049" --workload seqwrite \
      --bs 1048576 --qd 4 --ops 16 --size-mib 16 --file after-kill.dat --verify > "$W/bench-after.log" 2>&1 \
      && grep -q "0 failure(s)" "$W/bench-after.log"
  }
  check "a fresh userspace client over TCP: 16 MiB written after the kill, read back and verified (bench)" bench_tcp
  echo "v4.1/rdma: final unmount skipped: the guest's NFS client is broken"
else
  check "16 MiB written after the kill (dd conv=fsync)" write_file 16 $M/after-kill "$W/after.sum"
  drop_caches
  check "16 MiB read back, sha256 matches after dropping caches" same_sum $M/after-kill "$W/after.sum"
  if want files; then
    check "$MIB MiB file written before the kill still intact" same_sum $M/big "$W/big.sum"
    check "$NDIR entries still listed exactly" list_entries $M/many "$NDIR"
  fi
fi
fi

# NFSv4.2 over RDMA (RFC 7862 COMPOUNDs on the same transport; READ_PLUS is not
# DDP-eligible, RFC 8267 §6.1): a mount with no version negotiates 4.2, copy_file_range
# is a server-side COPY (bytes into the gateway over RDMA stay under 9 MiB for 8 MiB
# written), SEEK_HOLE finds a punched hole. (User xattrs and delegations over 4.2/RDMA:
# kernel-nfs42.sh with KERNEL_V42_PROTO=rdma, part 0 of kernel-nfs-rdma.sh.)
v42_mount() {
  timeout -s KILL 120 mount -t nfs -o "proto=rdma,port=$PORT$OPT_EXTRA" "$ADDR:/" $M || return 1
  local opts; opts=$(awk -v m=$M '$2 == m {print $4}' /proc/mounts)
  say "4.2 mount options: $opts"
  grep -q 'vers=4\.2' <<<"$opts" && grep -qE "(^|,)proto=rdma(,|$)" <<<"$opts"
}
v42_checks() {
  python3 -S - "$M" <<'PY'
import os, sys
m = sys.argv[1]
a, b = f"{m}/v42-a", f"{m}/v42-b"
with open(a, "wb") as f:
    f.write(os.urandom(8 << 20))
    os.fsync(f.fileno())
with open(a, "rb") as src, open(b, "wb") as dst:
    n = os.copy_file_range(src.fileno(), dst.fileno(), 8 << 20)
assert n == 8 << 20, n
os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
assert open(a, "rb").read() == open(b, "rb").read(), "copy differs"
PY
}
if [ -z "${OOPSED:-}" ]; then
  check "unmount the v4.1 mount" umount $M
  check "mount over rdma with no version: vers=4.2" v42_mount
  in0=$(metric nfsgw_bytes_in_total)
  cb0=$(metric nfsgw_callbacks_total:replied)
  check "NFSv4.2 over RDMA: 8 MiB written, copy_file_range (COPY), byte-exact" v42_checks
  in1=$(metric nfsgw_bytes_in_total)
  cb1=$(metric nfsgw_callbacks_total:replied)
  say "bytes into the gateway over RDMA during write + copy: $((in1 - in0)); callbacks answered over RDMA: $((cb1 - cb0))"
  check "the copy moved no file bytes (8 MiB written, under 9 MiB in)" test $((in1 - in0)) -lt $((9 << 20))
  check "fallocate -p over 4.2/RDMA" fallocate -p -o 1M -l 1M $M/v42-b
  check "SEEK_HOLE finds the punched hole" sh -c \
    "[ \"\$(xfs_io -r -c 'seek -h 0' $M/v42-b | awk '\$1 == \"HOLE\" {print \$2}')\" = $((1 << 20)) ]"
  rm -f $M/v42-a $M/v42-b
fi

[ -n "${OOPSED:-}" ] || check "final unmount" umount $M
check "gateway still running, no panic in its log" gw_healthy
echo "gateway log: $(wc -l < "$W/gw.log") lines, $(grep -c ' WARN ' "$W/gw.log" || true) WARN, $(grep -c ' ERROR ' "$W/gw.log" || true) ERROR"
grep -E ' (WARN|ERROR) ' "$W/gw.log" | sort -k3 | uniq -f2 -c | sort -rn | head -n 10 || true
metrics_get "$STATS" | grep -E "^(nfsgw_callbacks_total|nfsgw_delegation|nfsgw_rdma_callback|nfsgw_rpcrdma)" | sed "s/^/  /" || true
kill -TERM "$GWPID"
for _ in $(seq 1 100); do gw_alive || break; sleep 0.2; done
check "gateway stopped cleanly (SIGTERM)" sh -c "! kill -0 $GWPID 2>/dev/null"
GWPID=
[ "$NFAIL" = 0 ] || { echo "$NFAIL checks failed (V41R_KEEP_GOING=1)"; exit 1; }
echo "KERNEL NFSV4.1/RDMA: PASS"
