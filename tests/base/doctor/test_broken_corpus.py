"""Each checkpoint of the broken corpus is reported by its own rule, naming the tensor, and check changes nothing."""

from __future__ import annotations

import json

import pytest

from scalar_scales.doctor import RULES
from scalar_scales_testkit.broken import CORPUS, clean_checkpoint
from scalar_scales_testkit.cli import run_cli, snapshot


def test_the_corpus_covers_every_rule_once():
    assert sorted(case.code for case in CORPUS.values()) == sorted(RULES)


@pytest.mark.parametrize("name", CORPUS)
def test_a_broken_checkpoint_is_reported_by_its_rule_and_only_that_rule(tmp_path, name):
    case = CORPUS[name]
    checkpoint = clean_checkpoint(tmp_path / name)
    tensor = case.make(checkpoint)
    before = snapshot(checkpoint)
    result = run_cli("check", checkpoint, "--json")
    findings = json.loads(result.stdout)["findings"]
    assert {finding["code"] for finding in findings} == {case.code}
    assert tensor in {finding["tensor"] for finding in findings}
    assert result.returncode == (1 if RULES[case.code].severity == "error" else 0)
    assert run_cli("check", checkpoint, "--strict").returncode == 1
    assert snapshot(checkpoint) == before


@pytest.mark.parametrize("name", CORPUS)
def test_the_text_report_names_the_rule_and_the_tensor(tmp_path, name):
    case = CORPUS[name]
    checkpoint = clean_checkpoint(tmp_path / name)
    tensor = case.make(checkpoint)
    lines = run_cli("check", checkpoint, "--show-all").stdout.splitlines()
    rule = RULES[case.code]
    assert any(line.startswith(f"{case.code} {rule.name} ({rule.severity}): ") for line in lines)
    named = f": {tensor}: " if tensor else "config.json: "
    assert any(line.startswith(f"  {case.code} ") and named in line for line in lines)
