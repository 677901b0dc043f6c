"""Write what the README's sessions print: each ``$ scalar-scales ...`` line of a code block that starts with one,
and under it what the command prints now, run in the README's order in a new folder that holds ``my-model``, the
small checkpoint the README describes (``make_checkpoint(layers=2, experts=4)``), as tests/base/test_readme.py
runs them. After a change to the report, to migrate's lines or to the round trip's observations.

    PYTHONPATH=.:testkit python scripts/readme_sessions.py

tests/base/test_readme.py fails where README.md is stale.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from scalar_scales_testkit.readme import rewritten

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> int:
    text = README.read_text()
    with tempfile.TemporaryDirectory() as folder:
        new = rewritten(text, Path(folder))
    if new != text:
        README.write_text(new)
        print("README.md: sessions rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
