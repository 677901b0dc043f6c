"""Print the GPU check's results (tests/gpu) as the Markdown of docs/gpu-results.md.

    python scripts/gpu_report.py RESULTS.jsonl

Standard library only.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path


def main(path: Path) -> int:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        print(f"{path}: no results: did the GPU tests run (or were they skipped)?", file=sys.stderr)
        return 1
    devices = sorted({r["device"] for r in rows})
    versions = ", ".join(f"{k} {v}" for k, v in sorted(rows[0]["versions"].items()))
    lines = [
        "# GPU check",
        "",
        f"Run of `scripts/gpu_check.sh` on {datetime.date.today().isoformat()}: {', '.join(devices)}; {versions}.",
        "",
        "| check | outcome |",
        "|---|---|",
        *(f"| {r['check']} | {r['outcome']} |" for r in rows),
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
