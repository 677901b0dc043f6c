"""`check --color` (docs/check.md, Output): the severities coloured as ruff colours its own, on a terminal, or as
--color, NO_COLOR and FORCE_COLOR decide; only in the text."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from scalar_scales.doctor.report.text import COLOURS, RESET
from scalar_scales_testkit.cli import run_cli_in_process

WARNING = f"{COLOURS['warning']}warning{RESET}"
UNSET = {"NO_COLOR": None, "FORCE_COLOR": None}


def test_always_colours_each_rule_s_severity_and_the_summary_s_counts(checkpoint):
    lines = run_cli_in_process("check", checkpoint, "--color", "always", env=UNSET).stdout.splitlines()
    assert lines[2].startswith(f"NV101 legacy-scale-shape ({WARNING}): 48 findings")
    assert lines[-1] == f"Found 48 findings: {COLOURS['warning']}48 warnings{RESET} (NV101 48)."


def test_always_colours_all_checks_passed_green(checkpoint):
    result = run_cli_in_process("check", checkpoint, "--color", "always", "--select", "NV3", env=UNSET)
    assert result.stdout.splitlines()[-1].startswith(f"{COLOURS['passed']}All checks passed{RESET}: no finding")


def test_only_the_report_s_own_lines_are_coloured(checkpoint):
    plain = run_cli_in_process("check", checkpoint, "--color", "never").stdout.splitlines()
    painted = run_cli_in_process("check", checkpoint, "--color", "always").stdout.splitlines()
    assert [i for i, (a, b) in enumerate(zip(plain, painted, strict=True)) if a != b] == [2, len(plain) - 1]


@pytest.mark.parametrize(
    ("arguments", "env"),
    [
        ((), UNSET),
        (("--color", "never"), {"NO_COLOR": None, "FORCE_COLOR": "1"}),
        ((), {"NO_COLOR": "1", "FORCE_COLOR": "1"}),
    ],
    ids=["auto-into-a-pipe", "never-over-force-color", "no-color-over-force-color"],
)
def test_no_colour(checkpoint, arguments, env):
    assert "\x1b" not in run_cli_in_process("check", checkpoint, *arguments, env=env).stdout


@pytest.mark.parametrize(
    ("arguments", "env"),
    [((), {"NO_COLOR": None, "FORCE_COLOR": "1"}), (("--color", "always"), {"NO_COLOR": "1", "FORCE_COLOR": None})],
    ids=["force-color-into-a-pipe", "always-over-no-color"],
)
def test_colour(checkpoint, arguments, env):
    assert WARNING in run_cli_in_process("check", checkpoint, *arguments, env=env).stdout


def test_an_empty_no_color_is_not_set(checkpoint):
    assert WARNING in run_cli_in_process("check", checkpoint, env={"NO_COLOR": "", "FORCE_COLOR": "1"}).stdout


def test_auto_colours_on_a_terminal(checkpoint):
    """A real terminal: the command in a process of its own, its standard output a pseudo-terminal."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    try:
        process = subprocess.run(
            [sys.executable, "-m", "scalar_scales", "check", str(checkpoint), "--select", "NV101"],
            stdout=follower,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
        os.close(follower)
        output = b""
        while chunk := _read(leader):
            output += chunk
    finally:
        os.close(leader)
    assert process.returncode == 0, process.stderr
    assert WARNING.encode() in output


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other end is closed and everything was read
        return b""


@pytest.mark.parametrize("output_format", ["json", "github", "sarif"])
def test_always_is_refused_with_a_format_that_is_not_text(checkpoint, output_format):
    result = run_cli_in_process("check", checkpoint, "--color", "always", "--output-format", output_format)
    assert (result.returncode, result.stdout) == (2, "")
    assert f"--color always colours the text; it cannot be given with --output-format {output_format}" in (
        result.stderr
    )


def test_a_format_that_is_not_text_is_never_coloured(checkpoint):
    assert "\x1b" not in run_cli_in_process("check", checkpoint, "--json", env={"FORCE_COLOR": "1"}).stdout
