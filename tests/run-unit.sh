#!/usr/bin/env bash
# Every unit and integration test of the workspace, as `cargo test --release --workspace
# --locked` runs them, but UNIT_JOBS [3] test binaries at a time instead of one after
# another (tests/run-all.sh's unit test stage).
#
#   tests/run-unit.sh [LOG]        # LOG: all output, binary by binary [target/unit-tests.log]
#
# Why: the binaries mostly wait (leases, store timeouts, the loopback S3 server): in
# one run of the stage (3m50) the gateway library's tests took 86 s for 35 s of CPU
# and moto's, ha_store_hang 36 s, pnfs_tcp 20 s, one after another. Each binary still
# runs alone in its package's directory with libtest's own threads, as cargo runs it;
# the same binaries, the same tests, the doc tests after them.
# Prints each binary's result line (and FAILED/panicked lines); exit 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-target/unit-tests.log}
JOBS=${UNIT_JOBS:-3}
mkdir -p "$(dirname "$LOG")"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/nfsgw-unit.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

# The test executables (nothing compiles after run-all.sh's build step), with the
# package directory each runs in. The slow ones first, so that they overlap the rest
# (a name missing from this list only runs later).
cargo test --release --workspace --locked --no-run --message-format=json 2>"$OUT/build.log" \
  | python3 -c '
import json, os, sys
slow = ["gateway:lib", "ha_store_hang", "pnfs_tcp", "ha_netns", "engine:lib", "rdma_fuzz", "nfs41_conf"]
rows = []
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name, kind = m["target"]["name"], m["target"]["kind"][0]
        key = name + ":lib" if kind == "lib" else name
        rank = slow.index(key) if key in slow else len(slow)
        rows.append((rank, len(rows), os.path.dirname(m["manifest_path"]), m["executable"], f"{name} ({kind})"))
for r in sorted(rows):
    print("\t".join(map(str, r[1:])))
' >"$OUT/list" || { cat "$OUT/build.log"; exit 1; }
[ -s "$OUT/list" ] || { echo "run-unit.sh: no test executables" >&2; cat "$OUT/build.log"; exit 1; }

# one binary: its output in $OUT/N.log, its exit status in $OUT/N.rc
# A start and an end line each on stdout as it happens: a binary that hangs (or a stage
# killed by its timeout) is named in the CI log even though the per-binary logs are
# only gathered at the end.
run_one() {
  local n=$1 dir=$2 exe=$3 what=$4 rc=0 t=$SECONDS
  echo "run-unit.sh: start $what"
  { echo "     Running $what ($exe)"; (cd "$dir" && "$exe") 2>&1 || rc=$?; } >"$OUT/$n.log"
  echo "$rc" >"$OUT/$n.rc"
  echo "run-unit.sh: end   $what: exit $rc in $((SECONDS - t)) s"
}
export -f run_one
export OUT
t0=$SECONDS
tr '\t' '\n' <"$OUT/list" | xargs -d '\n' -n 4 -P "$JOBS" bash -c 'run_one "$@"' _
: >"$LOG"
failed=0
while IFS=$'\t' read -r n _ _ what; do
  cat "$OUT/$n.log" >>"$LOG"
  if [ "$(cat "$OUT/$n.rc" 2>/dev/null || echo 1)" != 0 ]; then
    failed=$((failed + 1)); echo "run-unit.sh: FAILED: $what" | tee -a "$LOG"
    tail -n 60 "$OUT/$n.log"
  fi
done < <(sort -n "$OUT/list")
echo "run-unit.sh: $(wc -l <"$OUT/list") test binaries, $JOBS at a time, in $((SECONDS - t0)) s" | tee -a "$LOG"
cargo test --release --workspace --locked --doc >>"$LOG" 2>&1 || { failed=$((failed + 1)); echo "run-unit.sh: FAILED: doc tests" | tee -a "$LOG"; }
grep -E '^test result|FAILED|panicked' "$LOG" || true
[ "$failed" = 0 ]
