#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1), from guest-ha.sh
# (stage "ha"): the kernel's NFSv4.1 client over RPC-over-RDMA through an `[ha]`
# takeover (docs/ha.md "RPC-over-RDMA through a takeover").
#
#   guest-ha-rdma.sh RDMA_GATEWAY_BINARY DIR
#
# DIR: where the shared `fs` store and the state go, on a file system with user xattrs
# (guest-ha.sh passes a directory of its ext4 disk; the guest's /tmp is tmpfs).
#
# Soft-RoCE does not work in network namespaces in the 6.1 guest, so the two gateways
# run in the root namespace on ONE address, as gateway/tests/ha_takeover.rs
# `the_rdma_listener_follows_the_identity` does with the `soft` provider: both name
# rdma.listen = ADDR:20049 (each its own TCP port); the standby cannot bind it while the
# active lives and starts on TCP alone, retrying every 250 ms. The client mounts
# `vers=4.1,proto=rdma` and knows nothing else. An application holds a POSIX lock (an
# NFSv4 LOCK) and appends numbered, fsynced lines; `kill -9` of the active; the
# standby's RDMA listener binds the address, it takes the identity, and the kernel
# client reconnects over RDMA and reclaims its open and lock (counted by the
# successor: nfsgw_ha_reclaims_total{result="accepted"}); the application exits 0 and
# every line is there once, in order, after the caches are dropped. One line per
# check; last line "KERNEL HA RDMA: PASS".
set -euo pipefail
GW=${1:?rdma gateway binary (built with --features rdma)}
D=${2:?a directory on a file system with user xattrs}
ADDR=${RDMA_ADDR:-10.0.2.15}
PORT=20049
M=/mnt/ha-rdma
LINES=${HA_RDMA_LINES:-40}
W=$(mktemp -d)
T0=$(date +%s.%N)
PIDS=()
say() { echo "ha/rdma: $*"; }
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   ha/rdma %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL ha/rdma $d"; for f in "$W"/*.log; do echo "--- $f"; grep -v ' DEBUG ' "$f" | tail -n 20; done; dmesg | tail -n 20; exit 1; fi
}
on_exit() {
  umount -f -l $M 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$W" "$D"
}
trap on_exit EXIT

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
modprobe rpcrdma 2>/dev/null || true
mkdir -p "$D/objects" $M

# gateway NAME ROLE TCP_PORT STATS_PORT: a gateway of identity "guest-rdma"
gateway() {
  cat > "$W/$1.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
hugepages = "off"
[tcp]
listen = "$ADDR:$3"
[rdma]
provider = "verbs"
listen = "$ADDR:$PORT"
[backend]
kind = "fs"
root = "$D/objects"
shared = true
[state]
dir = "$D/state-$1"
[stats]
listen = "127.0.0.1:$4"
[nfs4]
grace_time_s = 30
# As in guest-ha.sh: the stage checks the lock reclaim (under a write delegation Linux
# keeps the lock on the client and reclaims only the open with its delegation).
write_delegations = false
[ha]
identity = "guest-rdma"
lease_s = 10
role = "$2"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
  RUST_LOG=info "$GW" --config "$W/$1.toml" > "$W/$1.log" 2>&1 &
  echo $!
}
says() { # LOG TEXT SECONDS
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do grep -q "$2" "$W/$1.log" && return 0; sleep 0.2; done
  return 1
}
metric() { # STATS_PORT SERIES
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
print(int(sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(sys.argv[2]))))
PY
}

active_up() { says a "ha: took the identity" 180 && says a "over RPC-over-RDMA" 60; }
standby_waits() { says b "identity held by another gateway" 180 && says b "rdma: cannot listen yet" 10; }
A=$(gateway a active 2149 9111); PIDS+=("$A")
check "the active holds the identity and listens over RDMA" active_up
B=$(gateway b standby 2150 9112); PIDS+=("$B")
check "the standby waits, on TCP alone" standby_waits
check "mount -t nfs -o vers=4.1,proto=rdma,port=$PORT $ADDR:/ $M" \
  timeout -s KILL 120 mount -t nfs -o vers=4.1,proto=rdma,port=$PORT "$ADDR:/" $M
check "/proc/mounts says proto=rdma" sh -c "awk -v m=$M '\$2 == m {print \$4}' /proc/mounts | grep -qE '(^|,)proto=rdma(,|$)'"

# The application, as in guest-ha.sh: a POSIX lock, then numbered fsynced lines.
python3 - "$M/log" "$LINES" > "$W/app.out" 2>&1 <<'PY' &
import fcntl, os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
for i in range(n):
    t = time.time()
    os.write(fd, b"line %04d\n" % i)
    os.fsync(fd)
    if time.time() - t > 1:
        print(f"line {i}: paused {time.time() - t:.1f}s", flush=True)
    time.sleep(0.2)
fcntl.lockf(fd, fcntl.LOCK_UN)
os.close(fd)
print("done", flush=True)
PY
APP=$!
PIDS+=("$APP")
lines_now() { [ -f "$D/objects/log" ] && wc -l < "$D/objects/log" || echo 0; }
writing() {
  local end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do [ "$(lines_now)" -ge 5 ] && return 0; sleep 0.2; done
  return 1
}
check "the application holds its lock and writes over RDMA" writing

killed=$(date +%s.%N)
kill -9 "$A"
say "killed the active gateway (pid $A) after $(lines_now) lines"
check "the standby's RDMA listener binds the address" says b "the address is available now" 60
check "the standby took the identity" says b "ha: took the identity" 180
wait_app() {
  local end=$((SECONDS + 240))
  while [ $SECONDS -lt $end ]; do
    kill -0 "$APP" 2>/dev/null || { wait "$APP"; return $?; }
    sleep 0.2
  done
  return 1
}
check "the application finished without an error" wait_app
awk -v k="$killed" -v d="$(date +%s.%N)" 'BEGIN {printf "ha/rdma: kill -9 -> application done %.1fs\n", d - k}'
grep "paused" "$W/app.out" | sed 's/^/ha\/rdma: application /' || true
accepted=$(metric 9112 'nfsgw_ha_reclaims_total{result="accepted"}')
say "reclaims accepted by the successor: $accepted"
check "the kernel client reclaimed its open and lock over RDMA" test "$accepted" -ge 2
check "the application saw no error" grep -q '^done$' "$W/app.out"
check "still proto=rdma" sh -c "awk -v m=$M '\$2 == m {print \$4}' /proc/mounts | grep -qE '(^|,)proto=rdma(,|$)'"
sync; echo 3 > /proc/sys/vm/drop_caches
check "every line once, in order" python3 - "$M/log" "$LINES" <<'PY'
import sys
got = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
want = [b"line %04d" % i for i in range(int(sys.argv[2]))]
sys.exit(0 if got == want else f"{len(got)} lines")
PY
umount $M
echo "KERNEL HA RDMA: PASS"
