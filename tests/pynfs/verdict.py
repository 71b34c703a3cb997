"""The pynfs verdict (tests/pynfs/run.sh): summary, failed tests, pass/fail rule.

verdict.py RESULTS.json MIN_PASS_FILE KNOWN_FAILURES_FILE GATEWAY_ALIVE(1|0) GATEWAY_LOG
"""
import json, re, sys
res = json.load(open(sys.argv[1]))
min_pass = int(open(sys.argv[2]).read().split("#")[0].strip() or "0")
known = {}
for line in open(sys.argv[3]):
    code, _, why = line.partition("#")
    if code.strip():
        known[code.strip()] = why.strip()
gw_alive, gw_log = sys.argv[4] == "1", sys.argv[5]
cases = res.get("testcase", [])
failed = [t for t in cases if "failure" in t]
skipped = [t for t in cases if "skipped" in t]
passed = len(cases) - len(failed) - len(skipped)
print(f"pynfs: {len(cases)} tests: {passed} passed, {len(failed)} failed, "
      f"{len(skipped)} skipped or not selected "
      f"(min-pass {min_pass}, {len(known)} known failure(s))")
for t in failed:
    msg = (t["failure"].get("message") or "").splitlines()
    tag = "known" if t["code"] in known else "NEW"
    print(f"  FAIL {t['code']:<10} {tag:<5} {t['name']}: {msg[0][:120] if msg else ''}")
ran = {t["code"] for t in cases} - {t["code"] for t in failed} - {t["code"] for t in skipped}
fixed = sorted(set(known) & ran)
for c in fixed:
    print(f"  fixed: {c} passes now: remove it from tests/pynfs/known-failures")
bad = []
if not gw_alive:
    bad.append("the gateway died during the run")
panics = [l for l in open(gw_log, errors="replace") if "panicked" in l]
if panics:
    bad.append(f"the gateway logged {len(panics)} panic(s): {panics[0].strip()[:200]}")
if passed < min_pass:
    bad.append(f"{passed} passed, below min-pass {min_pass}")
new = [t["code"] for t in failed if t["code"] not in known]
if new and min_pass > 0:
    bad.append(f"{len(new)} failure(s) not in known-failures: {' '.join(new)}")
elif new:
    print(f"pynfs: min-pass is 0: {len(new)} unlisted failure(s) tolerated")
if bad:
    print("pynfs: FAILED: " + "; ".join(bad))
    sys.exit(1)
print("pynfs: ok")
