"""The command line: --version, --help, unknown options and commands refused with the nearest one named, and no
torch in the tool itself."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

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


def refusal(*args: str) -> str:
    """The one line a refused command line prints, having printed nothing else and exited 2."""
    result = run(*args)
    assert (result.returncode, result.stdout, len(result.stderr.splitlines())) == (2, "", 1), result
    return result.stderr.strip()


def test_a_misspelt_option_is_refused_naming_the_nearest():
    assert refusal("check", "--strcit", "X") == (
        "scalar-scales check: error: unrecognized argument --strcit; did you mean --strict? "
        "(see scalar-scales check --help)"
    )


@pytest.mark.parametrize(("given", "meant"), [("--sh", "--show-all"), ("--str", "--strict"), ("--exit", "--exit-zero")])
def test_an_abbreviated_option_is_refused_naming_the_option_it_abbreviates(given, meant):
    assert f"unrecognized argument {given}; did you mean {meant}?" in refusal("check", given, "X")


def test_an_option_given_a_value_is_matched_by_its_name():
    assert "unrecognized argument --ouptut-format=json; did you mean --output-format?" in refusal(
        "check", "--ouptut-format=json", "X"
    )


def test_an_option_of_another_command_is_refused_with_its_commands_nearest():
    assert "; did you mean --dry-run?" in refusal("migrate", "--dry", "X")


def test_an_option_like_no_other_is_refused_without_a_suggestion():
    assert refusal("check", "--zzzzzz", "X") == (
        "scalar-scales check: error: unrecognized argument --zzzzzz (see scalar-scales check --help)"
    )


def test_a_misspelt_command_is_refused_naming_the_nearest():
    assert refusal("chek", "X") == (
        "scalar-scales: error: unknown command 'chek'; did you mean check? (see scalar-scales --help)"
    )


def test_an_unknown_command_like_no_other_is_refused_naming_the_commands():
    assert refusal("zzz") == (
        "scalar-scales: error: unknown command 'zzz'; the commands are check, rule, migrate (see scalar-scales --help)"
    )


def test_an_extra_argument_is_refused():
    assert "unrecognized argument 'Y'" in refusal("check", "X", "Y")
