#!/usr/bin/env bash
# Runs INSIDE a Linux guest (tests/vm/guest-stages.sh, stage "ha"): `[ha]` takeover
# under the kernel's NFSv4.1 client (docs/ha.md). Two gateways in network namespaces of
# their own (10.78.0.2 and .3 on a bridge), one shared `fs` directory (ext4 on a loop
# device: the fs backend keeps its metadata in user xattrs); the client mounts the
# service address 10.78.0.100 and knows nothing else. The script moves the address as
# the operator's tool would, once the standby's log says it took the identity
# (keepalived on the reference configuration does that in gateway/tests/ha_netns.rs;
# here, under the software CPU on a shared host, its exec-heavy check script missed its
# timeouts and the address flapped).
#
#   guest-ha.sh GATEWAY_BINARY [RDMA_GATEWAY_BINARY]
#
# An application holds a POSIX lock on a file of the mount (Linux sends it as an
# NFSv4 LOCK) and appends a numbered, fsynced line every 0.2 s. The active gateway is
# killed with SIGKILL in the middle; the standby takes the identity, the address
# moves, the kernel client reclaims its open and its lock (counted by the successor:
# nfsgw_ha_reclaims_total{result="accepted"}), and the application goes on: it must
# exit 0, and every line must be there once, in order, after the caches are
# dropped. One line per check; last line "KERNEL HA: PASS". The identity lease is the
# default 10 s: under the software CPU a 2 s lease is missed by the holder itself.
set -euo pipefail
GW=${1:?gateway binary}
# The RDMA gateway (built with --features rdma; with Soft-RoCE rxe0 in the guest): the
# kernel client over proto=rdma through a takeover too (guest-ha-rdma.sh). Empty: TCP only.
RGW=${2:-}
HA_TOOLS=$(cd "$(dirname "$0")/../../tools/ha" && pwd)
W=$(mktemp -d)
M=/mnt/ha
VIP=10.78.0.100
LINES=${HA_LINES:-60}
T0=$(date +%s.%N)
PIDS=()
say() { echo "ha: $*"; }
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   ha %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL ha $d"; for f in "$W"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; fi
}
on_exit() {
  umount -f -l $M 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for i in 0 1; do ip netns del ha$i 2>/dev/null || true; done
  ip link del habr 2>/dev/null || true
  mountpoint -q "$W/disk" 2>/dev/null && umount -l "$W/disk"
  rm -rf "$W"
}
trap on_exit EXIT

say "setting up: an ext4 store, a bridge, two namespaces"
modprobe loop 2>/dev/null || true
modprobe ext4 2>/dev/null || true
truncate -s 256M "$W/disk.img"
mkfs.ext4 -q -F "$W/disk.img"
mkdir -p "$W/disk" $M
mount -o loop "$W/disk.img" "$W/disk"
mkdir -p "$W/disk/objects"

ip link add habr type bridge mcast_snooping 0
ip addr add 10.78.0.1/24 dev habr
ip link set habr up
for i in 0 1; do
  ip netns add ha$i
  ip link add hav$i type veth peer name eth0 netns ha$i
  ip link set hav$i master habr up
  ip -n ha$i addr add 10.78.0.$((2 + i))/24 dev eth0
  ip -n ha$i link set eth0 up
  ip -n ha$i link set lo up
done

# gateway I ROLE LIFE: a gateway in namespace haI
gateway() {
  local i=$1 role=$2 life=$3
  mkdir -p "$W/disk/state$i-$life"
  cat > "$W/gw$i-$life.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
hugepages = "off"
[tcp]
listen = "0.0.0.0:2049"
[rdma]
provider = "off"
[backend]
kind = "fs"
root = "$W/disk/objects"
shared = true
[state]
dir = "$W/disk/state$i-$life"
[stats]
listen = "127.0.0.1:9108"
[nfs4]
grace_time_s = 30
# This stage checks the lock reclaim: under a write delegation (on by default) Linux
# keeps the application's lock on the client and reclaims only the open with its
# delegation (nfs4_lock_reclaim skips a delegated file's locks); the delegation reclaim
# is gateway/tests/nfs41_conf/grace.rs's.
write_delegations = false
[ha]
identity = "guest"
lease_s = 10
role = "$role"
[[exports]]
path = "/"
clients = ["10.78.0.0/24"]
squash = "none"
TOML
  ip netns exec ha$i "$GW" --config "$W/gw$i-$life.toml" > "$W/gw$i-$life.log" 2>&1 &
  echo $!
}
# The operator's tool: the address on host I (a gratuitous ARP's worth: the client's
# neighbour entry for it is dropped).
vip_to() {
  ip -n ha$1 addr add $VIP/24 dev eth0
  ip neigh flush to $VIP 2>/dev/null || true
}
metric() {
  ip netns exec ha$1 python3 - "$2" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9108/metrics", timeout=5).read().decode()
print(int(sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(sys.argv[1]))))
PY
}

say "starting two gateways"
A=$(gateway 0 active 0); PIDS+=("$A")
holds() {
  local end=$((SECONDS + 180))
  while [ $SECONDS -lt $end ]; do grep -q "ha: took the identity" "$W/gw0-0.log" && return 0; sleep 0.5; done
  return 1
}
check "the active holds the identity" holds
vip_to 0
B=$(gateway 1 standby 0); PIDS+=("$B")
check "the standby waits" bash -c "for _ in \$(seq 1 360); do grep -q 'identity held by another gateway' '$W/gw1-0.log' && exit 0; sleep 0.5; done; exit 1"
check "mount -t nfs -o vers=4.1 $VIP:/ $M" timeout 120 mount -t nfs -o vers=4.1 $VIP:/ $M

# The application: a POSIX lock (an NFSv4 LOCK), then numbered lines, each fsynced.
python3 - "$M/log" "$LINES" > "$W/app.log" 2>&1 <<'PY' &
import fcntl, os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
for i in range(n):
    t = time.time()
    os.write(fd, b"line %04d\n" % i)
    os.fsync(fd)
    dt = time.time() - t
    if dt > 1:
        print(f"line {i}: paused {dt:.1f}s", flush=True)
    time.sleep(0.2)
fcntl.lockf(fd, fcntl.LOCK_UN)
os.close(fd)
print("done", flush=True)
PY
APP=$!
PIDS+=("$APP")
lines_now() { [ -f "$W/disk/objects/log" ] && wc -l < "$W/disk/objects/log" || echo 0; }
writing() {
  local end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do [ "$(lines_now)" -ge 5 ] && return 0; sleep 0.2; done
  return 1
}
check "the application holds its lock and writes" writing

killed=$(date +%s.%N)
kill -9 "$A"
ip -n ha0 addr del $VIP/24 dev eth0
say "killed the active gateway (pid $A) after $(lines_now) lines"
took() {
  local end=$((SECONDS + 180))
  while [ $SECONDS -lt $end ]; do grep -q "ha: took the identity" "$W/gw1-0.log" && return 0; sleep 0.2; done
  return 1
}
check "the standby took the identity" took
vip_to 1
moved=$(date +%s.%N)
wait_app() {
  local end=$((SECONDS + 240))
  while [ $SECONDS -lt $end ]; do
    kill -0 "$APP" 2>/dev/null || { wait "$APP"; return $?; }
    sleep 0.2
  done
  return 1
}
check "the application finished without an error" wait_app
done_at=$(date +%s.%N)
awk -v k="$killed" -v m="$moved" 'BEGIN {printf "ha: kill -9 -> address on the standby %.1fs\n", m - k}'
grep "paused" "$W/app.log" | sed 's/^/ha: application /' || true
accepted=$(metric 1 'nfsgw_ha_reclaims_total{result="accepted"}')
say "reclaims accepted by the successor: $accepted"
check "the kernel client reclaimed its state (open and lock)" test "$accepted" -ge 2
check "the application saw no error" grep -q '^done$' "$W/app.log"
sync; echo 3 > /proc/sys/vm/drop_caches
check "every line once, in order" python3 - "$M/log" "$LINES" <<'PY'
import sys
got = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
want = [b"line %04d" % i for i in range(int(sys.argv[2]))]
sys.exit(0 if got == want else f"{len(got)} lines, first difference at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
PY
awk -v k="$killed" -v d="$done_at" 'BEGIN {printf "ha: kill -9 -> application done %.1fs\n", d - k}'
umount $M
# The kernel client over RPC-over-RDMA through a takeover (two gateways on one address
# in the root namespace: Soft-RoCE does not work in network namespaces here).
if [ -n "$RGW" ]; then
  mkdir -p "$W/disk/rdma"
  check "the kernel client over RPC-over-RDMA through a takeover (guest-ha-rdma.sh)" \
    bash "$(dirname "$0")/guest-ha-rdma.sh" "$RGW" "$W/disk/rdma"
fi
echo "KERNEL HA: PASS"
