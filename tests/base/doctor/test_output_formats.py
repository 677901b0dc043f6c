"""`scalar-scales check --output-format`, each format of the formats' table, `--exit-zero`, and what each format
says: errors first, plurals, the commit checked, GitHub annotations that a hostile name cannot forge, JSON text as
the standard library writes it; and the docs, which list the formats of the table."""

from __future__ import annotations

import gzip
import json
import math
import random
import re
import shlex
import string
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.doctor.report import FORMATS as FORMATS_TABLE
from scalar_scales.doctor.report import OUTPUT_FORMATS, formats_table
from scalar_scales.doctor.report import github as github_format
from scalar_scales.doctor.report import sarif as sarif_format
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales.sources import read_headers
from scalar_scales_testkit.broken import CORPUS, clean_checkpoint, mla_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, renamed, run_cli, run_cli_in_process, shards
from scalar_scales_testkit.refusals import observed_not_to_load, refusals_of
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint


def set_value(checkpoint: Path, suffix: str, value: float, shard_index: int = 0) -> str:
    """Write ``value`` into the first scale of the first shard (or the ``shard_index``-th) whose name ends in
    ``suffix``; return its name."""
    shard = shards(checkpoint)[shard_index]
    header = read_headers(shard)[0]
    name = next(n for n in header.names if n.endswith(suffix))
    entry = header.tensors[name]
    raw = bytearray(shard.read_bytes())
    raw[header.data_start + entry.begin : header.data_start + entry.end] = struct.pack("<f", value)
    shard.write_bytes(bytes(raw))
    return name


def check_in(
    folder: Path, *args: str | Path, env: dict[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``scalar-scales check ARGS`` run in ``folder``, as a CI step runs in its workspace."""
    return run_cli_in_process("check", *args, cwd=folder, env=env)


@pytest.fixture
def broken(checkpoint: Path) -> tuple[Path, str]:
    """The legacy checkpoint (48 NV101 warnings) with one NaN input scale (an NV301 error)."""
    return checkpoint, set_value(checkpoint, "input_global_scale", math.nan)


# --output-format and --json


def test_output_format_json_prints_what_json_prints(checkpoint):
    assert (
        run_cli_in_process("check", checkpoint, "--output-format", "json").stdout
        == run_cli_in_process("check", checkpoint, "--json").stdout
    )


def test_json_with_another_output_format_is_refused_in_one_line(checkpoint):
    result = run_cli_in_process("check", checkpoint, "--json", "--output-format", "github")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "scalar-scales check: error: --json is --output-format json; it cannot be given with --output-format github "
        "(see scalar-scales check --help)\n"
    )


def test_json_with_output_format_json_is_accepted(checkpoint):
    assert run_cli_in_process("check", checkpoint, "--json", "--output-format", "json").returncode == 0


def test_an_unknown_output_format_is_refused(checkpoint):
    result = run_cli_in_process("check", checkpoint, "--output-format", "xml")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "'xml'" in result.stderr


# Every format: the same findings, the same exit code; the options each takes

FORMATS = list(OUTPUT_FORMATS)


def broken_checkpoint(folder: Path) -> Path:
    """The legacy checkpoint (48 NV101 warnings) with one input scale of 0 (an NV301 error)."""
    checkpoint = make_checkpoint(folder)
    set_value(checkpoint, "input_global_scale", 0.0)
    return checkpoint


CASES = {"clean": clean_checkpoint, "legacy": make_checkpoint, "broken": broken_checkpoint}


@pytest.fixture(scope="module")
def v4_flash_shaped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The synthetic V4-Flash-shaped legacy checkpoint (46 shards, 66,048 (1,) global scales, the data as sparse
    holes), and its "many-findings" variant, as benchmarks/check.py makes it: each global scale also in the other
    convention (66,048 NV302 errors and 66,048 NV101 warnings)."""
    root = tmp_path_factory.mktemp("v4-flash")
    legacy = write_synthetic_checkpoint(root / "legacy", data_bytes=400_000_000, sparse=True)
    many = write_synthetic_checkpoint(root / "many-findings", data_bytes=400_000_000, sparse=True)
    migrate_checkpoint(many)
    CORPUS["reciprocal-convention"].make(many, COMPRESSED_TENSORS_LAYOUT)
    migrate_checkpoint(many, to="legacy")
    return {"legacy": legacy, "many-findings": many}


V4_FLASH_COUNTS = {"legacy": {"NV101": 66_048}, "many-findings": {"NV302": 66_048, "NV101": 66_048}}


@pytest.mark.parametrize("case", CASES)
def test_every_format_exits_with_the_same_code(tmp_path, case):
    checkpoint = CASES[case](tmp_path / "ckpt")
    codes = {
        output_format: run_cli_in_process("check", checkpoint, "--output-format", output_format).returncode
        for output_format in FORMATS
    }
    assert set(codes.values()) == {1 if case == "broken" else 0}, codes


def test_every_format_refuses_an_unreadable_checkpoint_with_exit_2(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    shards(checkpoint)[0].write_bytes(b"\x01\x02")
    for output_format in FORMATS:
        result = run_cli_in_process("check", checkpoint, "--output-format", output_format)
        assert (result.returncode, result.stdout, len(result.stderr.splitlines())) == (2, "", 1), output_format


def _unescaped(data: str) -> str:
    return data.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


@pytest.mark.parametrize("case", CASES)
def test_json_sarif_and_github_with_show_all_have_the_same_findings(tmp_path, case):
    """JSON's (code, tensor, message) triples are GitHub's annotations with --show-all, and its (code, tensor,
    detail) triples SARIF's locations (within its limit of locations per result, which these are far below); GitHub
    adds a warning for each engine observed not to load the checkpoint, which is no finding."""
    checkpoint = CASES[case](tmp_path / "ckpt")
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    expected = sorted((f["code"], f["tensor"], f"{f['tensor']}: {f['message']}") for f in document["findings"])
    details = sorted((f["code"], f["tensor"], f"{f['tensor']}: {f['detail']}") for f in document["findings"])
    (run,) = json.loads(run_cli_in_process("check", checkpoint, "--output-format", "sarif").stdout)["runs"]
    in_sarif = sorted(
        (r["ruleId"], location["logicalLocations"][0]["name"], location["message"]["text"])
        for r in run["results"]
        for location in r["locations"]
    )
    github = run_cli_in_process("check", checkpoint, "--output-format", "github", "--show-all").stdout.splitlines()[:-1]
    not_loaded = [line for line in github if line.startswith("::warning title=Not loaded by ")]
    assert len(not_loaded) == len(refusals_of(checkpoint))
    annotated = sorted(
        (
            line.partition(",title=")[2][:5],
            _unescaped(line.split("::", 2)[2]).partition(": ")[0],
            _unescaped(line.split("::", 2)[2]),
        )
        for line in github
        if line not in not_loaded
    )
    assert in_sarif == details
    assert annotated == expected
    assert len(expected) == {"clean": 0, "legacy": 48, "broken": 49}[case]


@pytest.mark.parametrize("output_format", ["github", "sarif"])
def test_list_is_refused_where_the_format_has_no_place_for_the_scales(checkpoint, output_format):
    result = run_cli_in_process("check", checkpoint, "--list", "--output-format", output_format)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales check: error: --list is for --output-format text or json; it cannot be given with "
        f"--output-format {output_format} (see scalar-scales check --help)\n"
    )


@pytest.mark.parametrize("output_format", ["json", "github", "sarif"])
def test_quiet_is_refused_with_every_format_but_text(checkpoint, output_format):
    """A document or annotations without their summary would no longer be what their reader reads."""
    result = run_cli_in_process("check", checkpoint, "--quiet", "--output-format", output_format)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales check: error: --quiet is for --output-format text; it cannot be given with "
        f"--output-format {output_format} (see scalar-scales check --help)\n"
    )


@pytest.mark.parametrize("output_format", ["github", "sarif"])
def test_statistics_is_refused_where_there_is_no_place_for_counts(checkpoint, output_format):
    result = run_cli_in_process("check", checkpoint, "--statistics", "--output-format", output_format)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales check: error: --statistics is for --output-format text or json; it cannot be given with "
        f"--output-format {output_format} (see scalar-scales check --help)\n"
    )


@pytest.mark.parametrize("output_format", ["json", "sarif"])
def test_show_all_changes_nothing_where_every_finding_is_always_given(checkpoint, output_format):
    plain = run_cli_in_process("check", checkpoint, "--output-format", output_format)
    shown = run_cli_in_process("check", checkpoint, "--output-format", output_format, "--show-all")
    assert (shown.returncode, shown.stdout) == (plain.returncode, plain.stdout)
    assert plain.stdout.count("model.layers.") >= 48  # every finding's tensor


# --exit-zero


def test_exit_zero_exits_0_where_an_error_is_found(broken):
    checkpoint, _ = broken
    assert run_cli_in_process("check", checkpoint).returncode == 1
    result = run_cli_in_process("check", checkpoint, "--exit-zero", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["summary"]["exit_code"] == 0
    assert json.loads(result.stdout)["summary"]["errors"] == 1


def test_json_says_whether_the_check_failed_even_with_exit_zero(broken, tmp_path):
    """`exit_code` is the command's, 0 with --exit-zero: `failed` keeps the verdict a CI reading the document
    wants."""
    checkpoint, _ = broken
    summary = json.loads(run_cli_in_process("check", checkpoint, "--exit-zero", "--json").stdout)["summary"]
    assert (summary["exit_code"], summary["failed"]) == (0, True)
    clean = clean_checkpoint(tmp_path / "clean")
    assert json.loads(run_cli_in_process("check", clean, "--exit-zero", "--json").stdout)["summary"]["failed"] is False


def test_exit_zero_with_strict_exits_0_on_warnings(checkpoint):
    assert run_cli_in_process("check", checkpoint, "--strict", "--exit-zero").returncode == 0


def test_exit_zero_still_exits_2_for_an_unreadable_checkpoint(tmp_path):
    result = run_cli_in_process("check", tmp_path / "missing", "--exit-zero")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


# The text: errors first, the why once, plurals


def test_errors_are_reported_before_warnings_whatever_their_codes(broken):
    checkpoint, name = broken
    lines = run_cli_in_process("check", checkpoint, env={"COLUMNS": None}).stdout.splitlines()
    groups = [line.split()[0] for line in lines if line.startswith("NV")]
    assert groups == ["NV301", "NV101"]
    assert lines[-1] == "Found 49 findings: 1 error, 48 warnings (NV301 1, NV101 48)."
    nan = lines.index(
        "NV301 invalid-scale-value (error): 1 finding: a per-tensor scale that is zero, negative, NaN or Inf, or an "
        "input scale whose float32 reciprocal is Inf"
    )
    assert lines[nan + 1].startswith("  vLLM computes with 1/scale, which is NaN")
    assert lines[nan + 2] == f"    model-00001-of-00003.safetensors: {name}  is NaN"


def test_one_finding_is_counted_in_the_singular(clean_in_tmp):
    set_value(clean_in_tmp, "input_global_scale", 0.0)
    summary = run_cli_in_process("check", clean_in_tmp).stdout.splitlines()[-1]
    assert summary == "Found 1 finding: 1 error (NV301 1)." + observed_not_to_load(clean_in_tmp)


def test_one_shard_is_counted_in_the_singular(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "one", shards=1)
    assert run_cli_in_process("check", checkpoint).stdout.startswith(f"{checkpoint}: 1 shard, ")


def test_the_fix_command_quotes_a_folder_name_for_the_shell(tmp_path):
    """The command is one to paste: a folder whose name holds a space is one argument, not two."""
    checkpoint = make_checkpoint(tmp_path / "my ckpt")
    (nv101,) = [
        line for line in run_cli_in_process("check", checkpoint).stdout.splitlines() if line.startswith("NV101 ")
    ]
    command = nv101.partition("; fix: ")[2]
    assert command == f"scalar-scales migrate '{checkpoint}'"
    assert shlex.split(command) == ["scalar-scales", "migrate", str(checkpoint)]


def test_findings_that_differ_in_why_are_shown_under_each_why(clean_in_tmp):
    set_value(clean_in_tmp, "input_global_scale", 0.0)
    set_value(clean_in_tmp, "weight_global_scale", math.nan)
    lines = run_cli_in_process("check", clean_in_tmp, env={"COLUMNS": None}).stdout.splitlines()
    whys = [line for line in lines if line.startswith("  vLLM computes with 1/scale")]
    details = [line.rpartition("  ")[2] for line in lines if line.startswith("    model-")]
    assert len(whys) == 2 and sorted(details) == ["is 0", "is NaN"]


def test_the_json_findings_keep_rule_code_order(broken):
    checkpoint, _ = broken
    codes = [f["code"] for f in json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["findings"]]
    assert codes == sorted(codes) and codes[0] == "NV101" and codes[-1] == "NV301"


def test_a_json_finding_is_its_detail_and_its_why_as_one_message(broken):
    checkpoint, name = broken
    findings = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["findings"]
    (nan,) = [f for f in findings if f["code"] == "NV301"]
    assert (nan["tensor"], nan["detail"]) == (name, "is NaN")
    assert nan["message"] == f"{nan['detail']}: {nan['why']}"


def test_a_local_check_names_no_commit(checkpoint):
    assert json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["summary"]["commit"] is None
    assert "(commit" not in run_cli_in_process("check", checkpoint).stdout.splitlines()[0]


# GitHub annotations


def test_github_annotates_each_file_once_per_rule_with_its_count_relative_to_the_workspace(checkpoint):
    result = check_in(checkpoint.parent, "ckpt", "--output-format", "github")
    assert result.returncode == 0
    *annotations, summary = result.stdout.splitlines()
    assert [line.partition(",")[0] for line in annotations] == [
        f"::warning file=ckpt/{shard.name}" for shard in shards(checkpoint)
    ]
    assert all(",title=NV101 legacy-scale-shape::16 findings in this file: " in line for line in annotations)
    assert all("%0A... and 11 more (--output-format json lists every one)%0AvLLM 0.23" in line for line in annotations)
    assert summary == "Found 48 findings: 48 warnings (NV101 48)."


def test_github_annotates_the_most_numerous_pairs_of_rule_and_file_of_a_level_first(clean_in_tmp):
    set_value(clean_in_tmp, "weight_global_scale", math.nan, shard_index=0)
    set_value(clean_in_tmp, "weight_global_scale", 0.0, shard_index=1)
    set_value(clean_in_tmp, "input_global_scale", 0.0, shard_index=1)
    *annotations, _ = check_in(clean_in_tmp, ".", "--output-format", "github").stdout.splitlines()
    assert [line.partition(",")[0] for line in annotations if line.startswith("::error")] == [
        "::error file=model-00002-of-00003.safetensors",
        "::error file=model-00001-of-00003.safetensors",
    ]
    assert "::2 findings in this file: " in annotations[0]


@pytest.mark.parametrize("case", V4_FLASH_COUNTS)
def test_github_annotates_at_most_10_of_a_level_the_last_standing_for_the_rest(v4_flash_shaped, case):
    """A step shows at most 10 annotations of a level: the V4-Flash-shaped checkpoint's 46 shards are 9 annotations
    of a level and one that counts the findings of the other 37, and nothing suggests --show-all, which would
    print an annotation for each of them."""
    printed = check_in(v4_flash_shaped[case].parent, v4_flash_shaped[case].name, "--output-format", "github").stdout
    *annotations, _ = printed.splitlines()
    levels = [line.partition(" ")[0] for line in annotations]
    assert levels == (["::error"] * 10 if case == "many-findings" else []) + ["::warning"] * 10
    rest = annotations[-1]
    assert rest.startswith("::warning title=53124 more warnings::53124 more findings (NV101 53124) in 37 more files: ")
    assert rest.endswith("a step shows at most 10 annotations of a level; --output-format json lists every one")
    assert "--show-all" not in printed


def test_github_s_annotation_for_the_rest_names_the_step_summary_where_it_was_written(checkpoint, monkeypatch):
    monkeypatch.setattr(github_format, "ANNOTATIONS_PER_LEVEL", 2)
    summary_file = checkpoint.parent / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary_file)}
    *annotations, _ = check_in(checkpoint.parent, "ckpt", "--output-format", "github", env=env).stdout.splitlines()
    assert len(annotations) == 2
    assert annotations[1] == (
        "::warning title=32 more warnings::32 more findings (NV101 32) in 2 more files: a step shows at most 2 "
        "annotations of a level; the step summary counts them by file, and --output-format json lists every one"
    )


def test_github_appends_the_report_to_the_step_summary_as_a_table_of_each_rule_s_files(checkpoint):
    summary_file = checkpoint.parent / "summary.md"
    summary_file.write_text("an earlier step's summary\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary_file)}
    result = check_in(checkpoint.parent, "ckpt", "--output-format", "github", env=env)
    assert (result.returncode, result.stderr) == (0, "")
    lines = summary_file.read_text().splitlines()
    assert lines[:11] == [
        "an earlier step's summary",
        "### scalar-scales check ckpt",
        "",
        "Found 48 findings: 48 warnings (NV101 48).",
        "",
        "#### NV101 legacy-scale-shape (warning): 48 findings",
        "",
        "a global scale of shape (1,)",
        "",
        "| file | findings | first tensor |",
        "|---|--:|---|",
    ]
    assert [line.split(" | ")[:2] for line in lines[11:-1]] == [
        [f"| ckpt/{shard.name}", "16"] for shard in shards(checkpoint)
    ]
    assert lines[11].endswith(" | model.layers.0.mlp.experts.0.gate\\_proj.input\\_global\\_scale |")


def test_the_step_summary_counts_the_files_past_its_rows_in_one_row(checkpoint, monkeypatch):
    monkeypatch.setattr(github_format, "SUMMARY_ROWS", 2)
    summary_file = checkpoint.parent / "summary.md"
    check_in(checkpoint.parent, "ckpt", "--output-format", "github", env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    assert summary_file.read_text().splitlines()[-2:] == ["| 1 more file | 16 | |", ""]


def test_the_step_summary_shows_a_hostile_name_as_text_not_markup(checkpoint):
    module = "model.layers.0.mlp.experts.0.gate_proj."
    renamed(checkpoint, module, module.replace(".gate_proj", "x|<img src=x>*[a](b)\n.gate_proj"))
    summary_file = checkpoint.parent / "summary.md"
    check_in(checkpoint.parent, "ckpt", "--output-format", "github", env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    (row,) = [line for line in summary_file.read_text().splitlines() if "img" in line]
    assert "x\\|&lt;img src=x&gt;\\*\\[a\\](b)\\\\n.gate" in row
    assert row.count(" | ") == 2  # three cells, as every row


def test_the_step_summary_cuts_a_long_name_to_its_cell_s_bound(checkpoint):
    module = "model.layers.0.mlp.experts.0.gate_proj."
    renamed(checkpoint, module, module.replace(".gate_proj", "<" * 5000 + ".gate_proj"))
    summary_file = checkpoint.parent / "summary.md"
    check_in(checkpoint.parent, "ckpt", "--output-format", "github", env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    (row,) = [line for line in summary_file.read_text().splitlines() if "&lt;" in line]
    tensor = row.rstrip(" |").rpartition(" | ")[2]
    assert (len(tensor), tensor[-1]) == (github_format.SUMMARY_CELL, "…")


def test_a_step_summary_that_cannot_be_written_is_one_line_on_stderr_and_changes_no_exit_code(broken, tmp_path):
    checkpoint, _ = broken
    unwritable = tmp_path / "a-folder"
    unwritable.mkdir()
    plain = check_in(checkpoint.parent, "ckpt", "--output-format", "github")
    result = check_in(
        checkpoint.parent, "ckpt", "--output-format", "github", env={"GITHUB_STEP_SUMMARY": str(unwritable)}
    )
    assert (result.returncode, result.stdout) == (plain.returncode, plain.stdout) == (1, plain.stdout)
    assert (
        result.stderr == f"scalar-scales: GITHUB_STEP_SUMMARY: {unwritable}: Is a directory; the step has no summary\n"
    )


def test_an_engine_that_does_not_load_the_checkpoint_takes_a_place_among_a_level_s_annotations(tmp_path, monkeypatch):
    """SGLang's refusal of GLM's 0-D scales is a warning annotation, as is each other engine's: with room for 2
    warnings more than the engines, the 3 files of NV502 findings (a weight global scale of each shard left out of
    the index) are one annotation and one for the other 2."""
    checkpoint = mla_checkpoint(tmp_path / "glm", "Glm4MoeLiteForCausalLM")
    engines = len(refusals_of(checkpoint))
    monkeypatch.setattr(github_format, "ANNOTATIONS_PER_LEVEL", engines + 2)
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    left_out = {
        file: tensor for tensor, file in document["weight_map"].items() if tensor.endswith("weight_global_scale")
    }
    document["weight_map"] = {t: f for t, f in document["weight_map"].items() if t not in left_out.values()}
    index.write_text(json.dumps(document))
    *annotations, _ = check_in(tmp_path, "glm", "--output-format", "github").stdout.splitlines()
    assert [line.partition("::")[2].partition(" ")[0] for line in annotations] == ["warning"] * (engines + 2)
    assert annotations[1].startswith("::warning title=2 more warnings::2 more findings (NV502 2) in 2 more files: ")
    assert all(line.startswith("::warning title=Not loaded by ") for line in annotations[2:])
    assert any(line.startswith("::warning title=Not loaded by SGLang") for line in annotations[2:])


def test_github_with_show_all_annotates_every_finding(checkpoint):
    lines = check_in(checkpoint.parent, "ckpt", "--output-format", "github", "--show-all").stdout.splitlines()
    assert sum(line.startswith("::warning file=ckpt/") for line in lines) == 48


def test_github_gives_an_error_its_own_annotation_first(broken):
    checkpoint, name = broken
    first = check_in(checkpoint.parent, "ckpt", "--output-format", "github").stdout.splitlines()[0]
    assert first.startswith(
        f"::error file=ckpt/model-00001-of-00003.safetensors,title=NV301 invalid-scale-value::{name}: is NaN: vLLM"
    )


def test_github_gives_information_a_notice(clean_in_tmp):
    config = json.loads((clean_in_tmp / "config.json").read_text())
    del config["quantization_config"]["format_version"]
    (clean_in_tmp / "config.json").write_text(json.dumps(config))
    (line,) = [
        line
        for line in check_in(clean_in_tmp, ".", "--output-format", "github").stdout.splitlines()
        if line.startswith("::notice")
    ]
    assert line.startswith("::notice file=config.json,title=NV103 marker-missing::every global scale is 0-D")


@pytest.mark.parametrize("given", ["absolute", "relative"])
def test_github_names_a_file_outside_the_workspace_by_its_absolute_path(checkpoint, tmp_path, given):
    """Given as ``../ckpt`` from the workspace, too: a path with ``..`` is no path in the workspace."""
    (tmp_path / "workspace").mkdir()
    path = checkpoint if given == "absolute" else Path("..") / checkpoint.name
    first = check_in(tmp_path / "workspace", path, "--output-format", "github").stdout.splitlines()[0]
    assert first.startswith(f"::warning file={checkpoint}/model-00001-of-00003.safetensors,title=")


def test_a_tensor_name_cannot_forge_a_github_annotation(checkpoint):
    module = "model.layers.0.mlp.experts.0.gate_proj."
    renamed(checkpoint, module, module.replace(".gate_proj", "x\n::error file=a::forged%0A,.gate_proj"))
    lines = check_in(checkpoint.parent, "ckpt", "--output-format", "github", "--show-all").stdout.splitlines()
    assert not any(line.startswith("::error") for line in lines)
    forged = [line for line in lines if "forged" in line]
    assert len(forged) == 2  # the module's weight and input global scales, each on its own line
    assert all("x%0A::error file=a::forged%250A,.gate_proj" in line for line in forged)


def test_a_file_name_is_escaped_as_a_github_property(checkpoint):
    old = shards(checkpoint)[0].name
    new = "a:b,c%.safetensors"
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    (checkpoint / old).rename(checkpoint / new)
    document["weight_map"] = {tensor: new if file == old else file for tensor, file in document["weight_map"].items()}
    index.write_text(json.dumps(document))
    lines = check_in(checkpoint.parent, "ckpt", "--output-format", "github").stdout.splitlines()
    assert any(line.startswith("::warning file=ckpt/a%3Ab%2Cc%25.safetensors,title=NV101") for line in lines)


# JSON and SARIF text, written in pieces


@pytest.mark.parametrize("options", [["--output-format", "json", "--list"], ["--output-format", "sarif"]])
def test_json_and_sarif_are_the_text_json_dumps_writes(checkpoint, options):
    """Their long lists are written from templates of each record's shape (scalar_scales/doctor/report/json_text.py),
    so their text is held to the standard library's: a tensor's name with a newline, a %, a character outside ASCII
    and a bidirectional override, a file name with a % and a comma, and a NaN scale (a string) among them."""
    module = "model.layers.0.mlp.experts.0.gate_proj."
    renamed(checkpoint, module, module.replace(".gate_proj", "x\n%0A é\u202e\x1b.gate_proj"))
    set_value(checkpoint, "weight_global_scale", math.nan)
    old = shards(checkpoint)[0].name
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    (checkpoint / old).rename(checkpoint / "a,b%c.safetensors")
    document["weight_map"] = {t: "a,b%c.safetensors" if f == old else f for t, f in document["weight_map"].items()}
    index.write_text(json.dumps(document))
    printed = check_in(checkpoint.parent, "ckpt", *options).stdout
    assert printed == json.dumps(json.loads(printed), indent=2) + "\n"
    assert "\\u00e9\\u202e\\u001b" in printed and "NaN" in printed


def test_a_reader_that_goes_away_mid_report_does_not_change_check_s_exit_code(checkpoint):
    """A report is written as it is made, so its reader can go away (`| head`) in the middle of it."""
    command = [sys.executable, "-m", "scalar_scales", "check", str(checkpoint), "--output-format", "sarif"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=300)
    assert (process.returncode, stderr) == (0, "")


# SARIF (its schema: tests/publishing/test_output_schemas.py)


def sarif(folder: Path, *args: str | Path) -> dict:
    result = check_in(folder, *args, "--output-format", "sarif")
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_sarif_has_one_result_per_rule_and_file_with_a_location_per_finding(broken):
    checkpoint, name = broken
    (run,) = sarif(checkpoint.parent, "ckpt")["runs"]
    assert [(r["ruleId"], r["properties"]["findings"], len(r["locations"])) for r in run["results"]] == [
        ("NV301", 1, 1),
        ("NV101", 16, 16),
        ("NV101", 16, 16),
        ("NV101", 16, 16),
    ]
    nan = run["results"][0]
    assert nan["level"] == "error"
    assert run["tool"]["driver"]["rules"][nan["ruleIndex"]]["id"] == "NV301"
    (location,) = nan["locations"]
    assert location["physicalLocation"] == {
        "artifactLocation": {"uri": "ckpt/model-00001-of-00003.safetensors", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 1},
    }
    assert location["logicalLocations"][0]["fullyQualifiedName"] == name
    assert location["message"]["text"] == f"{name}: is NaN"
    assert nan["message"]["text"].startswith(f"{name}: is NaN: vLLM computes with 1/scale")


def test_a_sarif_result_of_several_findings_counts_them_and_names_the_first(checkpoint):
    result = sarif(checkpoint.parent, "ckpt")["runs"][0]["results"][0]
    lines = result["message"]["text"].splitlines()
    assert lines[0] == "16 findings in this file: a global scale of shape (1,)"
    assert lines[1] == "model.layers.0.mlp.experts.0.gate_proj.input_global_scale: shape (1,)"
    assert lines[6] == "... and 11 more (each is a location of this result)"
    assert lines[7].startswith("vLLM 0.23, 0.32 and 0.33 load it") and len(lines) == 8


def test_sarif_counts_every_finding_in_its_run(broken):
    checkpoint, _ = broken
    properties = sarif(checkpoint.parent, "ckpt")["runs"][0]["properties"]
    assert (properties["findings"], properties["counts"]) == (49, {"NV301": 1, "NV101": 48})


def test_a_sarif_result_locates_its_first_findings_and_counts_them_all(checkpoint, monkeypatch):
    """GitHub takes at most 1,000 locations in a result; the limit is made 4 here."""
    monkeypatch.setattr(sarif_format, "MAX_LOCATIONS", 4)
    result = sarif(checkpoint.parent, "ckpt")["runs"][0]["results"][0]
    assert (len(result["locations"]), result["properties"]["findings"]) == (4, 16)
    assert (
        "... and 11 more (the first 4 are locations of this result; --output-format json lists every one)"
        in (result["message"]["text"])
    )


def test_sarif_gives_the_pairs_of_rule_and_file_past_its_result_limit_one_result_per_rule(broken, monkeypatch):
    """GitHub takes at most 25,000 results in a run; the limit is made 3 here, so the error's result is kept and
    NV101's three files are one result, which counts their findings and names each file."""
    checkpoint, _ = broken
    monkeypatch.setattr(sarif_format, "MAX_RESULTS", 3)
    nan, rest = sarif(checkpoint.parent, "ckpt")["runs"][0]["results"]
    assert (nan["ruleId"], rest["ruleId"], rest["level"]) == ("NV301", "NV101", "warning")
    assert rest["properties"] == {"findings": 48, "files": 3}
    assert rest["message"]["text"].startswith("48 more findings of NV101 in 3 more files: a global scale of shape")
    assert [location["physicalLocation"]["artifactLocation"]["uri"] for location in rest["locations"]] == [
        f"ckpt/{shard.name}" for shard in shards(checkpoint)
    ]


def test_sarif_lists_every_rule_applied_with_its_explanation(checkpoint):
    driver = sarif(checkpoint.parent, "ckpt")["runs"][0]["tool"]["driver"]
    assert [rule["id"] for rule in driver["rules"]] == [
        code for code, rule in RULES.items() if rule.is_about(COMPRESSED_TENSORS_LAYOUT)
    ]
    nv101 = driver["rules"][0]
    assert nv101["help"] == {"text": RULES["NV101"].explanation, "markdown": RULES["NV101"].explanation}
    assert nv101["defaultConfiguration"] == {"level": "warning"}


def test_sarif_fingerprints_stay_across_runs_and_differ_between_results(checkpoint):
    def fingerprints() -> list[str]:
        results = sarif(checkpoint.parent, "ckpt")["runs"][0]["results"]
        return [r["partialFingerprints"]["primaryLocationLineHash"] for r in results]

    first = fingerprints()
    assert first == fingerprints() and len(set(first)) == 3


@pytest.mark.parametrize("case", V4_FLASH_COUNTS)
def test_sarif_of_a_v4_flash_shaped_checkpoint_is_within_github_s_limits_and_counts_every_finding(
    v4_flash_shaped, case
):
    """GitHub code scanning takes at most 25,000 results in a run, 1,000 locations in a result, and 10 MB of
    gzipped SARIF; one result per finding was 66,048 (or 132,096) results, which it refuses."""
    checkpoint, counts = v4_flash_shaped[case], V4_FLASH_COUNTS[case]
    printed = run_cli_in_process("check", checkpoint, "--output-format", "sarif")
    assert printed.returncode == (1 if "NV302" in counts else 0), printed.stderr
    (run,) = json.loads(printed.stdout)["runs"]
    assert len(run["results"]) == 46 * len(counts) <= 25_000  # a result per rule and shard
    assert max(len(result["locations"]) for result in run["results"]) <= 1_000
    assert len(gzip.compress(printed.stdout.encode())) < 10_000_000
    assert (run["properties"]["findings"], run["properties"]["counts"]) == (sum(counts.values()), counts)
    found: dict[str, int] = {}
    for result in run["results"]:
        found[result["ruleId"]] = found.get(result["ruleId"], 0) + result["properties"]["findings"]
    assert found == counts


@pytest.mark.parametrize("given", ["absolute", "../ckpt"])
def test_sarif_names_a_file_outside_the_source_root_by_a_file_uri(checkpoint, tmp_path, given):
    """Whether it is given as an absolute path or as one that climbs out of the current folder with `..`."""
    (tmp_path / "elsewhere").mkdir()
    path = checkpoint if given == "absolute" else given
    result = sarif(tmp_path / "elsewhere", path)["runs"][0]["results"][0]
    artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": (checkpoint / "model-00001-of-00003.safetensors").as_uri()}


@pytest.fixture
def clean_in_tmp(tmp_path: Path) -> Path:
    return clean_checkpoint(tmp_path / "clean")


# The commit checked, for a Hub repository


def test_a_hub_check_names_the_commit_it_read_in_each_format(tmp_path):
    """Every format of the formats' table, a new one too: a Hub repository's files change from commit to commit,
    so a report that does not say which it read cannot be reproduced. GitHub's gives it in a notice, which the
    run's page shows, where the log's summary line is seen only in the log."""
    pytest.importorskip("huggingface_hub")
    from scalar_scales_testkit.hub_server import HubRepository, client_environment, commit_of, serve_hub

    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    commit = commit_of(checkpoint)
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        env = client_environment(endpoint, tmp_path)
        printed = {
            name: run_cli("check", "hf://org/model@main", "--output-format", name, env=env).stdout for name in FORMATS
        }
    assert [name for name, output in printed.items() if commit not in output] == []
    assert printed["text"].startswith(f"hf://org/model@main (commit {commit}): 3 shards, ")
    assert json.loads(printed["json"])["summary"]["commit"] == commit
    (run,) = json.loads(printed["sarif"])["runs"]
    assert run["versionControlProvenance"] == [
        {"repositoryUri": f"{endpoint}/org/model", "revisionId": commit, "mappedTo": {"uriBaseId": "HFREPO"}}
    ]
    *_, notice, summary = printed["github"].splitlines()
    assert notice == f"::notice title=hf%3A//org/model@main at commit {commit}::{summary.replace('%', '%25')}"


def test_a_hub_finding_is_located_in_the_repository_at_the_commit(tmp_path):
    """On the endpoint it was read from: HF_ENDPOINT, here the test kit's stand-in Hub."""
    pytest.importorskip("huggingface_hub")
    from scalar_scales_testkit.hub_server import HubRepository, client_environment, commit_of, serve_hub

    checkpoint = make_checkpoint(tmp_path / "ckpt")
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        env = client_environment(endpoint, tmp_path)
        sarif_log = json.loads(run_cli("check", "hf://org/model", "--output-format", "sarif", env=env).stdout)
        github = run_cli("check", "hf://org/model", "--output-format", "github", env=env).stdout.splitlines()
    (run,) = sarif_log["runs"]
    artifact = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "model-00001-of-00003.safetensors", "uriBaseId": "HFREPO"}
    assert run["originalUriBaseIds"] == {"HFREPO": {"uri": f"{endpoint}/org/model/resolve/{commit_of(checkpoint)}/"}}
    assert github[0].startswith(
        "::warning title=NV101 legacy-scale-shape::hf://org/model/model-00001-of-00003.safetensors: 16 findings"
    )


# The docs list the formats of the table

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_docs_list_the_formats_of_the_formats_table():
    """docs/check.md's table of the formats is what scripts/rule_docs.py makes of the formats' table, and its usage
    and README.md name its formats; no doc names a format the table lacks. A format added or renamed without the
    docs fails here."""
    check = (DOCS / "check.md").read_text()
    readme = (DOCS.parent / "README.md").read_text()
    table = re.search(
        r"the formats' table\. Do not edit\. -->\n(.*?)<!-- End of the output formats", check, flags=re.DOTALL
    )
    assert table is not None and table[1] == formats_table(), "stale: run `python scripts/rule_docs.py`"
    headings = set(re.findall(r"^#+ (.+)$", check, flags=re.MULTILINE))
    assert [row.section for row in FORMATS_TABLE.values() if row.section not in headings] == []
    assert re.findall(r"\[--output-format ([a-z|]+)\]", check) == ["|".join(FORMATS)]
    assert re.findall(r"`--output-format ([a-z]+\|[a-z|]+)`", readme) == ["|".join(FORMATS[1:])]
    named = {
        name
        for text in (check, readme, (DOCS / "ci.md").read_text())
        for names in re.findall(r"--output-format[ =]([a-z|]+)", text)
        for name in names.split("|")
    }
    assert named - set(FORMATS) == set()


def test_sarif_of_findings_with_long_random_names_stays_within_github_s_gzipped_limit(tmp_path):
    """Hostile names: 1,000 legacy scales, each named by 20,000 random characters, which gzip cannot shorten. As
    1,000 locations the SARIF log is more than GitHub's 10 MB gzipped; so the locations stop at a byte budget, and
    the result still counts every finding and says where they all are."""
    alphabet = string.ascii_letters + string.digits
    chosen = random.Random(0)
    names = [
        f"model.layers.{i}.{''.join(chosen.choices(alphabet, k=20_000))}.weight_global_scale" for i in range(1_000)
    ]
    header = {name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i, name in enumerate(names)}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    shard = tmp_path / "hostile.safetensors"
    shard.write_bytes(struct.pack("<Q", len(encoded)) + encoded + struct.pack("<f", 1.0) * len(names))
    printed = run_cli_in_process("check", shard, "--output-format", "sarif", cwd=tmp_path)
    assert len(gzip.compress(printed.stdout.encode(), compresslevel=6)) < 10_000_000
    (run,) = json.loads(printed.stdout)["runs"]
    (result,) = (result for result in run["results"] if result["ruleId"] == "NV101")
    assert result["properties"]["findings"] == 1_000
    assert 1 < len(result["locations"]) < 1_000
    assert f"the first {len(result['locations'])} are locations of this result" in result["message"]["text"]
