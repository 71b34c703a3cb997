#!/usr/bin/env bash
# Runs INSIDE a Linux guest (tools/vm/vm.sh run-script; called by kernel-nfs-smoke.sh after
# its NFSv3 part): the kernel's NFSv4.1 client against a server, one clear line per check,
# exit 1 at the first failure.
#
#   kernel-nfs41.sh gateway GATEWAY_BINARY   # the gateway on the fs backend, port 2049,
#                                            # stats on 127.0.0.1:9108
#   kernel-nfs41.sh knfsd                    # the guest kernel's own nfsd (a tmpfs export):
#                                            # the same checks against the reference server
#
# Checks: `mount -t nfs SERVER:/ /mnt4` with no version and no nolock negotiates 4.1
# (/proc/mounts); files, directories, rename, symlink, chmod, truncate, a 64 MiB file
# byte-exact after dropping caches, 10,000 entries listed exactly, the POSIX rules of
# kernel-posix.py on a noac mount; flock and fcntl locks from two processes conflict
# (EWOULDBLOCK) and the second gets the lock once the first releases it; a delegation
# recall (a reader holds the file open on the v4.1 mount, a vers=3,nolock mount of the
# same export writes it, the gateway's nfsgw_delegation_recalls_total shows a recall
# sent and answered, the v4.1 reader then sees the new data); a restart during a
# workload (a writer writes+fsyncs files on the v4.1 mount, the server is killed --
# SIGKILL for the gateway, all nfsd threads stopped for knfsd -- and restarted with the
# same state, the writer goes on after the client reclaims, every fsync'ed file is
# byte-exact afterwards). Last line: "KERNEL NFSV4.1 (<server>): PASS".
set -euo pipefail
SERVER=${1:?gateway or knfsd}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
M=/mnt4
M3=/mnt4v3
STATS=127.0.0.1:9108
SRVPID=""

say() { echo "v4.1: $*"; }
# V41_PARTS: the parts to run (development), default all of them.
V41_PARTS=${V41_PARTS:-files posix locks deleg restart}
want() { [[ " $V41_PARTS " == *" $1 "* ]]; }
T0=$(date +%s.%N)
# shellcheck source=tests/vm/metrics.sh
. "$(dirname "$0")/metrics.sh"
# check DESCRIPTION CMD...: run CMD, print the result, abort on failure.
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   v4.1 %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL v4.1 $d"; exit 1; fi
}

# ---- the server ---------------------------------------------------------------------
case "$SERVER" in
gateway)
  GW=${2:?gateway binary}
  # The fs backend keeps metadata in user xattrs, which the guest's tmpfs-backed
  # overlay (kernel 6.1) refuses: data and state go on a small ext4 loop device.
  modprobe loop 2>/dev/null || true
  modprobe ext4 2>/dev/null || true
  truncate -s 768M "$W/disk.img"
  mkfs.ext4 -q -F "$W/disk.img"
  mkdir -p "$W/disk"
  mount -o loop "$W/disk.img" "$W/disk"
  mkdir -p "$W/disk/data" "$W/disk/state"
  ln -s "$W/disk/data" "$W/data"; ln -s "$W/disk/state" "$W/state"
  cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:2049"
[backend]
kind = "fs"
root = "$W/data"
[state]
dir = "$W/state"
[stats]
listen = "$STATS"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
TOML
  # Short lease and grace periods (the restart check waits for the grace period), when
  # the binary knows the [nfs4] keys.
  cp "$W/gw.toml" "$W/gw-short.toml"
  # max_minor_version = 1: these checks are about 4.1 (kernel-nfs42.sh mounts 4.2).
  printf '[nfs4]\nlease_time_s = 15\ngrace_time_s = 15\nmax_minor_version = 1\n' >> "$W/gw-short.toml"
  if "$GW" --check-config "$W/gw-short.toml" >/dev/null 2>&1; then
    mv "$W/gw-short.toml" "$W/gw.toml"; say "gateway: lease and grace 15 s"
  else
    say "gateway: no [nfs4] lease/grace keys in this binary: its defaults"
  fi
  GWN=0
  server_start() {
    GWN=$((GWN + 1))
    "$GW" --config "$W/gw.toml" > "$W/gw.$GWN.log" 2>&1 &
    SRVPID=$!
    for _ in $(seq 1 200); do
      (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && return 0
      kill -0 $SRVPID 2>/dev/null || { echo "gateway exited at startup"; tail -n 20 "$W/gw.$GWN.log"; return 1; }
      sleep 0.1
    done
    return 1
  }
  server_crash() { kill -KILL $SRVPID; wait $SRVPID 2>/dev/null || true; }
  server_stop() { [ -n "$SRVPID" ] && kill $SRVPID 2>/dev/null; wait $SRVPID 2>/dev/null || true; }
  server_log() {
    tail -n 30 "$W/gw.$GWN.log"
    echo "backend objects left (hidden ones included):"; find "$W/disk/data" -mindepth 1 | head -n 20
  }
  V3_OPTS=vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock
  EXPORT=127.0.0.1:/
  EXPORT3=127.0.0.1:/
  ;;
knfsd)
  modprobe nfsd
  mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
  mkdir -p /export41 /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery /run/rpcbind
  mountpoint -q /var/lib/nfs/rpc_pipefs || mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs 2>/dev/null || true
  # the guest's / is an overlay (not exportable): a tmpfs, which needs an fsid
  mountpoint -q /export41 || mount -t tmpfs -o size=1g tmpfs /export41
  # fsid=0: the NFSv4 pseudo-root (the overlay / cannot be one), so NFSv4 mounts
  # 127.0.0.1:/ and NFSv3 127.0.0.1:/export41
  echo "/export41 *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0)" > /etc/exports
  # short lease and grace periods: the restart check waits for the grace period
  echo 15 > /proc/fs/nfsd/nfsv4leasetime
  echo 15 > /proc/fs/nfsd/nfsv4gracetime
  rpcbind -w
  exportfs -ra
  rpc.mountd
  # no 4.2 (the client would pick it): the checks are about 4.1
  server_start() { rpc.nfsd -N 4.2 4; }
  server_crash() { rpc.nfsd 0; }
  server_stop() { rpc.nfsd 0 2>/dev/null || true; }
  server_log() { dmesg | tail -n 20; }
  V3_OPTS=vers=3,proto=tcp,nolock
  EXPORT=127.0.0.1:/
  EXPORT3=127.0.0.1:/export41
  ;;
*) echo "usage: kernel-nfs41.sh gateway GATEWAY_BINARY | knfsd"; exit 2 ;;
esac

on_exit() {
  local rc=$?
  exec 7<&- 2>/dev/null || true
  [ -n "${WPID:-}" ] && kill -KILL "$WPID" 2>/dev/null
  umount -f -l $M3 2>/dev/null || true
  umount -f -l $M 2>/dev/null || true
  server_stop
  mountpoint -q "$W/disk" 2>/dev/null && umount -l "$W/disk"
  if [ $rc -ne 0 ]; then echo "KERNEL NFSV4.1 ($SERVER): FAILED (rc=$rc); server log tail:"; server_log || true; fi
}
trap on_exit EXIT
mkdir -p $M $M3
check "server ($SERVER) up" server_start

# ---- mount: no version, no nolock --------------------------------------------------------
check "mount -t nfs $EXPORT $M (no vers, no nolock)" mount -t nfs "$EXPORT" $M
opts=$(awk -v m=$M '$2 == m {print $4}' /proc/mounts)
say "mount options: $opts"
check "/proc/mounts shows vers=4.1" grep -q 'vers=4\.1' <<<"$opts"

# ---- files and directories ------------------------------------------------------------------
if want files; then
mkdir $M/d; mkdir -p $M/d/e/f
dd if=/dev/urandom of="$W/src" bs=1M count=32 status=none
cp "$W/src" $M/d/file; sync
check "32 MiB written and read back through the page cache" cmp "$W/src" $M/d/file
echo 3 > /proc/sys/vm/drop_caches
check "32 MiB read back byte-exact after dropping caches" cmp "$W/src" $M/d/file
dd if=/dev/urandom of="$W/big" bs=1M count=64 status=none
BIG_SUM=$(sha256sum < "$W/big")
dd if="$W/big" of=$M/big bs=1M conv=fsync status=none
echo 3 > /proc/sys/vm/drop_caches
check "64 MiB dd write, sha256 matches after dropping caches" test "$(sha256sum < $M/big)" = "$BIG_SUM"
mv $M/d/file $M/d/moved
check "rename" test -f $M/d/moved -a ! -e $M/d/file
ln -s moved $M/d/link
check "symlink (readlink)" test "$(readlink $M/d/link)" = moved
check "symlink (follow)" cmp "$W/src" $M/d/link
chmod 600 $M/d/moved
check "chmod" test "$(stat -c %a $M/d/moved)" = 600
truncate -s 1000 $M/d/moved
check "truncate" test "$(stat -c %s $M/d/moved)" = 1000
rm $M/d/link $M/d/moved && rmdir $M/d/e/f $M/d/e $M/d
check "remove" test ! -e $M/d

# 10,000 entries (V41_ENTRIES), created by 4 parallel processes, listed after dropping
# caches. The slowest check under a software CPU: minutes.
N=${V41_ENTRIES:-10000}
mkdir $M/many
# (open+close: OPEN and CLOSE per file, no SETATTR as touch would add)
# (bash's `>>`, not python3, whose start costs seconds in the rig's TCG guest)
(cd $M/many && seq -f 'entry-%05g' 1 "$N" | xargs -P 4 -n $(((N + 3) / 4)) \
  bash -c 'for n; do : >> "$n"; done' _)
seq -f 'entry-%05g' 1 "$N" > "$W/many.expected"
echo 3 > /proc/sys/vm/drop_caches
LC_ALL=C ls $M/many > "$W/many.listed"
check "$N-entry directory listed completely and exactly" cmp "$W/many.expected" "$W/many.listed"
# Removed by 4 processes, as they were created: the REMOVEs `rm -r` sends (each after a
# LOOKUP: the caches were dropped) and its RMDIR, several in flight. One `rm -r` sent
# them one at a time: 22 s under the software CPU (counted in the unmount below then).
(cd $M/many && xargs -P 4 -n $(((N + 3) / 4)) rm -- < "$W/many.expected")
check "$N entries removed (rmdir of the emptied directory)" rmdir $M/many
fi

# ---- POSIX rules (noac: every stat asks the server) -------------------------------------------
if want posix; then
check "unmount (remount with noac for the POSIX checks)" umount $M
check "mount -o noac" mount -t nfs -o noac "$EXPORT" $M
mkdir $M/posix
check "POSIX rules through the v4.1 client (kernel-posix.py)" python3 -S "$HERE/kernel-posix.py" $M/posix
rm -rf $M/posix
check "unmount" umount $M
check "mount again" mount -t nfs "$EXPORT" $M
if [ -e $M/big ]; then
  check "after remount: 64 MiB file intact" test "$(sha256sum < $M/big)" = "$BIG_SUM"
  rm $M/big
fi
fi

# ---- locks: two processes ---------------------------------------------------------------------
if want locks; then
cat > "$W/locks.py" <<'PY'
"""Two processes lock one file on the v4.1 mount: the second's non-blocking attempt gets
EWOULDBLOCK while the first holds the lock; its blocking attempt returns once the first
releases. MODE: flock | fcntl."""
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

# ---- delegation recall ------------------------------------------------------------------------
if want deleg; then
# recalls RESULT: the gateway's nfsgw_delegation_recalls_total{transport=*,result="RESULT"},
# summed over transports (0 if absent)
recalls() { metric_sum "$STATS" "" "nfsgw_delegation_recalls_total:$1"; }
printf 'old data\n' > $M/deleg.txt
check "mount -o $V3_OPTS (second client: NFSv3)" mount -t nfs -o "$V3_OPTS" "$EXPORT3" $M3
sync; echo 3 > /proc/sys/vm/drop_caches
exec 7< $M/deleg.txt                     # the reader: keeps the file open for reading
check "v4.1 reader reads the old data" test "$(cat <&7)" = "old data"
if [ "$SERVER" = gateway ]; then
  sent0=$(recalls sent) && answered0=$(recalls answered 2>/dev/null) \
    || { echo "FAIL v4.1 reading the gateway's stats endpoint"; exit 1; }
fi
check "NFSv3 writer rewrites the file (the server recalls the delegation first)" \
  timeout -s KILL 120 sh -c "printf 'new data\n' > $M3/deleg.txt"
if [ "$SERVER" = gateway ]; then
  sent=$(recalls sent) && answered=$(recalls answered 2>/dev/null) \
    || { echo "FAIL v4.1 reading the gateway's stats endpoint"; exit 1; }
  say "nfsgw_delegation_recalls_total: sent $sent0 -> $sent, answered $answered0 -> $answered"
  check "a recall was sent" awk -v a="$sent0" -v b="$sent" 'BEGIN {exit !(b > a)}'
  check "the recall was answered" awk -v a="$answered0" -v b="$answered" 'BEGIN {exit !(b > a)}'
else
  say "knfsd: no recall counters to read (data check only)"
fi
check "v4.1 reader sees the new data" test "$(cat $M/deleg.txt)" = "new data"
exec 7<&-
check "unmount the NFSv3 mount" umount $M3
rm $M/deleg.txt
fi

# ---- restart during a workload ----------------------------------------------------------------
if want restart; then
cat > "$W/writer.py" <<'PY'
"""Writes files f-N (N = 1, 2, ...; 128 KiB of bytes derived from N), fsyncs each and
only then logs N (to a local file), until the stop file exists. Any error ends it with
a non-zero status."""
import hashlib, os, sys
d, log, stop = sys.argv[1], sys.argv[2], sys.argv[3]
def content(n):
    seed = hashlib.sha256(str(n).encode()).digest()
    return (seed * (128 * 1024 // 32))
n = 0
with open(log, "a", buffering=1) as lg:
    while not os.path.exists(stop):
        n += 1
        fd = os.open(f"{d}/f-{n}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, content(n))
        os.fsync(fd)
        os.close(fd)
        lg.write(f"{n}\n")
PY
cat > "$W/verify.py" <<'PY'
import hashlib, sys
d, log = sys.argv[1], sys.argv[2]
done = [int(x) for x in open(log).read().split()]
bad = 0
for n in done:
    seed = hashlib.sha256(str(n).encode()).digest()
    want = seed * (128 * 1024 // 32)
    try:
        got = open(f"{d}/f-{n}", "rb").read()
    except OSError as e:
        got = repr(e).encode()
    if got != want:
        bad += 1
        if bad <= 5:
            print(f"f-{n}: {len(got)} bytes, not the {len(want)} written", flush=True)
print(f"{len(done)} fsync'ed files checked, {bad} wrong", flush=True)
sys.exit(1 if bad or not done else 0)
PY
mkdir $M/restart
: > "$W/written"
timeout -s KILL 300 python3 -S "$W/writer.py" $M/restart "$W/written" "$W/stop" &
WPID=$!
# Let it write a few files first (python starts slowly under a software CPU).
for _ in $(seq 1 120); do
  [ "$(wc -l < "$W/written")" -ge 5 ] && break
  kill -0 $WPID 2>/dev/null || break
  sleep 0.5
done
before=$(wc -l < "$W/written")
check "writer running before the crash ($before files fsync'ed)" test "$before" -ge 5
check "server killed during the workload" server_crash
sleep 1
check "server restarted with the same state" server_start
# The writer blocks while the server is down; after the restart the client reclaims
# its state (grace period) and the writer goes on.
deadline=$(( $(date +%s) + 180 ))
while [ "$(wc -l < "$W/written")" -le $((before + 5)) ] && [ "$(date +%s)" -lt $deadline ]; do
  kill -0 $WPID 2>/dev/null || break
  sleep 1
done
after=$(wc -l < "$W/written")
say "writer: $before files before the crash, $after now"
check "writer continued after the restart" test "$after" -gt $((before + 5))
touch "$W/stop"
check "writer finished without an error" wait $WPID
WPID=""
sync; echo 3 > /proc/sys/vm/drop_caches
check "every fsync'ed file byte-exact after the restart" python3 -S "$W/verify.py" $M/restart "$W/written"
rm -r $M/restart
fi

check "after cleanup: export root empty" test -z "$(ls -A $M)"
check "final unmount" umount $M
echo "KERNEL NFSV4.1 ($SERVER): PASS"
