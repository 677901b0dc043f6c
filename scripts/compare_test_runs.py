"""Compare two JUnit XML reports of one test suite: unpatched and patched.

    python scripts/compare_test_runs.py UNPATCHED.xml PATCHED.xml --new-tests PATH_FRAGMENT

Prints the counts of each run, every test that went from pass to fail, the
new tests (in the patched run only) and their outcome, and every test that
did not pass in either run, grouped by the first line of its reason. Exit 1
if any test went from pass to fail, or if a new test did not pass, or if
there are no new tests. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the reason) for every test case in a JUnit report."""
    found = {}
    for case in ET.parse(report).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                reason = (child.get("message") or child.text or "").strip().splitlines()[0][:160]
                break
        found[test] = (outcome, reason)
    return found


def counts(run: dict[str, tuple[str, str]]) -> str:
    tally = Counter(outcome for outcome, _ in run.values())
    return ", ".join(f"{tally[k]} {k}" for k in ("passed", "failed", "error", "skipped"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("unpatched", type=Path)
    parser.add_argument("patched", type=Path)
    parser.add_argument("--new-tests", required=True, help="a fragment of the new tests' module path")
    args = parser.parse_args()
    before, after = outcomes(args.unpatched), outcomes(args.patched)
    print(f"unpatched: {counts(before)}")
    print(f"patched:   {counts(after)}")

    passed_after = {t for t, (o, _) in after.items() if o == "passed"}
    regressions = sorted(t for t, (o, _) in before.items() if o == "passed" and t not in passed_after)
    print(f"pass -> not pass: {len(regressions)}")
    for test in regressions:
        print(f"  {test}: {after.get(test, ('missing', ''))}")
    fixed = sorted(t for t, (o, _) in before.items() if o != "passed" and t in passed_after)
    print(f"not pass -> pass: {len(fixed)}")

    new = sorted(t for t in after if t not in before)
    new_failing = [t for t in new if after[t][0] != "passed"]
    print(f"new tests: {len(new)}, passing: {len(new) - len(new_failing)}")
    for test in new_failing:
        print(f"  NOT PASSING {test}: {after[test]}")
    unexpected_new = [t for t in new if args.new_tests not in t]
    for test in unexpected_new:
        print(f"  unexpected new test id {test}")

    by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
    for test, (outcome, reason) in before.items():
        if outcome != "passed" and test not in passed_after:
            by_reason[outcome, reason].append(test)
    total = sum(len(v) for v in by_reason.values())
    print(f"not passing in either run (listed, not hidden): {total}")
    for (outcome, reason), tests in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        print(f"  {len(tests)} {outcome}: {reason}")
        for test in sorted(tests):
            print(f"      {test}")
    return 1 if regressions or new_failing or not new or unexpected_new else 0


if __name__ == "__main__":
    sys.exit(main())
