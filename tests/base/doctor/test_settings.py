"""`check`'s configuration file (docs/check.md, Configuration): found as ruff finds its own, layered under the
command line as ruff layers its own, every key checked, and what was resolved shown by --show-settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scalar_scales.cli import main
from scalar_scales.doctor.settings import KEYS
from scalar_scales_testkit.cli import run_cli_in_process

NV101_ONLY = "Found 48 findings: 48 warnings (NV101 48)."


def summary_line(result) -> str:
    return result.stdout.splitlines()[-1]


def write(path, text: str):
    path.write_text(text)
    return path


def test_a_scalar_scales_toml_in_a_folder_above_the_checkpoint_sets_the_check(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", 'select = ["NV3"]\n')
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 0
    assert summary_line(result).startswith("All checks passed: no finding from 5 rules")


def test_a_pyproject_s_tool_table_sets_the_check(checkpoint):
    write(checkpoint.parent / "pyproject.toml", '[project]\nname = "models"\n\n[tool.scalar-scales]\nstrict = true\n')
    assert run_cli_in_process("check", checkpoint).returncode == 1


def test_a_pyproject_without_the_table_is_passed_over_for_a_file_further_up(checkpoint):
    write(checkpoint / "pyproject.toml", "[tool.ruff]\nline-length = 100\n")
    write(checkpoint.parent / "scalar-scales.toml", "strict = true\n")
    assert run_cli_in_process("check", checkpoint).returncode == 1


def test_scalar_scales_toml_wins_over_a_pyproject_in_the_same_folder(checkpoint):
    write(checkpoint.parent / "pyproject.toml", "[tool.scalar-scales]\nstrict = true\n")
    write(checkpoint.parent / "scalar-scales.toml", "strict = false\n")
    assert run_cli_in_process("check", checkpoint).returncode == 0


def test_a_file_s_search_starts_at_the_file_s_folder(checkpoint, tmp_path):
    """A lone ``.safetensors`` file (no checkpoint's shard, which is checked with its folder) finds the file beside
    it."""
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.safetensors").write_bytes((checkpoint / "model-00001-of-00003.safetensors").read_bytes())
    write(lone / "scalar-scales.toml", "strict = true\n")
    assert run_cli_in_process("check", lone / "model.safetensors").returncode == 1


def test_the_command_line_s_select_replaces_the_file_s_selection(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", 'select = ["NV3"]\nignore = ["NV1"]\n')
    assert summary_line(run_cli_in_process("check", checkpoint, "--select", "NV1")) == NV101_ONLY


def test_extend_select_adds_to_the_file_s_selection(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", 'select = ["NV3"]\n')
    result = run_cli_in_process("check", checkpoint, "--extend-select", "NV101", "--output-format", "json")
    applied = json.loads(result.stdout)["summary"]["rules_applied"]
    assert applied == ["NV101", "NV301", "NV302", "NV303", "NV304", "NV305"]


def test_the_command_line_s_ignore_takes_from_the_file_s_selection(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", 'select = ["NV1"]\n')
    result = run_cli_in_process("check", checkpoint, "--ignore", "NV101")
    assert (result.returncode, summary_line(result).startswith("All checks passed")) == (0, True)


def test_the_command_line_s_output_format_wins_over_the_file_s(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", 'output-format = "json"\n')
    assert json.loads(run_cli_in_process("check", checkpoint).stdout)["summary"]["counts"] == {"NV101": 48}
    assert summary_line(run_cli_in_process("check", checkpoint, "--output-format", "text")) == NV101_ONLY


def test_config_names_the_file_read_instead_of_the_nearest(checkpoint, tmp_path):
    write(checkpoint.parent / "scalar-scales.toml", "strict = false\n")
    named = write(tmp_path / "elsewhere.toml", "strict = true\n")
    assert run_cli_in_process("check", checkpoint, "--config", named).returncode == 1


def test_config_reads_a_named_pyproject_s_tool_table(checkpoint, tmp_path):
    named = write(tmp_path / "pyproject.toml", "[tool.scalar-scales]\nstrict = true\n")
    assert run_cli_in_process("check", checkpoint, "--config", named).returncode == 1


def test_isolated_reads_no_configuration_file(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", "strict = true\n")
    assert run_cli_in_process("check", checkpoint, "--isolated").returncode == 0


def test_isolated_with_config_is_refused(checkpoint, tmp_path):
    result = run_cli_in_process("check", checkpoint, "--isolated", "--config", tmp_path / "x.toml")
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert "--isolated reads no configuration file; it cannot be given with --config" in result.stderr


def test_a_missing_config_file_is_one_line_naming_it(checkpoint, tmp_path):
    result = run_cli_in_process("check", checkpoint, "--config", tmp_path / "absent.toml")
    assert (result.returncode, result.stdout) == (2, "")
    assert (
        result.stderr
        == f"scalar-scales: error: {tmp_path / 'absent.toml'}: cannot read it: No such file or directory\n"
    )


def test_per_module_ignores_drops_the_findings_of_matching_modules_and_the_summary_counts_them(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", '[per-module-ignores]\n"model.layers.0.*" = ["NV1"]\n')
    result = run_cli_in_process("check", checkpoint)
    assert summary_line(result) == (
        "Found 24 findings: 24 warnings (NV101 24). 24 findings ignored by per-module-ignores."
    )
    assert "model.layers.0." not in result.stdout


def test_per_module_ignores_leaves_the_findings_of_other_codes(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", '[per-module-ignores]\n"model.layers.0.*" = ["NV3"]\n')
    assert summary_line(run_cli_in_process("check", checkpoint)) == NV101_ONLY


def test_a_re_pattern_of_per_module_ignores_matches_a_module_as_re_match_does(checkpoint):
    """``re:`` as compressed-tensors' targets: matched from the name's start, to the module's name or the tensor's."""
    toml = '[per-module-ignores]\n"re:model\\\\.layers\\\\.1\\\\.mlp\\\\.experts\\\\.[01]\\\\." = ["NV101"]\n'
    write(checkpoint.parent / "scalar-scales.toml", toml)
    assert summary_line(run_cli_in_process("check", checkpoint)) == (
        "Found 36 findings: 36 warnings (NV101 36). 12 findings ignored by per-module-ignores."
    )


def test_the_json_summary_counts_the_findings_per_module_ignores_dropped(checkpoint):
    write(checkpoint.parent / "scalar-scales.toml", '[per-module-ignores]\n"*" = ["NV101"]\n')
    summary = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["summary"]
    assert (summary["ignored_by_config"], summary["counts"]) == (48, {})


def test_show_settings_prints_each_setting_and_where_it_came_from(checkpoint):
    config = write(
        checkpoint.parent / "scalar-scales.toml", 'select = ["NV1"]\n[per-module-ignores]\n"*" = ["NV101"]\n'
    )
    result = run_cli_in_process("check", checkpoint, "--show-settings", "--strict")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"Settings for {checkpoint}:",
        f"config file: {config}",
        f"select: NV101, NV102, NV103 ({config})",
        f"per-module-ignores: * = NV101 ({config})",
        "strict: true (command line)",
        "output-format: text (default)",
    ]


def test_show_settings_without_a_file_shows_the_defaults(checkpoint):
    assert run_cli_in_process("check", checkpoint, "--show-settings", "--isolated").stdout.splitlines()[1:] == [
        "config file: none",
        "select: ALL (default)",
        "per-module-ignores: none (default)",
        "strict: false (default)",
        "output-format: text (default)",
    ]


def test_a_hub_check_finds_its_configuration_from_the_current_folder(tmp_path, monkeypatch, capsys):
    """Run through ``main`` itself: --show-settings reads no Hub repository, so no huggingface_hub is imported."""
    config = write(tmp_path / "scalar-scales.toml", "strict = true\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "hf://org/name", "--show-settings"]) == 0
    assert f"strict: true ({config})" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    ("text", "named", "problem"),
    [
        ("selct = []\n", "selct", "unknown key; did you mean select?"),
        ("strict = 1\n", "strict", "must be true or false, not 1"),
        ('select = "NV1"\n', "select", "must be a list of rule codes"),
        ('ignore = ["NV9"]\n', "ignore", "unknown rule code 'NV9'"),
        ('output-format = "xml"\n', "output-format", "must be one of text, json, github, sarif, not 'xml'"),
        ('per-module-ignores = ["x"]\n', "per-module-ignores", "must be a table of patterns"),
        ('[per-module-ignores]\n"x" = ["NV0"]\n', 'per-module-ignores."x"', "unknown rule code 'NV0'"),
        ('[per-module-ignores]\n"re:(?=x)" = ["NV1"]\n', 'per-module-ignores."re:(?=x)"', "not a pattern"),
        ('select = ["NV1"]\nignore = ["NV1"]\n', "select and ignore", "together they leave no rule to apply"),
        ("strict = \n", "", "not valid TOML: "),
    ],
)
def test_a_wrong_configuration_file_is_one_line_naming_the_file_and_the_key(checkpoint, text, named, problem):
    config = write(checkpoint.parent / "scalar-scales.toml", text)
    result = run_cli_in_process("check", checkpoint)
    assert (result.returncode, result.stdout, result.stderr.count("\n")) == (2, "", 1)
    assert result.stderr.startswith(f"scalar-scales: error: {config}: {named + ': ' if named else ''}")
    assert problem in result.stderr


def test_a_wrong_key_of_a_pyproject_is_named_under_its_table(checkpoint):
    config = write(checkpoint.parent / "pyproject.toml", "[tool.scalar-scales]\nstrict = 'yes'\n")
    result = run_cli_in_process("check", checkpoint)
    assert result.stderr == (
        f"scalar-scales: error: {config}: tool.scalar-scales.strict: must be true or false, not 'yes'\n"
    )


def test_every_key_is_documented():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "check.md").read_text()
    assert [key for key in KEYS if f"`{key}`" not in docs] == []


def test_docs_example_file_is_read_as_it_says(checkpoint):
    docs = (Path(__file__).resolve().parents[3] / "docs" / "check.md").read_text()
    example = docs.split("```toml\n", 1)[1].split("```", 1)[0]
    config = write(checkpoint.parent / "pyproject.toml", example)
    result = run_cli_in_process("check", checkpoint, "--show-settings")
    assert result.stdout.splitlines()[1:] == [
        f"config file: {config}",
        f"select: NV101, NV102, NV301, NV302, NV303, NV304, NV305 ({config})",
        f"per-module-ignores: model.visual.* = NV101; re:model\\.layers\\.[0-3]\\.mlp\\.gate = NV601, NV602, "
        f"NV603, NV604, NV605, NV606, NV607, NV608, NV609, NV610, NV611, NV612, NV613 ({config})",
        f"strict: true ({config})",
        f"output-format: github ({config})",
    ]


def test_a_check_without_a_configuration_file_never_imports_tomllib(checkpoint):
    """tomllib is imported only where a file is read: a check without one never pays for it."""
    code = (
        "import sys; from scalar_scales.cli import main; "
        f"code = main(['check', {str(checkpoint)!r}, '--silent']); print(code, 'tomllib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout == "0 False\n", result.stderr


@pytest.mark.parametrize("key", ["select", "ignore"])
def test_an_empty_list_of_codes_is_refused_since_it_would_select_every_rule_or_ignore_none(checkpoint, key):
    write(checkpoint.parent / "scalar-scales.toml", f"{key} = []\n")
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 2
    assert f"{key}: names no rule" in result.stderr
