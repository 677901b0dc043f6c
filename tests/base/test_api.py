"""The library, as a pipeline calls it: ``scalar_scales.check`` and ``scalar_scales.migrate`` give what the command
gives, print nothing, and raise where the command refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import scalar_scales
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process, snapshot


@pytest.fixture
def checkpoint(tmp_path):
    return make_checkpoint(tmp_path / "ckpt")


def test_check_returns_the_commands_findings_and_exit_code(checkpoint, capsys):
    report = scalar_scales.check(checkpoint)
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    found = [(f.rule.code, f.tensor) for f in report.findings]
    assert found == [(f["code"], f["tensor"]) for f in document["findings"]]
    assert report.exit_code == 0
    assert capsys.readouterr() == ("", "")


def test_check_strict_fails_on_the_warnings_the_command_fails_on(checkpoint):
    assert scalar_scales.check(checkpoint, strict=True).exit_code == 1


def test_check_takes_one_code_as_a_string_not_its_characters(checkpoint):
    report = scalar_scales.check(checkpoint, select="NV1", ignore=["NV101"])
    assert {rule.code for rule in report.diagnosis.rules} == {"NV102", "NV103"}
    assert report.findings == []


def test_check_of_an_unknown_rule_raises_value_error_naming_it(checkpoint):
    with pytest.raises(ValueError, match="unknown rule code 'NV999'"):
        scalar_scales.check(checkpoint, select="NV999")


def test_a_selection_that_leaves_no_rule_is_named_as_the_library_was_called(checkpoint):
    with pytest.raises(ValueError, match=r"^ignore=NV leaves no rule to apply"):
        scalar_scales.check(checkpoint, ignore="NV")


def test_check_of_a_missing_checkpoint_raises_the_commands_one_line(tmp_path):
    with pytest.raises(scalar_scales.CheckpointError, match="no such file or folder"):
        scalar_scales.check(tmp_path / "absent")


def test_check_of_an_author_says_the_library_checks_one_checkpoint():
    with pytest.raises(scalar_scales.CheckpointError, match="check takes one checkpoint"):
        scalar_scales.check("hf://nvidia")


def test_migrate_dry_run_says_what_would_change_and_changes_nothing(checkpoint):
    before = snapshot(checkpoint)
    report = scalar_scales.migrate(checkpoint, dry_run=True)
    assert (report.dry_run, report.changed, report.scales_changed) == (True, True, report.scales_total)
    assert snapshot(checkpoint) == before


def test_migrate_makes_the_checkpoint_check_clean(checkpoint):
    report = scalar_scales.migrate(checkpoint)
    assert isinstance(report, scalar_scales.MigrationReport)
    assert (report.changed, report.format_version_after) == (True, 2)
    assert scalar_scales.check(checkpoint, strict=True).findings == []


def test_migrate_refusal_raises_and_changes_nothing(checkpoint):
    (checkpoint / "model.safetensors.index.json").write_text("{")
    before = snapshot(checkpoint)
    with pytest.raises(scalar_scales.CheckpointError, match="not valid JSON"):
        scalar_scales.migrate(checkpoint)
    assert snapshot(checkpoint) == before


def test_importing_the_package_imports_none_of_the_library_until_a_name_is_used():
    code = (
        "import sys, scalar_scales; before = {m for m in sys.modules if m.startswith('scalar_scales.')}; "
        "scalar_scales.check; print(sorted(before), 'scalar_scales.api' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[] True"


def test_the_package_names_its_library_in_all():
    assert {"check", "migrate", "CheckReport", "MigrationReport", "CheckpointError"} <= set(scalar_scales.__all__)
    assert all(getattr(scalar_scales, name) is not None for name in scalar_scales.__all__)


def test_the_readmes_example_runs_as_written(checkpoint):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("### From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(example.replace('"out/model"', repr(str(checkpoint))), {})
    assert scalar_scales.check(checkpoint, strict=True).findings == []
