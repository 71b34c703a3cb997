#!/bin/bash
# PID 1 inside the guest, after the initramfs switched to the overlay root
# (see tools/vm/initramfs-init). vm.sh copies this file into the run directory,
# which the guest sees at /vmrun. It sets up the minimum a test script needs,
# runs the script (at its host path) with its arguments in the caller's
# directory, appends its output to /vmrun/output.log (the host streams that
# file), writes the exit code to /vmrun/rc and powers off. No systemd, no
# services: only what the script itself starts.
#
# With VM_INIT=systemd (kernel argument vm.systemd=1) it hands PID 1 to systemd
# (guest-systemd.sh), which runs this file again as vm-run.service with
# VM_UNDER_SYSTEMD=1: then systemd has mounted /run, /dev/pts and /dev/shm already.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [ "$$" = 1 ] && grep -qw vm.systemd=1 /proc/cmdline; then
  exec /bin/bash /vmrun/guest-systemd.sh
fi
rc=125
finish() {
  echo "$rc" > /vmrun/rc.tmp && mv /vmrun/rc.tmp /vmrun/rc
  # The sync is bounded: a guest kernel that oopsed in its NFS client (tests/README.md)
  # can leave dirty pages no sync ever finishes, and the exit code is on the host already.
  sync & sleep 0.5
  echo "vm-guest: exit code $rc, uptime $(cut -d' ' -f1 /proc/uptime)s" > /dev/console
  # -f: no init system to ask (or, under systemd, none worth the wait: the guest is thrown
  # away); -n: no second sync. The sysrq is the fallback; vm.sh stops QEMU if both hang.
  /bin/busybox poweroff -n -f 2>/dev/null; echo o > /proc/sysrq-trigger; sleep 30
}
trap finish EXIT

if [ -z "${VM_UNDER_SYSTEMD:-}" ]; then
  mkdir -p /dev/pts /dev/shm
  mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  mount -t tmpfs -o mode=755 tmpfs /run     # the host's /run (pid files, sockets) must not leak in
  mkdir -p /run/lock
  ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
fi
# /tmp stays the overlay's view of the host /tmp: host paths there remain visible.

. /vmrun/env          # VM_CWD, VM_SCRIPT, VM_ARGS=(...), VM_RXE, exported variables
hostname vm
echo "127.0.0.1 localhost" > /etc/hosts; echo "10.0.2.15 vm" >> /etc/hosts

# Loopback is what the tests use. eth0 is QEMU user-mode networking (slirp,
# restrict=on: no way out of the guest); it exists because Soft-RoCE needs a netdev.
ip link set lo up
modprobe -q virtio_net && ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 \
  && ip route add default via 10.0.2.2 || echo "vm-guest: eth0 setup failed" > /dev/console
ulimit -n 65536
ulimit -l unlimited   # RDMA memory registration (harmless otherwise)

# Soft-RoCE (rdma_rxe) on eth0, for RDMA tests: VM_RXE=1 on the host.
if [ "${VM_RXE:-0}" = 1 ]; then
  { modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm \
    && rdma link add rxe0 type rxe netdev eth0; } || echo "vm-guest: rxe0 setup failed" > /dev/console
fi

echo "vm-guest: ready (kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime)s)" > /dev/console
cd "$VM_CWD" || cd /
bash "$VM_SCRIPT" "${VM_ARGS[@]}" >> /vmrun/output.log 2>&1 < /dev/null
rc=$?
