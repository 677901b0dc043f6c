"""Write docs/reported-failures.md from the corpus of reported failures (``scalar_scales_testkit.reported``).

    python scripts/reported_failures.py          # after changing a case: write it
    python scripts/reported_failures.py --check  # write nothing; exit 1 where the file differs

tests/base/doctor/test_reported_failures.py fails where the file is stale; it does not write it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reported-failures.md"


def main() -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "testkit")]
    from scalar_scales_testkit.reported import document

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where the file differs")
    args = parser.parse_args()
    text = document()
    if DOC.exists() and DOC.read_text() == text:
        return 0
    if args.check:
        print(f"{DOC.relative_to(ROOT)}: stale: run python scripts/reported_failures.py", file=sys.stderr)
        return 1
    DOC.write_text(text)
    print(f"{DOC.relative_to(ROOT)}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
