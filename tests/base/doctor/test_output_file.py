"""`check -o/--output-file FILE` (docs/check.md): the report written to a file, as ruff's --output-file writes it,
through the project's one way of replacing a file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process


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


@pytest.mark.parametrize("name", ["config.json", "model-00001-of-00003.safetensors", "model.safetensors.index.json"])
def test_a_file_of_the_checkpoint_checked_is_refused_in_one_line_and_left_as_it_is(checkpoint, name):
    """A report written there would replace the file it reports on: the check refuses before it reads anything."""
    before = (checkpoint / name).read_bytes()
    result = run_cli_in_process("check", checkpoint, "--json-output", checkpoint / name)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales: error: {checkpoint / name}: is a file of the checkpoint {checkpoint}: --json-output would "
        "replace it with the report on it\n"
    )
    assert (checkpoint / name).read_bytes() == before


def test_the_file_checked_is_refused_as_its_own_report_and_left_as_it_is(checkpoint):
    shard = checkpoint / "model-00001-of-00003.safetensors"
    alone = shard.rename(checkpoint.parent / "alone.safetensors")
    before = alone.read_bytes()
    assert run_cli_in_process("check", alone, "-o", alone).returncode == 2
    assert alone.read_bytes() == before


def test_a_new_file_in_the_folder_checked_takes_the_report(checkpoint):
    """As the GitHub Action writes its SARIF log into the workspace it checks."""
    result = run_cli_in_process("check", checkpoint, "-o", checkpoint / "report.txt")
    assert result.returncode == 0 and (checkpoint / "report.txt").read_text(encoding="utf-8")


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


def test_each_format_output_holds_what_that_format_writes_from_the_same_check(checkpoint, tmp_path):
    """``--json-output`` and ``--sarif-output``, as semgrep's: besides the output asked for, each format's report
    in its file, as ``--output-format FORMAT -o FILE`` writes it."""
    copies = {name: tmp_path / f"copy.{name}" for name in ("json", "sarif")}
    result = run_cli_in_process(
        "check", checkpoint, "--statistics", *(a for name, file in copies.items() for a in (f"--{name}-output", file))
    )
    assert (result.returncode, result.stdout) == (0, run_cli_in_process("check", checkpoint, "--statistics").stdout)
    for name, file in copies.items():
        alone = tmp_path / f"alone.{name}"
        run_cli_in_process("check", checkpoint, "--output-format", name, "-o", alone)
        assert file.read_bytes() == alone.read_bytes()


def test_a_format_output_holds_the_scales_list_adds_where_its_format_takes_it(checkpoint, tmp_path):
    copy = tmp_path / "copy.json"
    run_cli_in_process("check", checkpoint, "--list", "--json-output", copy)
    assert len(json.loads(copy.read_text(encoding="utf-8"))["scales"]) == 48


def test_one_file_named_for_two_reports_is_refused(checkpoint, tmp_path):
    report = tmp_path / "report"
    result = run_cli_in_process("check", checkpoint, "-o", report, "--json-output", report)
    assert (result.returncode, result.stdout, report.exists()) == (2, "", False)
    assert f"{report} is named as the file of two reports; give each its own" in result.stderr


def test_a_format_output_in_a_folder_is_refused_naming_its_option(checkpoint, tmp_path):
    result = run_cli_in_process("check", checkpoint, "--sarif-output", tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        f"scalar-scales: error: {tmp_path}: is a folder: --sarif-output names the file to write the report to\n",
    )


def test_annotations_of_several_checkpoints_are_refused_as_a_format_output_too(checkpoint, tmp_path):
    other = make_checkpoint(tmp_path / "other")
    result = run_cli_in_process("check", checkpoint, other, "--github-output", tmp_path / "annotations")
    assert result.returncode == 2
    assert "--github-output reports one checkpoint a run" in result.stderr


@pytest.mark.parametrize("option", ["--output-file", "--json-output"])
def test_the_one_checkpoint_given_refused_writes_no_report_file(tmp_path, option):
    """docs/check.md: the one path given refused, the command is refused before any file is written (the GitHub
    Action then has no SARIF log to upload for a check that did not run)."""
    report = tmp_path / "report.txt"
    report.write_text("an old report\n")
    result = run_cli_in_process("check", tmp_path / "absent", option, report)
    assert (result.returncode, result.stdout, report.read_text()) == (2, "", "an old report\n")
    assert result.stderr == f"scalar-scales: error: {tmp_path / 'absent'}: no such file or folder\n"


def test_several_checkpoints_none_checked_leave_no_old_report_in_the_file(tmp_path):
    """docs/check.md: where several paths are given and none is checked, the file is replaced with an empty one,
    so that an old report never stays."""
    report = tmp_path / "report.txt"
    report.write_text("an old report\n")
    result = run_cli_in_process("check", tmp_path / "absent", tmp_path / "gone", "-o", report)
    assert (result.returncode, report.read_text()) == (2, "")


def test_a_refused_configuration_file_leaves_the_file_as_it_was(tmp_path):
    """docs/check.md: where every path's configuration file is refused, the command is, before any file is
    replaced."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    (checkpoint / "scalar-scales.toml").write_text('strict = "yes"\n')
    report = tmp_path / "report.txt"
    report.write_text("an old report\n")
    result = run_cli_in_process("check", checkpoint, "-o", report)
    assert (result.returncode, report.read_text()) == (2, "an old report\n")
