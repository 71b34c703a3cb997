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
# NFSv4 LOCK) and appends numbered, fsynced lines (tests/vm/ha-lock.pl); a reader holds
# another file open (a read delegation); `kill -9` of the active; the standby's RDMA
# listener binds the address, it takes the identity, and the kernel client reconnects
# over RDMA and reclaims its opens, lock and delegation (counted by the successor:
# nfsgw_ha_reclaims_total{result="accepted"}, nfsgw_delegations); the application exits
# 0 and every line is there once, in order, after the caches are dropped. Another lock
# owner (a process on a second, `nosharecache` mount: its own inode, so the client's
# local lock table does not answer for the server) tries a conflicting fcntl lock
# before the kill, from the kill through the grace period, and after the reclaim:
# refused each time; granted once the application unlocked. One line per check; last
# line "KERNEL HA RDMA: PASS".
set -euo pipefail
GW=${1:?rdma gateway binary (built with --features rdma)}
D=${2:?a directory on a file system with user xattrs}
HERE=$(cd "$(dirname "$0")" && pwd)
LOCK="perl $HERE/ha-lock.pl"
ADDR=${RDMA_ADDR:-10.0.2.15}
PORT=20049
M=/mnt/ha-rdma
M2=/mnt/ha-rdma2
# Enough that the application still writes at the kill (guest-ha.sh says why).
LINES=${HA_RDMA_LINES:-150}
W=$(mktemp -d)
T0=$(date +%s.%N)
PIDS=()
# shellcheck source=tests/vm/metrics.sh
. "$HERE/metrics.sh"
say() { echo "ha/rdma: $*"; }
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   ha/rdma %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL ha/rdma $d"; for f in "$W"/*.log "$W"/*.out; do [ -f "$f" ] || continue; echo "--- $f"; grep -v ' DEBUG ' "$f" | tail -n 20; done; dmesg | tail -n 20; exit 1; fi
}
on_exit() {
  exec 7<&- 2>/dev/null || true
  umount -f -l $M2 2>/dev/null || true
  umount -f -l $M 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$W" "$D"
}
trap on_exit EXIT

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
modprobe rpcrdma 2>/dev/null || true
mkdir -p "$D/objects" $M $M2

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
says() { # FILE TEXT SECONDS
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do grep -q "$2" "$1" && return 0; sleep 0.2; done
  return 1
}
at_least() { # STATS_PORT NAME MIN [LABEL=VALUE…]: the gateway's NAME is at least MIN
  local port=$1 name=$2 min=$3 v; shift 3
  v=$(metric_with "127.0.0.1:$port" "$name" "$@") || return 1
  say "stats :$port: $name $* = $v"
  [ "$v" -ge "$min" ]
}
try_lock() { # LABEL WANT_EXIT: the other lock owner's attempt (ha-lock.pl: 0 granted, 3 refused)
  local rc=0
  timeout -s KILL 60 $LOCK try $M2/log > "$W/try-$1.out" 2>&1 || rc=$?
  say "other lock owner ($1): $(cat "$W/try-$1.out") (exit $rc)"
  [ "$rc" = "$2" ]
}
proto_rdma() { awk -v m="$1" '$2 == m {print $4}' /proc/mounts | grep -qE '(^|,)proto=rdma(,|$)'; }

A=$(gateway a active 2149 9111); PIDS+=("$A")
active_up() { says "$W/a.log" "ha: took the identity" 180 && says "$W/a.log" "over RPC-over-RDMA" 60; }
check "the active holds the identity and listens over RDMA" active_up
# The standby starts while the client mounts; it must be waiting before the kill.
B=$(gateway b standby 2150 9112); PIDS+=("$B")
check "mount -t nfs -o vers=4.1,proto=rdma,port=$PORT $ADDR:/ $M" \
  timeout -s KILL 120 mount -t nfs -o vers=4.1,proto=rdma,port=$PORT "$ADDR:/" $M
check "a second mount for the other lock owner (nosharecache)" \
  timeout -s KILL 120 mount -t nfs -o vers=4.1,proto=rdma,port=$PORT,nosharecache "$ADDR:/" $M2
check "/proc/mounts says proto=rdma" proto_rdma $M

# The reader: a read delegation (the file written, the caches dropped, then opened).
printf 'old data\n' > $M/rd.txt
sync; echo 3 > /proc/sys/vm/drop_caches
exec 7< $M/rd.txt
check "the reader reads its file" test "$(cat <&7)" = "old data"
check "the reader holds a read delegation" at_least 9111 nfsgw_delegations 1

standby_waits() { says "$W/b.log" "identity held by another gateway" 180 && says "$W/b.log" "rdma: cannot listen yet" 10; }
check "the standby waits, on TCP alone" standby_waits

$LOCK app "$M/log" "$LINES" "$W/release" > "$W/app.out" 2>&1 &
APP=$!
PIDS+=("$APP")
lines_now() { [ -f "$D/objects/log" ] && wc -l < "$D/objects/log" || echo 0; }
check "the application holds its lock" says "$W/app.out" '^locked$' 60
check "the other lock owner's conflicting lock is refused before the kill" try_lock before 3
writing() {
  local end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do [ "$(lines_now)" -ge 5 ] && return 0; sleep 0.2; done
  return 1
}
check "the application writes over RDMA" writing

killed=$(date +%s.%N)
kill -9 "$A"
say "killed the active gateway (pid $A) after $(lines_now) lines"
( rc=0; timeout -s KILL 180 $LOCK try $M2/log > "$W/try-grace.out" 2>&1 || rc=$?; echo "$rc" > "$W/try-grace.rc" ) &
GRACE_TRY=$!
PIDS+=("$GRACE_TRY")
check "the standby's RDMA listener binds the address" says "$W/b.log" "the address is available now" 60
check "the standby took the identity" says "$W/b.log" "ha: took the identity" 180
check "the application wrote every line after the takeover" says "$W/app.out" '^written$' 240
awk -v k="$killed" -v d="$(date +%s.%N)" 'BEGIN {printf "ha/rdma: kill -9 -> every line written %.1fs\n", d - k}'
since_kill() { # LOG TEXT LABEL: when LOG first said TEXT (its own time stamp), after the kill
  local at t
  at=$(grep -m1 "$2" "$1" | awk '{print $1}')
  t=$(date -d "$at" +%s.%N 2>/dev/null) || return 0
  awk -v k="$killed" -v t="$t" -v l="$3" 'BEGIN {printf "ha/rdma: kill -9 -> %s %.1fs\n", l, t - k}'
}
since_kill "$W/b.log" "the address is available now" "RDMA listener bound (standby's log)"
since_kill "$W/b.log" "a takeover is imminent" "imminent (standby's log)"
since_kill "$W/b.log" "ha: took the identity" "identity taken (standby's log)"
grep "paused" "$W/app.out" | sed 's/^/ha\/rdma: application /' || true
grace_try() {
  wait "$GRACE_TRY" || true
  say "other lock owner (from the kill through the grace period): $(cat "$W/try-grace.out") (exit $(cat "$W/try-grace.rc"))"
  [ "$(cat "$W/try-grace.rc")" = 3 ]
}
check "the other lock owner's lock asked for during the takeover is refused, never granted" grace_try
check "the other lock owner's conflicting lock is refused after the reclaim" try_lock after 3
check "the kernel client reclaimed its opens, lock and delegation over RDMA" at_least 9112 nfsgw_ha_reclaims_total 3 result=accepted
check "the successor ran COMPOUNDs it had parked before its takeover" at_least 9112 nfsgw_ha_parked_total 1 how=served
check "the successor holds the reclaimed read delegation" at_least 9112 nfsgw_delegations 1
exec 7<&-
touch "$W/release"
wait_app() {
  local end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do
    kill -0 "$APP" 2>/dev/null || { wait "$APP"; return $?; }
    sleep 0.2
  done
  return 1
}
check "the application unlocked and exited 0" wait_app
check "the application saw no error" grep -q '^done$' "$W/app.out"
check "the other lock owner gets the lock once the application released it" try_lock released 0
check "still proto=rdma" proto_rdma $M
sync; echo 3 > /proc/sys/vm/drop_caches
in_order() {
  awk -v n="$LINES" '$0 != sprintf("line %04d", NR - 1) {print "line " NR ": " $0; bad = 1; exit}
    END {if (!bad && NR != n) print NR " lines, want " n; exit bad || NR != n}' "$M/log"
}
check "every line once, in order" in_order
umount $M2
umount $M
echo "KERNEL HA RDMA: PASS"
