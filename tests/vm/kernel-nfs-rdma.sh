#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1 tools/vm/vm.sh
# run-script): starts the gateway (built with `--features rdma`) with
# rdma.provider = "verbs" on the guest's eth0 address, mounts it with the kernel's
# NFSv3 client over RPC-over-RDMA (proto=rdma), writes and reads back a file (sha256
# after dropping the page cache), lists a directory and unmounts.
# The last line is printed only when every check passed.
# Usage: kernel-nfs-rdma.sh GATEWAY_BINARY
set -euo pipefail
GW=${1:?gateway binary (built with --features rdma)}
ADDR=${RDMA_ADDR:-10.0.2.15}   # eth0 in the guest (tools/vm/guest-init.sh); rxe0 sits on it
PORT=20049
MIB=${RDMA_FILE_MIB:-16}
W=$(mktemp -d)
cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
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
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
on_exit() {
  local rc=$?
  umount -f /mnt 2>/dev/null || true
  [ -n "${GWPID:-}" ] && kill "$GWPID" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "KERNEL NFS/RDMA: FAILED (rc=$rc)"
    echo "--- gateway log tail"; tail -n 40 "$W/gw.log" || true
    echo "--- dmesg tail"; dmesg | tail -n 30 || true
  fi
}
trap on_exit EXIT
T0=$(date +%s.%N)
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL $d"; exit 1; fi
}

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
rdma link show
modprobe rpcrdma 2>/dev/null || true

RUST_LOG=${RUST_LOG:-info,engine=debug} "$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
GWPID=$!
for _ in $(seq 1 200); do
  grep -q "verbs provider opened" "$W/gw.log" && (exec 3<>/dev/tcp/$ADDR/2049) 2>/dev/null && break
  kill -0 $GWPID 2>/dev/null || { echo "gateway exited at startup"; cat "$W/gw.log"; exit 1; }
  sleep 0.1
done
grep -m1 "verbs provider opened" "$W/gw.log" || true

# MOUNT goes over TCP to the same address; retry=0: fail at once instead of retrying 2 min
MOUNT_OPTS=vers=3,proto=rdma,port=$PORT,mountport=2049,mountproto=tcp,nolock,retry=0
check "mount -t nfs -o $MOUNT_OPTS $ADDR:/ /mnt" mount -t nfs -o "$MOUNT_OPTS" "$ADDR:/" /mnt
grep " /mnt " /proc/mounts

dd if=/dev/urandom of="$W/src" bs=1M count="$MIB" status=none
SUM=$(sha256sum < "$W/src")
check "$MIB MiB written over RDMA (dd conv=fsync)" dd if="$W/src" of=/mnt/file bs=1M conv=fsync status=none
echo 3 > /proc/sys/vm/drop_caches
check "$MIB MiB read back over RDMA, sha256 matches after dropping caches" test "$(sha256sum < /mnt/file)" = "$SUM"
mkdir /mnt/dir && touch /mnt/dir/a /mnt/dir/b /mnt/dir/c
echo 3 > /proc/sys/vm/drop_caches
check "directory listed" test "$(LC_ALL=C ls /mnt/dir | tr '\n' ' ')" = "a b c "
check "unmount" umount /mnt
# Teardown: the provider reports Disconnected only after the marker flushes came back.
down() { grep -q "verbs: connection down.*drained=true" "$W/gw.log"; }
for _ in $(seq 1 50); do down && break; sleep 0.2; done
check "disconnect seen by the gateway after all flushes (drained=true)" down
check "mount again (new connection after release)" mount -t nfs -o "$MOUNT_OPTS" "$ADDR:/" /mnt
check "after remount: file intact" test "$(sha256sum < /mnt/file)" = "$SUM"
rm -r /mnt/dir /mnt/file
check "final unmount" umount /mnt
grep -E "verbs: connection down" "$W/gw.log" || true
grep -E "rdma: (accepted|connection established)|verbs: accepted" "$W/gw.log" | head -n 4 || true
echo "KERNEL NFS/RDMA: PASS"
