"""`check -o/--output-file FILE` (docs/check.md): the report written to a file, as ruff's --output-file writes it,
through the project's one way of replacing a file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from scalar_scales_testkit.cli import run_cli_in_process


def test_the_report_goes_to_the_file_and_nothing_to_standard_output(checkpoint, tmp_path):
    report = tmp_path / "report.txt"
    result = run_cli_in_process("check", checkpoint, "-o", report)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert report.read_text(encoding="utf-8") == run_cli_in_process("check", checkpoint).stdout


def test_the_file_holds_the_format_asked_for(checkpoint, tmp_path):
    report = tmp_path / "report.json"
    run_cli_in_process("check", checkpoint, "--output-file", report, "--output-format", "json")
    assert json.loads(report.read_text(encoding="utf-8"))["summary"]["counts"] == {"NV101": 48}


def test_the_exit_code_is_the_check_s(checkpoint, tmp_path):
    assert run_cli_in_process("check", checkpoint, "-o", tmp_path / "r.txt", "--strict").returncode == 1


def test_a_file_there_is_replaced_whole(checkpoint, tmp_path):
    report = tmp_path / "report.txt"
    report.write_text("an old report, longer than nothing\n" * 1000)
    run_cli_in_process("check", checkpoint, "-o", report, "--statistics")
    assert report.read_text(encoding="utf-8") == "48\tNV101\t[*] legacy-scale-shape\n" + (
        "Found 48 findings: 48 warnings (NV101 48).\n"
    )


def test_a_link_is_replaced_and_never_written_through(checkpoint, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the report\n")
    report = tmp_path / "report.txt"
    report.symlink_to(target)
    assert run_cli_in_process("check", checkpoint, "-o", report).returncode == 0
    assert not report.is_symlink() and report.read_text(encoding="utf-8").startswith(str(checkpoint))
    assert target.read_text() == "not the report\n"


def test_a_new_file_takes_the_mode_the_umask_gives(checkpoint, tmp_path):
    report = tmp_path / "report.txt"
    previous = os.umask(0o027)
    try:
        run_cli_in_process("check", checkpoint, "-o", report)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(report.stat().st_mode) == 0o640


def test_a_file_in_a_folder_that_is_not_there_is_refused_in_one_line_before_the_check(checkpoint, tmp_path):
    folder = tmp_path / "absent"
    result = run_cli_in_process("check", checkpoint, "-o", folder / "report.txt")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales: error: {folder}: cannot create a file in this folder: No such file or directory\n"
    )


@pytest.mark.parametrize("silent", [(), ("--silent",)])
def test_a_folder_is_refused_in_one_line(checkpoint, tmp_path, silent):
    result = run_cli_in_process("check", checkpoint, "-o", tmp_path, *silent)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales: error: {tmp_path}: is a folder: --output-file names the file to write the report to\n"
    )


def test_silent_still_writes_the_file(checkpoint, tmp_path):
    report = tmp_path / "report.txt"
    result = run_cli_in_process("check", checkpoint, "-s", "-o", report)
    assert (result.returncode, result.stdout) == (0, "")
    assert report.read_text(encoding="utf-8").endswith("Found 48 findings: 48 warnings (NV101 48).\n")


def test_no_temporary_file_is_left_beside_it(checkpoint, tmp_path):
    run_cli_in_process("check", checkpoint, "-o", tmp_path / "report.txt")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ckpt", "report.txt"]
