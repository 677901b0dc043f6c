"""README.md serves the user first: its first 80 lines say what the tool is for, how to install it, the command to
run, what it prints and what to do next; and each session it shows is what the command prints."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.readme import prepared, run, runs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_LINES = 80
"""How far down the user's job must be told in full (issue 43: the first command used to be at line 305)."""


def test_the_readmes_session_is_what_the_command_prints(tmp_path):
    """The README's `check`, `migrate` and `check` again of `my-model`, a small checkpoint as llm-compressor's
    NVFP4 presets write it (legacy (1,) scales, 2 layers of 4 experts, as the README says), run in that order in
    the folder that holds it, print what the README shows, line for line, and exit 0, as it says the first check
    does. A change to the report, to migrate's lines or to the round trip's observations fails here:
    scripts/readme_sessions.py runs the commands as this test does and writes what they print."""
    prepared(tmp_path)
    shown = runs(README.read_text())
    assert [command for command, _ in shown] == [
        "scalar-scales check my-model",
        "scalar-scales migrate my-model",
        "scalar-scales check my-model",
    ]
    for command, output in shown:
        result = run(command, tmp_path)
        assert (result.returncode, result.stderr) == (0, ""), result
        assert result.stdout == output, f"README.md's `{command}` is stale: run scripts/readme_sessions.py"


def test_the_readmes_first_lines_tell_the_users_job():
    """Within the first 80 lines: install, `check PATH` and `hf://`, a session with its output, then `migrate`,
    `rule CODE`, the exit codes and the docs. The project's own sections come after."""
    text = README.read_text()
    first = "\n".join(text.splitlines()[:FIRST_LINES])
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings[:3] == ["Install", "Check a checkpoint", "What to do next"]
    assert f"## {headings[3]}" not in first, "the README's user sections run past its first 80 lines"
    for told in (
        "pip install /path/to/scalar-scales ",
        "$ scalar-scales check my-model\n",
        "scalar-scales check hf://ORG/NAME ",
        "$ scalar-scales migrate my-model\n",
        "All checks passed",
        "`scalar-scales rule NV101`",
        "Exit codes: `check` 0",
        "[docs/check.md](docs/check.md)",
    ):
        assert told in first, told


def test_the_install_lines_name_the_extras_the_package_declares():
    """README: Install's `pip install "/path/to/scalar-scales[EXTRA]"` lines name extras pyproject.toml has."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = re.findall(r'^pip install "/path/to/scalar-scales\[(\w+)\]"', README.read_text(), flags=re.MULTILINE)
    assert {"hub", "producer"} <= set(named) <= extras


def test_rule_prints_what_the_readme_says_it_does():
    """README: `scalar-scales rule NV101` prints what the rule finds, what vLLM did with it and its fix."""
    result = run_cli_in_process("rule", "NV101")
    assert result.returncode == 0
    assert all(part in result.stdout for part in ("Finds: ", "Effect: ", "Fix: "))
