"""Every rule's effect is the one docs/check-evidence.md records (scripts/check_evidence.py generates it from the
test command's run of vLLM on broken artifacts), and its severity follows from that effect."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalar_scales.doctor import EFFECTS, RULES
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, COMPRESSED_TENSORS_LAYOUT, LAYOUTS, MODELOPT, MODELOPT_LAYOUT

DOCS = Path(__file__).parents[3] / "docs"
HARMFUL = ("load-error", "nan-output", "wrong-output")


def recorded_effects(producer: str = COMPRESSED_TENSORS) -> dict[str, str]:
    """The evidence's table of rules: code -> the most harmful effect the engine showed for its breaks in
    ``producer``'s layout, ``n/a`` where the rule is not about it (the table's severity column is the catalogue's
    own, so it is not read)."""
    text = (DOCS / "check-evidence.md").read_text()
    section = text.split("## Each rule's effect", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| NV")]
    column = 2 + list(LAYOUTS).index(producer)
    return {cells[0].strip(): cells[column].split(" (")[0].strip() for cells in rows}


@pytest.mark.parametrize("code", RULES)
def test_a_rules_effect_is_the_one_the_engine_showed(code):
    rule = RULES[code]
    assert recorded_effects()[code] == (rule.effect if rule.is_about(COMPRESSED_TENSORS_LAYOUT) else "n/a")


@pytest.mark.parametrize("code", RULES)
def test_a_rules_effect_on_modelopt_checkpoints_is_the_one_the_engine_showed_on_nvidias_export(code):
    rule = RULES[code]
    expected = rule.effect_for(MODELOPT_LAYOUT) if rule.is_about(MODELOPT_LAYOUT) else "n/a"
    assert recorded_effects(MODELOPT)[code] == expected


def test_the_evidence_records_no_rule_that_does_not_exist():
    assert set(recorded_effects()) == set(RULES)


@pytest.mark.parametrize("code", RULES)
def test_a_rule_is_an_error_exactly_when_vllm_fails_or_gives_nan_or_other_tokens(code):
    rule = RULES[code]
    assert (rule.severity == "error") == (rule.effect in HARMFUL)
    assert rule.effect != "accuracy" or rule.severity == "warning"


@pytest.mark.parametrize("code", RULES)
def test_on_modelopt_checkpoints_a_rule_is_as_harmful_as_on_compressed_tensors(code):
    """One severity a rule: where ModelOpt's breaks showed another effect, it is as harmful."""
    rule = RULES[code]
    assert (rule.effect_for(MODELOPT_LAYOUT) in HARMFUL) == (rule.effect in HARMFUL)


def test_every_effect_is_defined_in_the_docs():
    docs = (DOCS / "check.md").read_text()
    for effect, definition in EFFECTS.items():
        assert f"- `{effect}`: {definition}." in docs
