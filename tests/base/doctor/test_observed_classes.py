"""Which model class's observations hold for a checkpoint (``scalar_scales.consumers.of_checkpoint``), for a class
the round trip knows only through one of SGLang's other loaders that fuse (Kimi-K3's), and for a draft's class:
``check`` names the engine where its class was seen to refuse the checkpoint's shape, and ``migrate`` what the change
does for it. The observations are a synthetic set, not the generated data (which the full run regenerates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalar_scales.consumers import NO_FIX, Observation, Outcome
from scalar_scales_testkit.broken import mla_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process

KIMI = "KimiK3LinearForCausalLM"
DEEPSEEK = "DeepseekV3ForCausalLM"
NEXTN = "DeepseekV3ForCausalLMNextN"
PLUGIN = "sglang_patch plugin"
A_PROJECTIONS = ("q_a_proj", "kv_a_proj_with_mqa")
INDEX_ERROR = "IndexError: tuple index out of range"
CAT_ERROR = "RuntimeError: zero-dimensional tensor (at position 0) cannot be concatenated"


def sglang(architecture: str, fix: str, legacy: Outcome, scalar: Outcome) -> Observation:
    return Observation("sglang", f"SGLang 0.5.23 {architecture}", fix, legacy, scalar, architecture, A_PROJECTIONS)


OBSERVED = (
    sglang(KIMI, NO_FIX, Outcome(True), Outcome(False, INDEX_ERROR)),
    sglang(KIMI, PLUGIN, Outcome(True), Outcome(True)),
    sglang(DEEPSEEK, NO_FIX, Outcome(True), Outcome(True)),
    sglang(NEXTN, NO_FIX, Outcome(False, CAT_ERROR), Outcome(False, CAT_ERROR)),
)
"""Kimi-K3 as SGLang 0.5.23 was seen to load it (0-D scales fail its loader's ``shape[0]``); a DeepSeek-V3 that
loads both shapes, and its NextN draft's class failing both, so that a draft's observation shows where it holds."""


@pytest.fixture(autouse=True)
def observed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scalar_scales.consumers.of_checkpoint.OBSERVED", OBSERVED)


def kimi_line(fix: str = PLUGIN) -> str:
    return f"Not loaded by SGLang 0.5.23 {KIMI}: {INDEX_ERROR}; it loads with {fix}"


def with_architectures(checkpoint: Path, architectures: list[str]) -> Path:
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    return checkpoint


def test_a_0_d_checkpoint_of_a_class_seen_only_through_its_own_loader_names_sglang_s_refusal(tmp_path):
    result = run_cli_in_process("check", mla_checkpoint(tmp_path / "kimi", KIMI))
    assert result.returncode == 0
    assert kimi_line() in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1].endswith(f"Observed not to load it: SGLang 0.5.23 {KIMI}.")


def test_a_legacy_checkpoint_of_that_class_which_sglang_loads_names_no_refusal(tmp_path):
    result = run_cli_in_process("check", mla_checkpoint(tmp_path / "kimi", KIMI, to="legacy"))
    assert "Not loaded by" not in result.stdout


def test_migrating_it_to_0_d_says_sglang_stops_loading_it_and_that_the_plugin_changes_nothing(tmp_path):
    lines = run_cli_in_process("migrate", mla_checkpoint(tmp_path / "kimi", KIMI, to="legacy")).stdout.splitlines()
    assert lines[0].endswith(": 1 stops loading the checkpoint")
    assert f"  SGLang 0.5.23 {KIMI}: stops loading it: {INDEX_ERROR}; with {PLUGIN}, nothing changes" in lines


def test_the_first_of_the_config_s_architectures_decides_the_class_among_the_observed_ones(tmp_path):
    """SGLang's rule (``_first_registered``): Kimi-K3's observations hold where it comes first, DeepSeek-V3's where
    that does, and none where the first is a class not observed."""
    kimi_first = with_architectures(mla_checkpoint(tmp_path / "kimi", KIMI), [KIMI, DEEPSEEK])
    deepseek_first = with_architectures(mla_checkpoint(tmp_path / "deepseek", KIMI), [DEEPSEEK, KIMI])
    unobserved_first = with_architectures(mla_checkpoint(tmp_path / "other", KIMI), ["KimiK2ForCausalLM", KIMI])
    assert kimi_line() in run_cli_in_process("check", kimi_first).stdout.splitlines()
    assert "Not loaded by" not in run_cli_in_process("check", deepseek_first).stdout
    assert "Not loaded by" not in run_cli_in_process("check", unobserved_first).stdout


def test_a_nextn_draft_s_class_does_not_hold_for_its_target_s_checkpoint(tmp_path):
    """SGLang loads a NextN draft from the target's checkpoint, as the class it makes of the target's (config.json
    names the target's): a checkpoint checked is its target's, whatever it is served with."""
    for to in ("legacy", "scalar"):
        result = run_cli_in_process("check", mla_checkpoint(tmp_path / to, DEEPSEEK, to=to))
        assert "Not loaded by" not in result.stdout


def test_a_checkpoint_whose_config_names_the_draft_s_class_is_judged_by_it(tmp_path):
    """As SGLang loads it: a config that names a class is loaded as that class."""
    checkpoint = with_architectures(mla_checkpoint(tmp_path / "nextn", DEEPSEEK), [NEXTN])
    assert f"Not loaded by SGLang 0.5.23 {NEXTN}: {CAT_ERROR}" in run_cli_in_process("check", checkpoint).stdout
