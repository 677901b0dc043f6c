from __future__ import annotations

import json

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales_testkit.broken import CORPUS, MODELOPT_CORPUS, clean_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process, snapshot
from scalar_scales_testkit.modelopt_exports import copy_of_export
from scalar_scales_testkit.refusals import refused

CASES = [
    pytest.param(clean_checkpoint, COMPRESSED_TENSORS_LAYOUT, case, id=f"compressed-tensors-{name}")
    for name, case in CORPUS.items()
] + [
    pytest.param(copy_of_export, MODELOPT_LAYOUT, case, id=f"modelopt-{name}") for name, case in MODELOPT_CORPUS.items()
]
"""Each break made on a synthetic compressed-tensors checkpoint, and on a real ModelOpt export (the toy Qwen3-MoE
exported by nvidia-modelopt: scripts/make_modelopt_artifacts.py)."""


@pytest.mark.parametrize(
    ("corpus", "layout"),
    [(CORPUS, COMPRESSED_TENSORS_LAYOUT), (MODELOPT_CORPUS, MODELOPT_LAYOUT)],
    ids=["compressed-tensors", "modelopt"],
)
def test_the_corpus_has_an_example_of_every_rule_about_its_layout(corpus, layout):
    """The corpus is made from the rules' examples: a rule with none would be a rule no test holds to finding
    anything, and a rule not about the layout (compressed-tensors' marker on ModelOpt) has no case there."""
    assert sorted({case.code for case in corpus.values()}) == [
        code for code, rule in RULES.items() if rule.is_about(layout)
    ]


def test_no_two_examples_share_a_name():
    """The corpus, the evidence's rows and the test ids name a case by its example's name."""
    names = [example.name for rule in RULES.values() for example in rule.examples]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("clean", "layout", "case"), CASES)
def test_a_broken_checkpoint_is_reported_by_its_rule_and_only_that_rule(tmp_path, clean, layout, case):
    checkpoint = clean(tmp_path / "checkpoint")
    assert json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["findings"] == []
    tensor = case.make(checkpoint, layout)
    before = snapshot(checkpoint)
    result = run_cli_in_process("check", checkpoint, "--json")
    findings = json.loads(result.stdout)["findings"]
    assert {finding["code"] for finding in findings} == {case.code, *case.alongside}
    assert tensor in {finding["tensor"] for finding in findings}
    assert result.returncode == (1 if "error" in {RULES[code].severity for code in (case.code, *case.alongside)} else 0)
    assert run_cli_in_process("check", checkpoint, "--strict").returncode == (
        0 if RULES[case.code].severity == "info" and not refused(checkpoint) else 1
    )
    assert snapshot(checkpoint) == before


@pytest.mark.parametrize(("clean", "layout", "case"), CASES)
def test_the_text_report_names_the_rule_and_the_tensor(tmp_path, clean, layout, case):
    checkpoint = clean(tmp_path / "checkpoint")
    tensor = case.make(checkpoint, layout)
    lines = run_cli_in_process("check", checkpoint, "--show-all").stdout.splitlines()
    rule = RULES[case.code]
    assert any(line.startswith(f"{case.code} {rule.name} ({rule.severity}): ") for line in lines)
    named = f": {tensor}  " if tensor else ".json  "
    assert any(line.startswith("    ") and named in line for line in lines), lines


@pytest.mark.parametrize(("clean", "layout", "case"), CASES)
def test_a_rule_selected_alone_reports_what_it_reports_among_every_rule(tmp_path, clean, layout, case):
    """A rule --select leaves out is not computed: what the others find, and what the summary counts, stay."""
    checkpoint = clean(tmp_path / "checkpoint")
    case.make(checkpoint, layout)
    every = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    for code in {case.code, *case.alongside}:
        alone = json.loads(run_cli_in_process("check", checkpoint, "--json", "--select", code).stdout)
        assert alone["findings"] == [finding for finding in every["findings"] if finding["code"] == code]
        assert alone["summary"]["modules"] == every["summary"]["modules"]
        assert alone["summary"]["scales"] == every["summary"]["scales"]
