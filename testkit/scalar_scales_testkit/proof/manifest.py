"""The manifest: nothing less tested. Every test ID of the committed baseline still runs, in the same group
(the environment it ran in), or the manifest names the test that now covers it; none of them is skipped where
the baseline's skip list does not allow it; and at least the baseline's number of tests passed.

The baseline (tests/manifest/baseline.txt) lists ``GROUP<TAB>ID`` for each test the test command collected on
the commit named in its first line. tests/manifest/covered.txt maps an old ID that no longer exists to the
new ID that covers it (``GROUP<TAB>OLD<TAB>NEW``); tests/manifest/skips.txt lists the tests that are skipped
on this kind of machine, and why (``GROUP<TAB>ID<TAB>REASON``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scalar_scales_testkit.proof.table import PROJECT

__all__ = ["BASELINE", "Comparison", "compare", "read_outcomes"]

FOLDER = PROJECT / "tests" / "manifest"
BASELINE = FOLDER / "baseline.txt"


@dataclass
class Comparison:
    baseline_commit: str
    floor: int
    passed: int
    missing: list[str]
    skipped: list[str]
    failed: list[str]
    new: int

    @property
    def clean(self) -> bool:
        return not (self.missing or self.skipped or self.failed) and self.passed >= self.floor

    def lines(self) -> list[str]:
        out = [
            f"manifest: {self.passed} passed (at least {self.floor}, the count on {self.baseline_commit}); "
            f"{self.new} tests beyond the baseline's"
        ]
        for label, ids in (("missing", self.missing), ("skipped", self.skipped), ("failed", self.failed)):
            if ids:
                out.append(f"manifest: {len(ids)} baseline tests {label}:")
                out.extend(f"  {i}" for i in ids[:50])
        return out


def _table(path: Path, columns: int) -> list[list[str]]:
    if not path.is_file():
        return []
    return [
        line.split("\t", columns - 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    ]


def read_outcomes(folder: Path) -> dict[tuple[str, str], str]:
    """(group, id) -> outcome, from the JSON lines every suite's pytest runs wrote."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (record["group"], record["id"])
            if found.get(key) != "failed":
                found[key] = record["outcome"]
    return found


def compare(outcomes: dict[tuple[str, str], str]) -> Comparison:
    header = BASELINE.read_text().splitlines()[0]
    commit, floor = header.removeprefix("# ").split()[:2]
    baseline = [(g, i) for g, i in _table(BASELINE, 2)]
    covered = {(g, old): new for g, old, new in _table(FOLDER / "covered.txt", 3)}
    allowed = {(g, i) for g, i, _ in _table(FOLDER / "skips.txt", 3)}
    missing, skipped, failed = [], [], []
    for group, test in baseline:
        now = (group, covered.get((group, test), test))
        outcome = outcomes.get(now)
        if outcome is None or outcome == "not run":
            missing.append("\t".join(now))
        elif outcome == "skipped" and now not in allowed:
            skipped.append("\t".join(now))
        elif outcome == "failed":
            failed.append("\t".join(now))
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    new = len(set(outcomes) - {(g, covered.get((g, i), i)) for g, i in baseline})
    return Comparison(commit, int(floor), passed, missing, skipped, failed, new)
