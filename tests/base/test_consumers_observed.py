"""The consumers run here (vLLM's engine and MoE weight loader, transformers' ``from_pretrained``, SGLang's
``get_model``): what ``scalar-scales rule CODE`` says each did with a rule's defect is the package's data
(scalar_scales/consumers/observed_rules.py), which scripts/check_evidence.py generates with docs/check-evidence.md
from the test command's run, and fails where the run saw otherwise."""

from __future__ import annotations

import json

import pytest

from scalar_scales.consumers import OBSERVED_RULES, observed_consequences, observed_lines
from scalar_scales.doctor import RULES
from scalar_scales_testkit.cli import run_cli_in_process


def test_each_observed_consequence_names_a_rule_of_check() -> None:
    assert {found.rule for found in OBSERVED_RULES} <= {rule.name for rule in RULES.values()}


@pytest.mark.parametrize("code", RULES)
def test_every_rule_has_an_observed_consequence_in_each_consumer_run_here(code: str) -> None:
    consumers = {found.consumer for found in OBSERVED_RULES}
    assert {found.consumer for found in observed_consequences(RULES[code].name)} == consumers, (
        "stale: run scripts/check_evidence.py doc on a full run's results"
    )


def test_rule_prints_what_each_consumer_run_here_did_with_its_defect() -> None:
    found = observed_consequences(RULES["NV303"].name)
    assert found
    lines = run_cli_in_process("rule", "NV303").stdout.splitlines()
    for line in observed_lines(RULES["NV303"].name)[2:]:
        assert line in lines
    for seen in found:
        assert any(
            line.startswith(f"- {seen.consumer}: ") and f"{seen.checkpoints}: {seen.consequence}" in line
            for line in lines
        )


def test_rule_prints_the_consumers_run_here_before_those_not_run() -> None:
    text = run_cli_in_process("rule", "NV303").stdout
    assert text.index("Observed in the consumers run here") < text.index("round trip does not run")


def test_rule_as_json_gives_each_consumer_run_here_s_consequence() -> None:
    data = json.loads(run_cli_in_process("rule", "NV303", "--output-format", "json").stdout)
    assert data["consumers_observed"] == [
        {"consumer": seen.consumer, "checkpoints": seen.checkpoints, "consequence": seen.consequence}
        for seen in observed_consequences(RULES["NV303"].name)
    ]
