"""A check of several checkpoints (``check A B``): each judged as it would be alone, by its own configuration file,
into one output, and one exit code, the worst."""

from __future__ import annotations

import json

import pytest

import scalar_scales
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``legacy`` (48 NV101 warnings) and ``migrated`` (clean), side by side."""
    root = tmp_path_factory.mktemp("several")
    make_checkpoint(root / "legacy")
    scalar_scales.migrate(make_checkpoint(root / "migrated"))
    return root


def test_each_checkpoint_is_reported_as_alone_then_a_line_for_each(folders):
    result = run_cli_in_process("check", "legacy", "migrated", cwd=folders)
    alone = [run_cli_in_process("check", name, cwd=folders).stdout for name in ("legacy", "migrated")]
    summaries = [report.splitlines()[-1] for report in alone]
    assert result.stdout == (
        f"{alone[0]}\n{alone[1]}\nChecked 2 checkpoints:\n  legacy: {summaries[0]}\n  migrated: {summaries[1]}\n"
    )


def test_the_exit_code_is_the_worst_of_the_checkpoints(folders):
    assert run_cli_in_process("check", "migrated", "legacy", "--strict", cwd=folders).returncode == 1
    assert run_cli_in_process("check", "migrated", "legacy", cwd=folders).returncode == 0


def test_a_refused_path_is_one_line_the_others_are_checked_and_the_command_exits_2(folders):
    result = run_cli_in_process("check", "legacy", "absent", "migrated", cwd=folders)
    assert result.stderr == "scalar-scales: error: absent: no such file or folder\n"
    assert result.stdout.endswith(
        "Checked 2 checkpoints:\n"
        + "".join(
            f"  {name}: {run_cli_in_process('check', name, cwd=folders).stdout.splitlines()[-1]}\n"
            for name in ("legacy", "migrated")
        )
    )
    assert result.returncode == 2


def test_json_of_several_is_an_array_of_each_checkpoints_document(folders):
    several = json.loads(run_cli_in_process("check", "legacy", "migrated", "--json", cwd=folders).stdout)
    alone = [
        json.loads(run_cli_in_process("check", name, "--json", cwd=folders).stdout) for name in ("legacy", "migrated")
    ]
    assert several == alone


def test_sarif_of_several_is_one_log_with_each_checkpoints_run(folders):
    several = json.loads(
        run_cli_in_process("check", "legacy", "migrated", "--output-format", "sarif", cwd=folders).stdout
    )
    alone = [
        json.loads(run_cli_in_process("check", name, "--output-format", "sarif", cwd=folders).stdout)
        for name in ("legacy", "migrated")
    ]
    assert several == {**alone[0], "runs": alone[0]["runs"] + alone[1]["runs"]}


def test_github_annotations_are_refused_for_several_since_a_step_shows_ten_of_a_level(folders):
    result = run_cli_in_process("check", "legacy", "migrated", "--output-format", "github", cwd=folders)
    assert (result.returncode, result.stdout) == (2, "")
    assert "reports one checkpoint a run" in result.stderr


def test_a_path_after_an_option_is_checked_too(folders):
    given = run_cli_in_process("check", "legacy", "--statistics", "migrated", cwd=folders).stdout
    assert given == run_cli_in_process("check", "--statistics", "legacy", "migrated", cwd=folders).stdout


def test_each_checkpoint_is_judged_by_its_own_configuration_file(folders, tmp_path):
    for name in ("legacy", "other"):
        make_checkpoint(tmp_path / name)
    (tmp_path / "legacy" / "scalar-scales.toml").write_text('ignore = ["NV101"]\n')
    document = json.loads(run_cli_in_process("check", "legacy", "other", "--json", cwd=tmp_path).stdout)
    assert [each["summary"]["counts"] for each in document] == [{}, {"NV101": 48}]
