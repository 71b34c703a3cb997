#!/usr/bin/env bash
# Runs INSIDE a Linux guest that has the kernel NFS client (e.g. the VM rig): starts the
# gateway on the memory backend, mounts it with the kernel's NFSv3 client over TCP and
# exercises the common file operations a real client sends (LOOKUP, CREATE, WRITE,
# COMMIT, READ, READDIRPLUS, RENAME, SYMLINK, SETATTR, REMOVE, RMDIR, FSSTAT).
# Usage: kernel-nfs-smoke.sh GATEWAY_BINARY
set -euo pipefail
GW=${1:?gateway binary}
W=$(mktemp -d)
cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "127.0.0.1:2049"
[backend]
kind = "memory"
[state]
dir = "$W/state"
[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
squash = "none"
TOML
"$GW" --config "$W/gw.toml" > "$W/gw.log" 2>&1 &
GWPID=$!
trap 'umount -f /mnt 2>/dev/null || true; kill $GWPID 2>/dev/null || true; tail -20 "$W/gw.log"' EXIT
sleep 1
mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock 127.0.0.1:/ /mnt
echo "mounted"; df -h /mnt | tail -1
mkdir /mnt/d; mkdir -p /mnt/d/e/f
dd if=/dev/urandom of="$W/src" bs=1M count=32 status=none
cp "$W/src" /mnt/d/file; sync
cmp "$W/src" /mnt/d/file && echo "32 MiB written and read back through the page cache"
echo 3 > /proc/sys/vm/drop_caches
cmp "$W/src" /mnt/d/file && echo "read back byte-exact after dropping caches"
for i in $(seq 1 500); do : > /mnt/d/e/n$i; done
test "$(ls /mnt/d/e | wc -l)" = 501 && echo "500 files + 1 dir listed"
mv /mnt/d/file /mnt/d/moved && test -f /mnt/d/moved && echo "rename ok"
ln -s moved /mnt/d/link && test "$(readlink /mnt/d/link)" = moved && cmp "$W/src" /mnt/d/link && echo "symlink ok"
chmod 600 /mnt/d/moved && test "$(stat -c %a /mnt/d/moved)" = 600 && echo "chmod ok"
truncate -s 1000 /mnt/d/moved && test "$(stat -c %s /mnt/d/moved)" = 1000 && echo "truncate ok"
rm /mnt/d/link /mnt/d/moved && rm -r /mnt/d/e && rmdir /mnt/d && echo "remove ok"
: > /mnt/x
if ln /mnt/x /mnt/y 2>/dev/null; then echo "hard link unexpectedly worked"; exit 1; fi
rm /mnt/x && echo "hard link refused (NOTSUPP)"
umount /mnt && echo "unmounted"
mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock 127.0.0.1:/ /mnt
ls -la /mnt; umount /mnt
echo "KERNEL CLIENT SMOKE: PASS"
