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
#
# HA_RDMA_ROUNDS=N (default 1, CI's): N takeovers in a row (the killed gateway back as
# the standby each round), the checks of the takeover in each, one "ha/rdma: round"
# line of times each (as guest-ha.sh's HA_ROUNDS) and min / median / max at the end.
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
ROUNDS=${HA_RDMA_ROUNDS:-1}
[[ "$ROUNDS" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "FAIL ha/rdma HA_RDMA_ROUNDS=$ROUNDS: want 1 to 999"; exit 1; }
# Over several rounds the application writes until the last round is over ($W/stop).
if [ "$ROUNDS" -gt 1 ]; then LINES=${HA_RDMA_LINES:-9999999}; else LINES=${HA_RDMA_LINES:-150}; fi
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
  # Not the reader's fd 7 (a later round restarts a gateway): it would keep the mount busy.
  RUST_LOG=info "$GW" --config "$W/$1.toml" > "$W/$1.log" 2>&1 7<&- &
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
  AT_LEAST=$v
  [ "$v" -ge "$min" ]
}
try_lock() { # LABEL WANT_EXIT: the other lock owner's attempt (ha-lock.pl: 0 granted, 3 refused)
  local rc=0
  timeout -s KILL 60 $LOCK try $M2/log > "$W/try-$1.out" 2>&1 || rc=$?
  say "other lock owner ($1): $(cat "$W/try-$1.out") (exit $rc)"
  [ "$rc" = "$2" ]
}
proto_rdma() { awk -v m="$1" '$2 == m {print $4}' /proc/mounts | grep -qE '(^|,)proto=rdma(,|$)'; }

# Slot I (0, 1): TCP port 2149 + I, stats port 9111 + I; NAME[I] its current
# gateway's name (a, b; a1, b1… when it came back), GWP[I] its process.
NAME=(a b) GWP=() LIFE=(0 0)
GWP[0]=$(gateway a active 2149 9111); PIDS+=("${GWP[0]}")
active_up() { says "$W/a.log" "ha: took the identity" 180 && says "$W/a.log" "over RPC-over-RDMA" 60; }
check "the active holds the identity and listens over RDMA" active_up
# The standby starts while the client mounts; it must be waiting before the kill.
GWP[1]=$(gateway b standby 2150 9112); PIDS+=("${GWP[1]}")
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

if [ "$ROUNDS" -gt 1 ]; then
  $LOCK app "$M/log" "$LINES" "$W/release" "$W/stop" > "$W/app.out" 2>&1 &
else
  $LOCK app "$M/log" "$LINES" "$W/release" > "$W/app.out" 2>&1 &
fi
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

# One takeover, round R of HA_RDMA_ROUNDS: the active (slot $ACT) killed, the standby
# binds the RDMA address, takes the identity, the client reclaims and writes again.
ACT=0 SLOG="" FROM=0
stamp() { # ERE: seconds from the kill to the standby's first line matching it since, or "-"
  local at t
  at=$(awk -v from="$FROM" -v pat="$1" 'NR > from && $0 ~ pat {print $1; exit}' "$SLOG")
  [ -n "$at" ] && t=$(date -d "$at" +%s.%N 2>/dev/null) || { echo -; return 0; }
  awk -v k="$killed" -v t="$t" 'BEGIN {printf "%.1f", t - k}'
}
since_kill() { # TEXT LABEL
  local v
  v=$(stamp "$1")
  [ "$v" = - ] || say "kill -9 -> $2 ${v}s"
}
# The application's first write that ended after the kill: "SECONDS_FROM_KILL PAUSED LINE".
first_write() {
  awk -v k="$killed" '$3 == "paused" && $NF + 0 > k {p = $4; sub(/s$/, "", p); printf "%.1f %s %s\n", $NF - k, p, $0; exit}' "$W/app.out"
}
writes_again() { [ -n "$(first_write)" ]; }
takeover() {
  local r=$1 a=$ACT s=$((1 - ACT)) rp="" sport bound imm took grace how fw parked
  [ "$ROUNDS" -gt 1 ] && rp="round $r/$ROUNDS: "
  sport=$((9111 + s))
  SLOG="$W/${NAME[$s]}.log"
  FROM=$(wc -l < "$SLOG")
  killed=$(date +%s.%N)
  kill -9 "${GWP[$a]}"
  say "${rp}killed the active gateway (pid ${GWP[$a]}) after $(lines_now) lines"
  rm -f "$W/try-grace.rc"
  ( rc=0; timeout -s KILL 180 $LOCK try $M2/log > "$W/try-grace.out" 2>&1 || rc=$?; echo "$rc" > "$W/try-grace.rc" ) &
  GRACE_TRY=$!
  PIDS+=("$GRACE_TRY")
  check "${rp}the standby's RDMA listener binds the address" says "$SLOG" "the address is available now" 60
  check "${rp}the standby took the identity" says "$SLOG" "ha: took the identity" 180
  # One round (CI's): the application's end is the check, as before HA_RDMA_ROUNDS
  # (every line written before the kill: the pause unmeasured, "-"); over several,
  # its first write after the kill.
  if [ "$ROUNDS" = 1 ]; then
    check "the application wrote every line after the takeover" says "$W/app.out" '^written$' 240
    awk -v k="$killed" -v d="$(date +%s.%N)" 'BEGIN {printf "ha/rdma: kill -9 -> every line written %.1fs\n", d - k}'
  else
    check "${rp}the application writes again after the takeover" retry 240 writes_again
  fi
  fw=$(first_write)
  [ -n "$fw" ] || fw="- - (no write of the application was in flight after the kill)"
  since_kill "the address is available now" "RDMA listener bound (standby's log)"
  since_kill "a takeover is imminent" "imminent (standby's log)"
  since_kill "ha: took the identity" "identity taken (standby's log)"
  say "application ${fw#* * }"
  grace_try() {
    wait "$GRACE_TRY" || true
    say "other lock owner (from the kill through the grace period): $(cat "$W/try-grace.out") (exit $(cat "$W/try-grace.rc"))"
    [ "$(cat "$W/try-grace.rc")" = 3 ]
  }
  check "${rp}the other lock owner's lock asked for during the takeover is refused, never granted" grace_try
  check "${rp}the other lock owner's conflicting lock is refused after the reclaim" try_lock after 3
  grace=$(stamp "grace period ended early") how=early
  [ "$grace" = - ] && { grace=$(stamp "NFSv4.1 grace period over"); how=timed; }
  [ "$grace" = - ] && how=-
  check "${rp}the kernel client reclaimed its opens, lock and delegation over RDMA" at_least $sport nfsgw_ha_reclaims_total 3 result=accepted
  if [ "$r" = 1 ]; then
    check "the successor ran COMPOUNDs it had parked before its takeover" at_least $sport nfsgw_ha_parked_total 1 how=served
    parked=$AT_LEAST
  else
    parked=$(metric_with "127.0.0.1:$sport" nfsgw_ha_parked_total how=served) || parked=-
  fi
  check "${rp}the successor holds the reclaimed read delegation" at_least $sport nfsgw_delegations 1
  bound=$(stamp "the address is available now") imm=$(stamp "a takeover is imminent") took=$(stamp "ha: took the identity")
  # shellcheck disable=SC2086 # fw: "SECONDS PAUSED LINE…"
  set -- $fw
  say "round $r: kill -9 -> RDMA listener bound ${bound}s, imminent ${imm}s, identity ${took}s, grace ended ${grace}s ($how), first write ${1}s (paused ${2}s); parked served $parked"
  echo "$r $bound $imm $took $grace $how $1 $2 $parked" >> "$W/rounds.txt"
  ACT=$s
  [ "$r" -lt "$ROUNDS" ] || return 0
  # The next round: the killed gateway comes back as the standby (its own TCP and
  # stats ports again; the RDMA address is the holder's until it dies).
  LIFE[$a]=$((LIFE[$a] + 1))
  NAME[$a]=$([ "$a" = 0 ] && echo a || echo b)${LIFE[$a]}
  GWP[$a]=$(gateway "${NAME[$a]}" standby $((2149 + a)) $((9111 + a))); PIDS+=("${GWP[$a]}")
  back() { says "$W/${NAME[$a]}.log" "identity held by another gateway" 180 && says "$W/${NAME[$a]}.log" "rdma: cannot listen yet" 10; }
  check "${rp}the killed gateway is back as the standby, on TCP alone" back
  check "${rp}the reader reads its file again" test "$(cat $M/rd.txt)" = "old data"
}
retry() { # SECONDS CMD...: CMD until it succeeds, every 0.2 s
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.2; done
}
for r in $(seq 1 "$ROUNDS"); do takeover "$r"; done
# The distribution of each column over the rounds (tests/vm/ha-rounds.sh).
# shellcheck source=tests/vm/ha-rounds.sh
. "$HERE/ha-rounds.sh"
if [ "$ROUNDS" -gt 1 ]; then
  say "$ROUNDS takeovers, min / median / max from kill -9:"
  say "  RDMA listener bound (its log) $(spread "$W/rounds.txt" 2)"
  say "  imminent (standby's log)      $(spread "$W/rounds.txt" 3)"
  say "  identity taken (its log)      $(spread "$W/rounds.txt" 4)"
  say "  grace period ended (its log)  $(spread "$W/rounds.txt" 5); ended early in $(awk '$6 == "early"' "$W/rounds.txt" | wc -l) rounds"
  say "  first write (the application) $(spread "$W/rounds.txt" 7); over 15 s in $(awk '$7 != "-" && $7 > 15' "$W/rounds.txt" | wc -l) rounds"
  say "  the write's own pause         $(spread "$W/rounds.txt" 8)"
  touch "$W/stop"
  check "the application stopped writing" says "$W/app.out" '^written$' 60
  LINES=$(awk '$1 == "lines" {print $2}' "$W/app.out")
fi
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
