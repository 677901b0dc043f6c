"""ModelOpt NVFP4 checkpoints (NVIDIA's layout): checked by the same rules in ModelOpt's names, declared in
hf_quant_config.json or config.json, single-format or MIXED_PRECISION; migrate leaves them alone."""

from __future__ import annotations

import json

import pytest

from scalar_scales.nvfp4 import MODELOPT_LAYOUT
from scalar_scales_testkit.broken import EXPERT, MODELOPT_CORPUS, clean_modelopt_checkpoint
from scalar_scales_testkit.cli import run_cli, snapshot

MODULES = 24
"""The small synthetic checkpoint: 2 layers x 4 experts x 3 projections."""


@pytest.fixture(params=["hf_quant_config.json", "config.json"])
def modelopt(request, tmp_path):
    return clean_modelopt_checkpoint(tmp_path / "modelopt", in_config_json=request.param == "config.json")


def test_a_clean_modelopt_checkpoint_passes_saying_what_was_checked_in_its_own_terms(modelopt):
    result = run_cli("check", modelopt)
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert "ModelOpt NVFP4" in lines[0]
    assert (
        lines[1] == f"Checked {MODULES} NVFP4 modules (config group NVFP4, NVFP4 W4A4: {MODULES}) and 48 global scales."
    )
    assert lines[-1].startswith(f"All checks passed: no finding from 20 rules on {MODULES} NVFP4 modules")


def test_the_json_summary_names_the_producer_and_its_format(modelopt):
    summary = json.loads(run_cli("check", modelopt, "--json").stdout)["summary"]
    assert (summary["producer"], summary["format"], summary["nvfp4_modules"]) == ("modelopt", "NVFP4", MODULES)


def test_a_compressed_tensors_divisor_in_weight_scale_2_is_told_in_modelopt_terms(modelopt):
    MODELOPT_CORPUS["reciprocal-convention"].make(modelopt, MODELOPT_LAYOUT)
    findings = json.loads(run_cli("check", modelopt, "--json").stdout)["findings"]
    finding = next(f for f in findings if f["tensor"] == f"{EXPERT}.down_proj.weight_scale_2")
    assert "in ModelOpt's amax/(6*448) convention; it looks like compressed-tensors'" in finding["message"]


def mixed_precision(checkpoint, layers):
    path = checkpoint / "hf_quant_config.json"
    config = json.loads(path.read_text())
    config["quantization"] = {
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": None,
        "quantized_layers": {layer: {"quant_algo": "NVFP4", "group_size": 16} for layer in layers},
    }
    path.write_text(json.dumps(config))


def test_mixed_precision_checks_the_layers_it_lists_under_its_own_format_name(tmp_path):
    checkpoint = clean_modelopt_checkpoint(tmp_path / "mixed")
    mixed_precision(checkpoint, [f"model.layers.{n}.mlp.experts" for n in range(2)])
    result = run_cli("check", checkpoint)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout
    assert "ModelOpt MIXED_PRECISION" in lines[0]
    assert f"config group NVFP4 (group size 16), NVFP4 W4A4: {MODULES}" in lines[1]


def test_a_module_mixed_precision_does_not_list_is_nv602(tmp_path):
    checkpoint = clean_modelopt_checkpoint(tmp_path / "mixed")
    mixed_precision(checkpoint, ["model.layers.0.mlp.experts"])
    findings = json.loads(run_cli("check", checkpoint, "--json").stdout)["findings"]
    assert {f["code"] for f in findings} == {"NV602"}
    assert {f["tensor"].split(".")[2] for f in findings} == {"1"}


def test_migrate_says_there_is_nothing_to_migrate_and_exits_0(modelopt):
    before = snapshot(modelopt)
    result = run_cli("migrate", modelopt)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{modelopt}: nothing to migrate: a ModelOpt NVFP4 checkpoint, whose 48 scales are 0-D, as ModelOpt writes "
        "them\n"
    )
    assert snapshot(modelopt) == before


def test_migrate_refuses_to_write_a_compressed_tensors_layout_into_a_modelopt_checkpoint(modelopt):
    before = snapshot(modelopt)
    result = run_cli("migrate", modelopt, "--to", "legacy")
    assert result.returncode == 2
    assert "is a ModelOpt checkpoint" in result.stderr
    assert snapshot(modelopt) == before
