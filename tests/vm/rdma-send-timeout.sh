#!/usr/bin/env bash
# Runs INSIDE a Linux guest with Soft-RoCE rxe0 on eth0 (VM_RXE=1 tools/vm/vm.sh
# run-script; host side: tests/vm/run-rdma-send-timeout.sh): `rdma.send_timeout_s` on
# real verbs. The gateway (built with `--features rdma`, provider "verbs", one reactor,
# send_timeout_s = SEND_TIMEOUT_S [3]) is sent NULL calls by `bench stall`, a peer whose
# CM REQ asks for rnr_retry_count 7 (so the gateway's QP retries RNR NAKs for ever) and
# which posts no Receive: every reply Send of the gateway meets RNR NAKs and never
# completes. Checks: the gateway closes that connection no earlier than the timeout
# (and well before the peer gives up), logs it, counts it (guard rdma/send_timeout),
# a well-behaved `bench --provider verbs` run is then served with every byte verified,
# every pool buffer is back once both are gone, and the gateway log has no panic.
# Second phase, same boot: `rdma.stall_reclaim_ms` (the Send side of the starvation
# reclaim, engine/src/rdma/reclaim.rs) with a 120 s send timeout. A fresh
# gateway with 16 large buffers and no page cache (READ replies then hold pool buffers)
# gets two `bench stall --read` peers, each sending 12 READs of 1 MiB with 1 MiB write
# chunks and posting no Receive: the gateway's RDMA Writes of the data complete at the
# peers' HCAs, but every reply Send meets RNR NAKs, and each reply keeps its 1 MiB
# buffer until its Send completes, so the peers (8 replies each within
# rdma.max_reply_mib) hold all 16. A good `bench --provider verbs` client's 1 MiB READ
# then finds the large class empty (a short READ). Checks: in one run of 30 verified
# 1 MiB READs at 5 per second, at most half come back short (those before the reclaim)
# and the rest are full and byte-exact, before any send timeout; both peers were
# closed well before the send timeout, with the reclaim's warning and counter
# (rdma/send_reclaimed > 0, rdma/send_timeout = 0); every pool buffer is back, no panic.
# Last line "RDMA SEND TIMEOUT: PASS" only when every check passed.
# Usage: rdma-send-timeout.sh GATEWAY_BINARY [BENCH_BINARY (default: beside the gateway)]
# STALL_WAIT_S [10 x SEND_TIMEOUT_S + 30]: how long the stalling peer waits to be closed
# (a control run with SEND_TIMEOUT_S=600 STALL_WAIT_S=40 must fail: rxe retries RNR for ever).
# STALL_RECLAIM_MS [1000]: the second phase's rdma.stall_reclaim_ms (a control run with
# STALL_RECLAIM_MS=3600000 must fail at "a good client starved by them is served
# again": only the 120 s send timeout would free the buffers).
set -euo pipefail
GW=${1:?gateway binary (built with --features rdma)}
BENCH=${2:-$(dirname "$GW")/bench}
ADDR=${RDMA_ADDR:-10.0.2.15}   # eth0 in the guest (tools/vm/guest-init.sh); rxe0 sits on it
PORT=20049
STATS=127.0.0.1:9109
TO=${SEND_TIMEOUT_S:-3}; STALL_WAIT=${STALL_WAIT_S:-$((TO * 10 + 30))}
RECLAIM_MS=${STALL_RECLAIM_MS:-1000}
W=$(mktemp -d)
GWLOG=$W/gw.log
cat > "$W/gw.toml" <<TOML
[engine]
cores = [0]
idle = "adaptive"
[tcp]
listen = "$ADDR:2049"
[rdma]
provider = "verbs"
listen = "$ADDR:$PORT"
send_timeout_s = $TO
[backend]
kind = "memory"
[state]
dir = "$W/state"
[stats]
listen = "$STATS"
[[exports]]
path = "/"
clients = ["0.0.0.0/0"]
squash = "none"
TOML
on_exit() {
  local rc=$?
  [ -n "${GWPID:-}" ] && kill "$GWPID" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "RDMA SEND TIMEOUT: FAILED (rc=$rc)"
    echo "--- stall output"; cat "$W"/stall*.log 2>/dev/null || true
    echo "--- gateway log tail"; tail -n 30 "$GWLOG" || true
    echo "--- dmesg tail"; dmesg | tail -n 20 || true
  fi
}
trap on_exit EXIT
T0=$(date +%s.%N)
check() {
  local d=$1 t; shift
  if "$@"; then t=$(date +%s.%N); awk -v d="$d" -v a="$T0" -v b="$t" 'BEGIN {printf "ok   %s (%.1fs)\n", d, b - a}'; T0=$t
  else echo "FAIL $d"; exit 1; fi
}
# metric NAME [LABEL=VALUE...]: the sum of the samples of NAME carrying those labels.
# shellcheck source=tests/vm/metrics.sh
. "$(dirname "$0")/metrics.sh"
metric() { metric_with "$STATS" "$@"; }
# wait_metric SECS EXPECTED NAME [LABELS...]: counters are published every 1,024 passes
# and before a reactor sleeps, so poll for a few seconds.
wait_metric() {
  local secs=$1 want=$2 i; shift 2
  for i in $(seq 1 $((secs * 5))); do [ "$(metric "$@")" = "$want" ] && return 0; sleep 0.2; done
  echo "  $* = $(metric "$@"), expected $want"; return 1
}
gw_healthy() { kill -0 "$GWPID" 2>/dev/null && ! grep -qi panic "$GWLOG"; }

check "rxe0 present" sh -c 'rdma link show | grep -q rxe0'
RUST_LOG=info "$GW" --config "$W/gw.toml" > "$GWLOG" 2>&1 &
GWPID=$!
up() { local i; for i in $(seq 1 150); do metric nfsgw_rdma_connections >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
check "gateway up (verbs provider, rdma.send_timeout_s = $TO)" up

stalled() {
  RUST_BACKTRACE=0 "$BENCH" stall --target "rdma://$ADDR:$PORT" --provider verbs --calls 8 \
    --wait-s $STALL_WAIT > "$W/stall.log" 2>&1 || return 1
  sed 's/^/  /' "$W/stall.log"
}
check "a peer posting no Receive (rnr_retry_count 7) is disconnected by the gateway" stalled
not_early() {
  local s; s=$(sed -n 's/.*closed the connection \([0-9.]*\) s after.*/\1/p' "$W/stall.log")
  [ -n "$s" ] && awk -v s="$s" -v t="$TO" 'BEGIN {exit !(s >= t - 0.5 && s <= t * 2 + 5)}'
}
check "... after the send timeout, not before it (nor long after)" not_early
check "... with a warning naming the timeout" grep -q "peer completed none of its replies (rdma.send_timeout_s)" "$GWLOG"
# The close as the gateway logged it (timeout warning, the provider's drain of the QP).
grep -E "completed none of its replies|flushes did not complete|connection down" "$GWLOG" | sed 's/^/  gw: /' || true
check "... counted: nfsgw_guard_events_total{transport=rdma,reason=send_timeout} = 1" \
  wait_metric 10 1 nfsgw_guard_events_total transport=rdma reason=send_timeout

served() {
  RUST_BACKTRACE=0 "$BENCH" --target "rdma://$ADDR:$PORT" --provider verbs --workload randread \
    --bs 4096 --qd 8 --ops 500 --size-mib 4 --file st.dat --verify > "$W/bench.log" 2>&1 || { tail -n 20 "$W/bench.log"; return 1; }
  tail -n 3 "$W/bench.log" | sed 's/^/  /'
}
check "a well-behaved client is then served (bench --provider verbs, 500 random 4 KiB reads verified)" served
check "every pool buffer back once both connections are gone" wait_metric 20 0 nfsgw_pool_buffers_in_use
check "no RDMA connection left" wait_metric 10 0 nfsgw_rdma_connections
check "gateway alive, no panic in its log" gw_healthy
kill "$GWPID"; wait "$GWPID" || true; GWPID=

# --- Phase 2: rdma.stall_reclaim_ms, the send timeout out of reach (see the header).
LARGE_SIZE=$(( (1 << 20) + 4096 ))   # pools.large buffer size: the gauges' size label
# send_timeout_s 120, not the default 30: the minute of setup under TCG on a loaded host
# (measured: up to 30 s between the peers' calls and the good client's first READ) must
# not let the timeout free the buffers first; only the reclaim can, in time.
sed -e "s/^send_timeout_s = .*/send_timeout_s = 120\nstall_reclaim_ms = $RECLAIM_MS/" \
    -e "s|^\[backend\]|[pools]\nlarge = 16\n[cache]\nsize_mib = 0\n[backend]|" \
    -e "s|$W/state|$W/state2|" "$W/gw.toml" > "$W/gw2.toml"
GWLOG=$W/gw2.log
RUST_LOG=info "$GW" --config "$W/gw2.toml" > "$GWLOG" 2>&1 &
GWPID=$!
check "gateway restarted: pools.large = 16, no page cache, send_timeout_s = 120, stall_reclaim_ms = $RECLAIM_MS" up
# good_reads ARGS: one run of verified 1 MiB READs of rc.dat (8 MiB; created with the
# pattern by the first run). Short READs fail the verification.
good_reads() {
  RUST_BACKTRACE=0 timeout 120 "$BENCH" --target "rdma://$ADDR:$PORT" --provider verbs --workload randread \
    --bs 1048576 --qd 1 --size-mib 8 --file rc.dat --verify "$@" > "$W/good.log" 2>&1
}
prepared() { good_reads --ops 2 || { tail -n 20 "$W/good.log"; return 1; }; }
check "an 8 MiB file written and read back, 1 MiB READs verified (bench --provider verbs)" prepared
for k in 1 2; do
  RUST_BACKTRACE=0 "$BENCH" stall --target "rdma://$ADDR:$PORT" --provider verbs --read rc.dat \
    --calls 12 --wait-s 60 > "$W/stall$k.log" 2>&1 &
  eval "STALL$k=\$!"
done
check "two peers sending 12 x 1 MiB READs each and posting no Receive hold all 16 large buffers" \
  wait_metric 30 16 nfsgw_pool_buffers_in_use size=$LARGE_SIZE
# One open-loop run of GOOD_OPS READs at 5 per second: those before the reclaim come
# back short (64 KiB from the medium class), the rest must be full and byte-exact.
GOOD_OPS=30
served_soon() {
  local k
  good_reads --rate 5 --ops $GOOD_OPS
  k=$(sed -n 's/^verify: [0-9]* bytes checked, \([0-9]*\) failure(s)$/\1/p' "$W/good.log")
  grep -m2 "VERIFY FAILED" "$W/good.log" | sed 's/^/  /'
  [ -n "$k" ] || { tail -n 20 "$W/good.log"; return 1; }
  echo "  $k of $GOOD_OPS READs short (before the reclaim), $((GOOD_OPS - k)) full and verified"
  [ "$k" -le $((GOOD_OPS / 2)) ] || return 1
  # Served before the send timeout could have freed anything (the control fails here).
  [ "$(metric nfsgw_guard_events_total transport=rdma reason=send_timeout)" = 0 ]
}
check "a good client starved by them is served again within seconds, before any send timeout (1 MiB READs, 5/s)" served_soon
# Each peer exits 0 once the gateway closed its connection (why: the counters below).
reclaimed() {
  local k rc=0
  for k in 1 2; do
    eval "wait \$STALL$k" || rc=1
    sed 's/^/  /' "$W/stall$k.log"
  done
  return $rc
}
check "both stalling peers closed by the gateway" reclaimed
check "... with the reclaim's warning" grep -q "closing the connection to reclaim them" "$GWLOG"
grep -E "to reclaim them|flushes did not complete" "$GWLOG" | sed 's/^/  gw: /' || true
reclaim_counted() {
  local n; n=$(metric nfsgw_guard_events_total transport=rdma reason=send_reclaimed)
  echo "  send_reclaimed = $n"; [ "$n" -ge 1 ]
}
check "... counted: nfsgw_guard_events_total{transport=rdma,reason=send_reclaimed} > 0" reclaim_counted
check "... not by the send timeout: {reason=send_timeout} = 0" \
  wait_metric 5 0 nfsgw_guard_events_total transport=rdma reason=send_timeout
check "every pool buffer back" wait_metric 20 0 nfsgw_pool_buffers_in_use
check "no RDMA connection left" wait_metric 10 0 nfsgw_rdma_connections
check "gateway alive, no panic in its log" gw_healthy
kill "$GWPID"; wait "$GWPID" || true; GWPID=
echo "RDMA SEND TIMEOUT: PASS"
