"""The README's sessions: each code block that starts with ``$ scalar-scales ...``, its commands and what it shows
under each, run as a reader runs them: in the README's order, in a folder that holds ``my-model``, the small
checkpoint the README describes (``make_checkpoint(layers=2, experts=4)``). tests/base/test_readme.py checks them;
scripts/readme_sessions.py writes them."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process

__all__ = ["SESSION", "commands", "prepared", "rewritten", "run", "runs"]

SESSION = re.compile(r"^```\n(\$ scalar-scales .*?)^```$", flags=re.MULTILINE | re.DOTALL)
"""A code block that starts with a command at a prompt: each ``$ scalar-scales ...`` line, then what it prints."""


def commands(block: str) -> list[tuple[str, str]]:
    """Each command of one session's block (without its prompt), with what is shown under it (up to the next
    command or the block's end)."""
    found = []
    for part in re.split(r"^(?=\$ )", block, flags=re.MULTILINE):
        if part:
            command, _, shown = part.partition("\n")
            found.append((command.removeprefix("$ "), shown))
    return found


def runs(text: str) -> list[tuple[str, str]]:
    """:func:`commands` of every session of ``text``, in order."""
    return [found for block in SESSION.findall(text) for found in commands(block)]


def prepared(folder: Path) -> Path:
    """``folder`` with ``my-model`` in it, as the README's first session finds it."""
    make_checkpoint(folder / "my-model", layers=2, experts=4)
    return folder


def run(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """One session's ``scalar-scales ...`` command, run in ``folder`` as a reader's terminal runs it (no width, no
    forced colour)."""
    program, *arguments = shlex.split(command)
    if program != "scalar-scales":
        raise ValueError(f"not a scalar-scales command: {command}")
    return run_cli_in_process(*arguments, cwd=folder, env={"COLUMNS": None, "FORCE_COLOR": None})


def rewritten(text: str, folder: Path) -> str:
    """``text`` with each session's output as its commands print it, run one after another in ``folder``
    (:func:`prepared` first). A command that fails or writes to stderr is an error: a session shows a command
    that works."""
    prepared(folder)

    def session(block: re.Match[str]) -> str:
        printed = []
        for command, _ in commands(block.group(1)):
            result = run(command, folder)
            if (result.returncode, result.stderr) != (0, ""):
                raise RuntimeError(f"README.md: `{command}` exits {result.returncode}: {result.stderr}")
            printed.append(f"$ {command}\n{result.stdout}")
        return "```\n" + "".join(printed) + "```"

    return SESSION.sub(session, text)
