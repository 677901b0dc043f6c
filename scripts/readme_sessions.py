"""Write what the README's sessions print: each ``$ scalar-scales ...`` line of a code block that starts with one,
and under it what the command prints now, run in the README's order in a new folder that holds ``my-model``, the
small checkpoint the README describes (``make_checkpoint(layers=2, experts=4)``), as tests/base/test_readme.py
runs them. After a change to the report, to migrate's lines or to the round trip's observations.

    PYTHONPATH=.:testkit python scripts/readme_sessions.py          # write README.md
    PYTHONPATH=.:testkit python scripts/readme_sessions.py --check  # write nothing; exit 1 where it is stale
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
from pathlib import Path

from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SESSION = re.compile(r"^```\n(\$ scalar-scales .*?)^```$", flags=re.MULTILINE | re.DOTALL)
"""A code block that starts with a command at a prompt (tests/base/test_readme.py's pattern)."""
COMMAND = re.compile(r"^\$ (.*)$", flags=re.MULTILINE)


def rewritten(text: str, folder: Path) -> str:
    """``text`` with each session's output as its commands print it, run one after another in ``folder``."""
    make_checkpoint(folder / "my-model", layers=2, experts=4)

    def session(block: re.Match[str]) -> str:
        printed = []
        for command in COMMAND.findall(block.group(1)):
            program, *arguments = shlex.split(command)
            assert program == "scalar-scales", command
            result = run_cli_in_process(*arguments, cwd=folder, env={"COLUMNS": None, "FORCE_COLOR": None})
            if (result.returncode, result.stderr) != (0, ""):
                sys.exit(f"README.md: `{command}` exits {result.returncode}: {result.stderr}")
            printed.append(f"$ {command}\n{result.stdout}")
        return "```\n" + "".join(printed) + "```"

    return SESSION.sub(session, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where README.md is stale")
    check = parser.parse_args().check
    text = README.read_text()
    with tempfile.TemporaryDirectory() as folder:
        new = rewritten(text, Path(folder))
    if new == text:
        return 0
    if check:
        print("README.md's sessions are stale: run scripts/readme_sessions.py", file=sys.stderr)
        return 1
    README.write_text(new)
    print("README.md: sessions rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
