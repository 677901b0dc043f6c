"""The command line: --version, --help, unknown options and commands refused with the nearest one named, and no
torch in the tool itself."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import warnings

import pytest

import scalar_scales.cli
from scalar_scales import __version__
from scalar_scales.cli import main
from scalar_scales_testkit.cli import make_checkpoint, run_cli, run_cli_in_process


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, as a user runs it (``python -m scalar_scales``)."""
    return subprocess.run([sys.executable, "-m", "scalar_scales", *args], capture_output=True, text=True)


def test_version_prints_the_installed_version():
    result = run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"scalar-scales {__version__}")
    assert __version__ != "0+unknown"


def test_dash_capital_v_prints_the_version_as_ruff_s_does():
    assert run_cli_in_process("-V").stdout == f"scalar-scales {__version__}\n"


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0
    commands = [match[1] for line in result.stdout.splitlines() if (match := re.match(r"    (\w+) ", line))]
    assert commands == ["check", "rule", "migrate"]


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: scalar-scales" in capsys.readouterr().out


def test_the_cli_imports_no_torch(checkpoint):
    """README: neither command needs torch. Importing the modules is not enough: each command imports what it needs
    when it runs, so a check (every rule, each output format), a migrate and the rules' reference are run too."""
    code = (
        "import sys, contextlib, io, scalar_scales.cli, scalar_scales.sources\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    for command in (['check', {str(checkpoint)!r}, '--list'], ['check', {str(checkpoint)!r}, '--json'],\n"
        f"                    ['check', {str(checkpoint)!r}, '--output-format', 'sarif'],\n"
        f"                    ['migrate', {str(checkpoint)!r}], ['rule', '--all']):\n"
        "        codes.append(scalar_scales.cli.main(command))\n"
        "print(codes, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", "codes = []\n" + code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[0, 0, 0, 0, 0] False"  # each command ran to its end, none refused


def test_a_check_imports_neither_the_header_editor_nor_threading(checkpoint):
    """What only ``migrate`` (the header editor) or another thread needs is not on a check's start-up."""
    code = (
        "import sys, contextlib, io, scalar_scales.cli; out = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out): scalar_scales.cli.main(['check', {str(checkpoint)!r}])\n"
        "print(sorted({'scalar_scales.files.header_edit', 'threading'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def refusal(*args: str) -> str:
    """The one line a refused command line prints, having printed nothing else and exited 2."""
    result = run_cli_in_process(*args)
    assert (result.returncode, result.stdout, len(result.stderr.splitlines())) == (2, "", 1), result
    return result.stderr.strip()


def test_a_misspelt_option_is_refused_naming_the_nearest():
    assert refusal("check", "--strcit", "X") == (
        "scalar-scales check: error: unrecognized argument --strcit; did you mean --strict? "
        "(see scalar-scales check --help)"
    )


@pytest.mark.parametrize(
    ("given", "meant"),
    [("--sh", "--show-all or --show-settings"), ("--str", "--strict"), ("--exit", "--exit-zero")],
)
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
    assert "unrecognized argument 'Y'" in refusal("migrate", "X", "Y")


def test_the_command_runs_in_a_thread_other_than_the_main_one_leaving_sigterm_as_it_was(checkpoint, capsys):
    """Only the main thread may set a signal handler: elsewhere the command runs without turning SIGTERM into an
    interrupt."""
    before = signal.getsignal(signal.SIGTERM)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(["check", str(checkpoint), "--statistics"])))
    thread.start()
    thread.join()
    assert codes == [0] and signal.getsignal(signal.SIGTERM) is before
    assert "NV101" in capsys.readouterr().out


# The test kit's in-process runner, which most tests of what the command decides use: what a process gives.


def test_the_command_run_in_this_process_gives_what_its_own_process_gives(tmp_path):
    """Exit code, stdout and stderr alike, for a report in each format, a migration, refusals and a usage error,
    each run on its own copy (run from a folder of its own, whose name is the one difference); and the process is
    left as it was: its handlers, environment, folder, arguments, streams and warnings filters."""
    folders = {runner: tmp_path / runner.__name__ for runner in (run_cli_in_process, run_cli)}
    for folder in folders.values():
        make_checkpoint(folder / "ckpt")
    commands = [
        ("check", "ckpt"),
        ("check", "ckpt", "--json", "--list"),
        ("check", "ckpt", "--output-format", "sarif"),
        ("check", "ckpt", "--output-format", "github", "--show-all"),
        ("check", "absent"),
        ("check", "ckpt", "--sh"),
        ("rule", "NV101"),
        ("migrate", "ckpt", "--dry-run"),
        ("migrate", "ckpt"),
        ("migrate", "ckpt", "--json"),
        ("migrate", "ckpt/", "--to", "legacy"),
        ("chek",),
        ("--help",),
        (),
    ]
    state = lambda: (  # noqa: E731
        {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)},
        dict(os.environ),
        os.getcwd(),
        sys.argv,
        (sys.stdout, sys.stderr),
        warnings.filters[:],
    )
    before = state()
    for command in commands:
        results = []
        for runner, folder in folders.items():
            result = runner(*command, env={"SCALAR_SCALES_PORTABLE": "1"}, cwd=folder)
            results.append(
                (result.returncode, *(text.replace(str(folder), "FOLDER") for text in (result.stdout, result.stderr)))
            )
            assert state() == before, command
        assert results[0] == results[1], command


def test_the_in_process_runner_refuses_what_only_a_process_reads_and_shows_a_traceback_as_one_would(
    tmp_path, monkeypatch
):
    for env in ({"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C"}, {"HF_HUB_OFFLINE": "1"}):
        with pytest.raises(ValueError, match="use run_cli"):
            run_cli_in_process("check", tmp_path, env=env)
    with pytest.raises(ValueError, match="use run_cli"):
        run_cli_in_process("check", "hf://org/model")

    def fails(args: object) -> int:
        raise RuntimeError("a defect")

    monkeypatch.setattr(scalar_scales.cli, "_run", fails)
    result = run_cli_in_process("check", tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert result.stderr.endswith("RuntimeError: a defect\n")
