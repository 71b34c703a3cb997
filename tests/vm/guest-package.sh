#!/usr/bin/env bash
# Runs INSIDE the guest (tests/vm/guest-stages.sh, stage "package"): the Debian package
# the way an operator uses it (docs/operations.md). Installs the .deb with apt, starts
# the service, mounts the default export /data with the kernel's NFSv3 client, writes
# and reads a file, upgrades to a second revision (configuration and state kept), then
# `apt remove` (configuration kept) and `apt purge` (configuration gone, data kept).
#
# The guest boots with systemd as PID 1 (tests/vm/run-vm-stages.sh boots this stage
# alone with VM_INIT=systemd, tools/vm/guest-systemd.sh), so the service is the
# package's unit run by systemd: `systemctl enable --now nfsgw` (Type=notify: READY=1),
# the maintainer scripts' restart on upgrade and stop on remove, the unit's User=,
# capabilities, ProtectSystem= and PrivateTmp=.
#
# The guest's root is an overlay with a tmpfs upper layer, whose Linux 6.1 has no
# user.* extended attributes, which the fs backend needs; /var/lib/nfsgw is therefore
# an ext4 file system on a loop device, as it would be a disk on a server.
#
# Usage: guest-package.sh NFSGW_DEB [NFSGW_DEB_REV2]
set -euo pipefail
[ "$(cat /proc/1/comm)" = systemd ] || { echo "guest-package.sh: PID 1 is $(cat /proc/1/comm), not systemd (boot with VM_INIT=systemd)"; exit 1; }
DEB=$(readlink -f "${1:?the .deb}")
DEB2=$(readlink -f "${2:-$1}")
W=$(mktemp -d)

T0=$(date +%s.%N)
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL $d"; exit 1; fi
}
on_exit() {
  local rc=$?
  umount -f /mnt 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "PACKAGE: FAILED (rc=$rc); the service's journal:"
    systemctl status --no-pager nfsgw 2>&1 | head -n 12
    journalctl -u nfsgw --no-pager -n 30 2>&1
  fi
}
trap on_exit EXIT

svc() { systemctl show -P "$1" nfsgw; }
active() { test "$(systemctl is-active nfsgw)" = active; }
# The service's main process runs as the user nfsgw with exactly the unit's capabilities.
runs_as_nfsgw() {
  local pid; pid=$(svc MainPID)
  test "$pid" -gt 0 && test "$(ps -o user= -p "$pid")" = nfsgw \
    && grep -q "^CapAmb:.*0000000000004400$" "/proc/$pid/status"
}
# SIGTERM (systemctl stop) ends the gateway with exit 0 after it flushed.
stops_cleanly() {
  systemctl stop nfsgw && test "$(svc Result)" = success && test "$(svc ExecMainStatus)" = 0
}
port_free() { ! ss -Htln 'sport = :2049' | grep -q .; }
gone_and_port_free() { ! systemctl is-active -q nfsgw && port_free; }
restarted_since() { active && test "$(svc MainPID)" != "$1"; }
v41_reads() {
  mount -t nfs -o vers=4.1,proto=tcp,port=2049 127.0.0.1:/data /mnt && cmp "$W/src" /mnt/hello && umount /mnt
}
unit_gone() {
  test ! -e /usr/lib/systemd/system/nfsgw.service \
    && test ! -e /etc/systemd/system/multi-user.target.wants/nfsgw.service
}

# What the boot cost (the stage's budget counts it). (`systemd-analyze blame` hangs here.)
systemd-analyze time 2>/dev/null | head -n 1 || true

MOUNT_OPTS=vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock
modprobe loop; modprobe ext4
truncate -s 256M "$W/disk.img"
mkfs.ext4 -q -F "$W/disk.img"
mkdir -p /var/lib/nfsgw
check "/var/lib/nfsgw on ext4 (loop)" mount -o loop "$W/disk.img" /var/lib/nfsgw

export DEBIAN_FRONTEND=noninteractive
# man-db's trigger re-indexes every manual page of the root (the host's, over 9p):
# minutes under the software CPU. Without this file it skips that (the guest is
# throwaway; the page itself is checked below).
rm -f /var/lib/man-db/auto-update
# The guest has no network: apt needs nothing but the .deb, its dependencies (libc6,
# adduser) being installed (the guest's root is the host's, tools/vm/vm.sh). So apt reads
# no package lists: with the host's sources it rebuilt its cache from every list in
# /var/lib/apt/lists (26 MB) at each of the four runs below, once the previous run had
# changed dpkg's status (about 15 s a run under the software CPU).
: >"$W/sources.list"
APT=(apt-get -o Dir::Etc::SourceList="$W/sources.list" -o Dir::Etc::SourceParts="$W/none"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
check "apt install ./$(basename "$DEB")" "${APT[@]}" install -y -qq "$DEB"
check "user nfsgw exists" getent passwd nfsgw
check "data and state owned by nfsgw" test "$(stat -c %U /var/lib/nfsgw/data /var/lib/nfsgw/state | sort -u)" = nfsgw
check "nfsgw --check-config /etc/nfsgw/nfsgw.toml" nfsgw --check-config /etc/nfsgw/nfsgw.toml
check "man nfsgw is installed" test -s /usr/share/man/man1/nfsgw.1.gz
check "installed, neither enabled nor started" test "$(systemctl is-enabled nfsgw)/$(systemctl is-active nfsgw)" = disabled/inactive
check "systemctl enable --now nfsgw" systemctl enable --now nfsgw
check "systemctl is-active nfsgw (READY=1 came)" active
check "enabled for multi-user.target" test "$(systemctl is-enabled nfsgw)" = enabled
check "runs as nfsgw with CAP_NET_BIND_SERVICE + CAP_IPC_LOCK only" runs_as_nfsgw
check "mount 127.0.0.1:/data (NFSv3)" mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
head -c 1048576 /dev/urandom > "$W/src"
cp "$W/src" /mnt/hello; sync
umount /mnt
mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
check "1 MiB written and read back" cmp "$W/src" /mnt/hello
check "the object is in /var/lib/nfsgw/data" cmp "$W/src" /var/lib/nfsgw/data/hello
umount /mnt
check "mount 127.0.0.1:/data (NFSv4.1), read back" v41_reads
check "systemctl reload nfsgw" systemctl reload nfsgw
check "still active after the reload" active
check "systemctl stop: SIGTERM, exit 0" stops_cleanly
check "handle key and table in /var/lib/nfsgw/state" test -n "$(ls -A /var/lib/nfsgw/state)"
check "systemctl start nfsgw" systemctl start nfsgw
check "active again" active

# Upgrade while the service runs and a client has the export mounted: the package's
# scripts restart the service on the new binary (cargo-deb's restart-after-upgrade);
# a changed conffile is kept (dpkg asks only when the package's copy changed too;
# --force-confold answers "keep" as apt's default does), state and data are kept, and
# the client's file handles stay valid across the restart (the handle key in state/).
sed -i 's/^idle = "adaptive"/idle = "adaptive"   # edited by the operator/' /etc/nfsgw/nfsgw.toml
# The handle key must stay byte for byte; the table's files change with every start
# (its journal, SQLite's WAL), which is why the mounted client below is the real check.
sha256sum /var/lib/nfsgw/state/handle.key > "$W/key.before"
mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
pid1=$(svc MainPID)
check "upgrade to $(basename "$DEB2") (service running)" "${APT[@]}" install -y -qq --reinstall -o Dpkg::Options::=--force-confold "$DEB2"
check "upgrade restarted the service" restarted_since "$pid1"
check "upgrade kept the edited configuration" grep -q "edited by the operator" /etc/nfsgw/nfsgw.toml
check "upgrade kept the handle key and table" \
  sh -c "sha256sum -c --quiet $W/key.before && test -s /var/lib/nfsgw/state/handles.db"
check "the client's mount still reads the file (handles valid)" cmp "$W/src" /mnt/hello
umount /mnt

check "apt remove nfsgw (service running)" "${APT[@]}" remove -y -qq nfsgw
check "remove: service stopped, port 2049 free" gone_and_port_free
check "remove: binary gone" test ! -e /usr/bin/nfsgw
check "remove: configuration kept" grep -q "edited by the operator" /etc/nfsgw/nfsgw.toml
check "apt purge nfsgw" "${APT[@]}" purge -y -qq nfsgw
check "purge: unit and its enablement gone" unit_gone
check "purge: /etc/nfsgw gone" test ! -e /etc/nfsgw
check "purge: data kept" cmp "$W/src" /var/lib/nfsgw/data/hello
check "purge: state kept (NFSGW_PURGE_STATE unset)" test -d /var/lib/nfsgw/state
check "purge: package gone" test -z "$(dpkg-query -W -f='${Status}' nfsgw 2>/dev/null | grep -v not-installed)"
umount /var/lib/nfsgw
echo "PACKAGE: PASS"
