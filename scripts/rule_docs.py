"""Write what the rule catalogue makes of the docs: docs/rules.md, and the count of rules README.md and
docs/check.md give.

    python scripts/rule_docs.py          # after adding or changing a rule: write them
    python scripts/rule_docs.py --check  # write nothing; exit 1 naming each file that differs

docs/rules.md is every rule's reference (``scalar-scales rule --all`` prints it), from
``scalar_scales.doctor.catalogue.RULES``. README.md gives the number of rules; docs/check.md's example reports
give the number a check of a compressed-tensors checkpoint with its config applies (every rule about that
layout). The test command checks each (tests/base/doctor/test_rules.py, test_documented_report.py) and fails
where one is stale; it does not write them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generated() -> dict[Path, str]:
    """Each file this script writes, as the catalogue makes it now."""
    from scalar_scales.doctor import RULES, reference_document
    from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT

    about_compressed_tensors = sum(rule.is_about(COMPRESSED_TENSORS_LAYOUT) for rule in RULES.values())
    readme, check = ROOT / "README.md", ROOT / "docs" / "check.md"
    return {
        ROOT / "docs" / "rules.md": reference_document(),
        readme: re.sub(r"(?<=doctor: )\d+(?= rules)", str(len(RULES)), readme.read_text()),
        check: re.sub(r"(?<=no finding from )\d+(?= rules)", str(about_compressed_tensors), check.read_text()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs")
    args = parser.parse_args()
    files = generated()
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    for path in stale:
        if args.check:
            print(f"{path.relative_to(ROOT)}: stale: run python scripts/rule_docs.py", file=sys.stderr)
        else:
            path.write_text(files[path])
            print(f"{path.relative_to(ROOT)}: written")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
