"""The command line: --version, --help, and no torch in the tool itself."""

from __future__ import annotations

import re
import subprocess
import sys

from scalar_scales import __version__
from scalar_scales.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scalar_scales", *args], capture_output=True, text=True)


def test_version_prints_the_installed_version():
    result = run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"scalar-scales {__version__}")
    assert __version__ != "0+unknown"


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0
    commands = [match[1] for line in result.stdout.splitlines() if (match := re.match(r"    (\w+) ", line))]
    assert commands == ["check", "rule", "migrate"]


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: scalar-scales" in capsys.readouterr().out


def test_the_cli_imports_no_torch():
    code = "import sys, scalar_scales.cli, scalar_scales.sources; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
