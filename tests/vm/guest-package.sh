#!/usr/bin/env bash
# Runs INSIDE the guest (tests/vm/guest-stages.sh, stage "package"): the Debian package
# the way an operator uses it (docs/operations.md). Installs the .deb with apt, starts
# the service, mounts the default export /data with the kernel's NFSv3 client, writes
# and reads a file, upgrades to a second revision (configuration and state kept), then
# `apt remove` (configuration kept) and `apt purge` (configuration gone, data kept).
#
# The guest boots a custom init (tools/vm/guest-init.sh), not systemd, so
# `systemctl enable --now nfsgw` cannot run here. Instead this script starts the
# installed unit the way systemd would: it reads ExecStartPre/ExecStart, User,
# WorkingDirectory, Environment and AmbientCapabilities from
# /usr/lib/systemd/system/nfsgw.service and runs them with setpriv as that user with those
# capabilities, with NOTIFY_SOCKET set, waiting for READY=1 (Type=notify).
#
# The guest's root is an overlay with a tmpfs upper layer, whose Linux 6.1 has no
# user.* extended attributes, which the fs backend needs; /var/lib/nfsgw is therefore
# an ext4 file system on a loop device, as it would be a disk on a server.
#
# Usage: guest-package.sh NFSGW_DEB [NFSGW_DEB_REV2]
set -euo pipefail
DEB=$(readlink -f "${1:?the .deb}")
DEB2=$(readlink -f "${2:-$1}")
UNIT=/usr/lib/systemd/system/nfsgw.service
W=$(mktemp -d)
# The notification socket where the service user can reach it ($W is root's, mode 0700).
N=$(mktemp -d /run/nfsgw-notify.XXXXXX)
chmod 0755 "$N"
GWPID=

T0=$(date +%s.%N)
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL $d"; exit 1; fi
}
on_exit() {
  local rc=$?
  umount -f /mnt 2>/dev/null || true
  [ -n "$GWPID" ] && kill "$GWPID" 2>/dev/null || true
  if [ $rc -ne 0 ]; then echo "PACKAGE: FAILED (rc=$rc); gateway log tail:"; tail -n 20 "$W/gw.log" 2>/dev/null; fi
}
trap on_exit EXIT

unit_key() { sed -n "s/^$1=//p" "$UNIT" | head -n 1; }

# Starts the service as systemd would for Type=notify; returns once READY=1 arrived.
service_start() {
  local user caps pre start
  user=$(unit_key User)
  caps=$(unit_key AmbientCapabilities | tr 'A-Z' 'a-z' | sed 's/cap_//g; s/ /,+/g; s/^/+/')
  pre=$(unit_key ExecStartPre)
  start=$(unit_key ExecStart)
  cd "$(unit_key WorkingDirectory)"
  local run=(setpriv --reuid="$user" --regid="$user" --init-groups
             --inh-caps="$caps" --ambient-caps="$caps" env $(unit_key Environment))
  "${run[@]}" $pre >>"$W/gw.log" 2>&1 || { echo "ExecStartPre failed"; return 1; }
  rm -f "$N/notify"
  python3 - "$N/notify" >"$W/ready" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(120)
import os; os.chmod(sys.argv[1], 0o777)
while True:
    m = s.recv(256).decode()
    if "READY=1" in m.split("\n"):
        print("READY=1"); break
PY
  local py=$!
  # Python starts in seconds under the software CPU: the socket must exist first.
  for _ in $(seq 600); do [ -S "$N/notify" ] && break; sleep 0.1; done
  [ -S "$N/notify" ] || { echo "notification socket never appeared"; return 1; }
  NOTIFY_SOCKET=$N/notify "${run[@]}" $start >>"$W/gw.log" 2>&1 &
  GWPID=$!
  cd /
  wait $py && grep -qx READY=1 "$W/ready"
}
service_stop() { kill -TERM "$GWPID"; wait "$GWPID"; local rc=$?; GWPID=; return $rc; }

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
check "service started as nfsgw (READY=1)" service_start
check "gateway runs as nfsgw" test "$(ps -o user= -p "$GWPID")" = nfsgw
check "mount 127.0.0.1:/data" mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
head -c 1048576 /dev/urandom > "$W/src"
cp "$W/src" /mnt/hello; sync
umount /mnt
mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
check "1 MiB written and read back" cmp "$W/src" /mnt/hello
check "the object is in /var/lib/nfsgw/data" cmp "$W/src" /var/lib/nfsgw/data/hello
umount /mnt
check "SIGTERM: exit 0" service_stop
check "handle key and table in /var/lib/nfsgw/state" test -n "$(ls -A /var/lib/nfsgw/state)"

# Upgrade: a changed conffile is kept (dpkg asks only when the package's copy changed
# too; --force-confold answers "keep" as apt's default does), state and data are kept.
sed -i 's/^idle = "adaptive"/idle = "adaptive"   # edited by the operator/' /etc/nfsgw/nfsgw.toml
ls -l --time-style=+%s /var/lib/nfsgw/state > "$W/state.before"
check "upgrade to $(basename "$DEB2")" "${APT[@]}" install -y -qq --reinstall -o Dpkg::Options::=--force-confold "$DEB2"
check "upgrade kept the edited configuration" grep -q "edited by the operator" /etc/nfsgw/nfsgw.toml
check "upgrade kept the state" diff <(ls -l --time-style=+%s /var/lib/nfsgw/state) "$W/state.before"
check "service starts again after the upgrade" service_start
mount -t nfs -o "$MOUNT_OPTS" 127.0.0.1:/data /mnt
check "the file survived the upgrade" cmp "$W/src" /mnt/hello
umount /mnt
check "SIGTERM: exit 0" service_stop

check "apt remove nfsgw" "${APT[@]}" remove -y -qq nfsgw
check "remove: binary gone" test ! -e /usr/bin/nfsgw
check "remove: configuration kept" grep -q "edited by the operator" /etc/nfsgw/nfsgw.toml
check "apt purge nfsgw" "${APT[@]}" purge -y -qq nfsgw
check "purge: /etc/nfsgw gone" test ! -e /etc/nfsgw
check "purge: data kept" cmp "$W/src" /var/lib/nfsgw/data/hello
check "purge: state kept (NFSGW_PURGE_STATE unset)" test -d /var/lib/nfsgw/state
check "purge: package gone" test -z "$(dpkg-query -W -f='${Status}' nfsgw 2>/dev/null | grep -v not-installed)"
umount /var/lib/nfsgw
echo "PACKAGE: PASS"
