"""A check of several checkpoints (``check A B``): each judged as it would be alone, by its own configuration file,
into one output, and one exit code, the worst."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

import scalar_scales
from scalar_scales_testkit.broken import rewrite_shard, shard_of
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process

ZERO = "model.layers.1.mlp.experts.2.down_proj.input_global_scale"


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


def test_the_exit_code_is_the_worst_of_the_checkpoints(folders, tmp_path):
    """``legacy`` exits 0 alone, and ``legacy`` with an input scale of 0 exits 1: together, 1, in either order."""
    legacy = folders / "legacy"
    broken = shutil.copytree(legacy, tmp_path / "zero-scale")
    rewrite_shard(shard_of(broken, ZERO), lambda tensors: tensors[ZERO].update(data=struct.pack("<f", 0.0)))
    alone = [run_cli_in_process("check", path).returncode for path in (legacy, broken)]
    together = [run_cli_in_process("check", *paths).returncode for paths in ((legacy, broken), (broken, legacy))]
    assert (alone, together) == ([0, 1], [1, 1])


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
    runs = [
        {**log["runs"][0], "automationDetails": {"id": f"scalar-scales/{name}/"}}
        for log, name in zip(alone, ("legacy", "migrated"), strict=True)
    ]
    assert several == {**alone[0], "runs": runs}


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


def test_each_sarif_run_has_its_checkpoints_own_category(folders):
    log = json.loads(run_cli_in_process("check", "legacy", "migrated", "--output-format", "sarif", cwd=folders).stdout)
    assert [run["automationDetails"]["id"] for run in log["runs"]] == [
        "scalar-scales/legacy/",
        "scalar-scales/migrated/",
    ]


def test_statistics_of_several_name_each_checkpoint(folders):
    document = json.loads(
        run_cli_in_process("check", "legacy", "migrated", "--json", "--statistics", cwd=folders).stdout
    )
    assert [(each["checkpoint"], len(each["statistics"])) for each in document] == [("legacy", 1), ("migrated", 0)]
    text = run_cli_in_process("check", "legacy", "migrated", "--statistics", "-q", cwd=folders).stdout
    assert text == "legacy:\n48\tNV101\t[*] legacy-scale-shape\n\nmigrated:\n"


def test_a_path_given_twice_is_checked_once(folders):
    assert (
        run_cli_in_process("check", "legacy", "legacy", cwd=folders).stdout
        == run_cli_in_process("check", "legacy", cwd=folders).stdout
    )


def test_a_path_whose_configuration_file_is_refused_is_refused_and_the_others_are_checked(tmp_path):
    for name in ("good", "bad"):
        make_checkpoint(tmp_path / name)
    (tmp_path / "bad" / "scalar-scales.toml").write_text('strict = "yes"\n')
    result = run_cli_in_process("check", "bad", "good", "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"scalar-scales: error: {tmp_path / 'bad' / 'scalar-scales.toml'}: ")
    assert [each["summary"]["checkpoint"] for each in json.loads(result.stdout)] == ["good"]


def test_where_no_checkpoint_is_checked_the_output_file_is_emptied_not_left_as_it_was(folders, tmp_path):
    out = tmp_path / "report.json"
    out.write_text("an old report\n")
    result = run_cli_in_process("check", "absent", "also-absent", "--json", "-o", out, cwd=folders)
    assert (result.returncode, result.stdout, out.read_text()) == (2, "", "")


def test_a_usage_refusal_names_the_configuration_file_that_set_the_format_not_an_option_never_given(tmp_path):
    make_checkpoint(tmp_path / "ckpt")
    (tmp_path / "scalar-scales.toml").write_text('output-format = "github"\n')
    result = run_cli_in_process("check", "ckpt", "-q", cwd=tmp_path)
    assert result.returncode == 2
    assert f"cannot be given with output-format github ({tmp_path / 'scalar-scales.toml'})" in result.stderr


def test_show_settings_is_refused_with_an_output_file(folders, tmp_path):
    result = run_cli_in_process("check", "legacy", "--show-settings", "-o", tmp_path / "s.txt", cwd=folders)
    assert (result.returncode, result.stdout) == (2, "")
    assert "--show-settings prints the settings; it cannot be given with --output-file" in result.stderr
    assert not (tmp_path / "s.txt").exists()


def test_sarif_of_more_checkpoints_than_github_takes_runs_in_a_file_is_refused(tmp_path):
    names = [f"c{k}" for k in range(21)]
    for name in names:
        make_checkpoint(tmp_path / name, shards=1, experts=1, layers=1)
    result = run_cli_in_process("check", *names, "--output-format", "sarif", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "scalar-scales: error: --output-format sarif: GitHub code scanning takes at most 20 runs in a SARIF file, "
        "and 21 checkpoints were given: check fewer at a time\n"
    )


def test_configuration_files_that_set_different_output_formats_are_refused_unless_one_is_named(tmp_path):
    """One output holds every checkpoint's report, so it has one format: two files that set two are a usage
    error, and ``--output-format`` decides it."""
    for name, output_format in (("first", "json"), ("second", "sarif")):
        make_checkpoint(tmp_path / name)
        (tmp_path / name / "scalar-scales.toml").write_text(f'output-format = "{output_format}"\n')
    refused = run_cli_in_process("check", "first", "second", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "the configuration files of the paths given set several output formats (json, sarif); name one with " in (
        refused.stderr
    )
    named = run_cli_in_process("check", "first", "second", "--output-format", "json", cwd=tmp_path)
    assert [each["summary"]["counts"] for each in json.loads(named.stdout)] == [{"NV101": 48}] * 2
