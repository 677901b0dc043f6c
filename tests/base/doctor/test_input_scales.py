"""Input scales judged by what they are, not by their siblings alone: a ModelOpt ``input_scale`` whose float32
reciprocal is Inf is an error (NV301), as an input scale of 0 is; and where nothing declares the quantization (a
lone file), a module without the input scale that its block type's other NVFP4 modules hold is missing it (NV202).

Each checkpoint is a tiny replica (scalar_scales_testkit.replicas), real safetensors files; the reciprocal is
taken by torch in float32, as the engines take it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from scalar_scales.doctor.scale_rules import RECIPROCAL_FLOOR
from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.replicas import Replica, bf16, modelopt_config, modelopt_module, write_replica

LAYER = "model.layers.0.mlp.experts"
BELOW = float(np.nextafter(np.float32(RECIPROCAL_FLOOR), np.float32(0)))
"""The largest float32 value below the floor."""
ABOVE = float(np.nextafter(np.float32(RECIPROCAL_FLOOR), np.float32(1)))
"""The smallest float32 value above it."""


def _moe(experts: int = 2) -> Replica:
    """A ModelOpt NVFP4 MoE layer of ``experts`` experts, declared in hf_quant_config.json."""
    tensors = [bf16("lm_head.weight", 128, 64)]
    for expert in range(experts):
        for projection in ("gate_proj", "up_proj", "down_proj"):
            tensors += modelopt_module(f"{LAYER}.{expert}.{projection}")
    return Replica({"model.safetensors": tensors}, {"architectures": ["Qwen3MoeForCausalLM"]}, modelopt_config())


def _lone_file(tensors: list[Any]) -> Replica:
    """A lone file with no config.json, as diffusion checkpoints ship, pointed at by its name."""
    return Replica({"transformer-nvfp4.safetensors": tensors}, None, target="transformer-nvfp4.safetensors")


def _findings(replica: Replica, folder: Path) -> list[dict[str, Any]]:
    result = run_cli_in_process("check", write_replica(replica, folder), "--json")
    findings: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return findings


@pytest.mark.parametrize("value", [1e-40, BELOW], ids=["denormal-1e-40", "largest-below-the-floor"])
def test_an_input_scale_whose_float32_reciprocal_is_inf_is_an_error_that_gives_its_value(tmp_path, value):
    assert torch.tensor(value, dtype=torch.float32).reciprocal().isinf()
    replica = _moe()
    replica.set_value(f"{LAYER}.1.down_proj.input_scale", value)
    (finding,) = _findings(replica, tmp_path)
    assert (finding["code"], finding["severity"], finding["tensor"]) == (
        "NV301",
        "error",
        f"{LAYER}.1.down_proj.input_scale",
    )
    shown = f"{float(np.float32(value)):.6g}"
    assert finding["detail"] == f"is {shown}, whose float32 reciprocal is Inf (it is below 1 / 3.40282e+38)"


def test_the_smallest_input_scale_whose_float32_reciprocal_is_finite_is_no_finding(tmp_path):
    assert torch.tensor(ABOVE, dtype=torch.float32).reciprocal().isfinite()
    replica = _moe()
    replica.set_value(f"{LAYER}.1.down_proj.input_scale", ABOVE)
    assert _findings(replica, tmp_path) == []


def test_a_weight_scale_2_that_small_is_no_nv301_finding_engines_multiply_by_it(tmp_path):
    replica = _moe()
    replica.set_value(f"{LAYER}.1.down_proj.weight_scale_2", 1e-40)
    assert "NV301" not in {f["code"] for f in _findings(replica, tmp_path)}


def test_an_input_scale_nv301_reports_is_no_outlier_among_its_siblings_as_well(tmp_path):
    replica = _moe(experts=4)
    replica.set_value(f"{LAYER}.1.down_proj.input_scale", 1e-40)
    found = {(f["code"], f["tensor"]) for f in _findings(replica, tmp_path)}
    assert found == {("NV301", f"{LAYER}.1.down_proj.input_scale")}


def _double_block(txt_activation: float | None) -> list[Any]:
    """FLUX.2's double block 0: its image and text MLPs NVFP4, the text one's input scales as given."""
    tensors = [bf16("single_blocks.0.linear1.weight", 96, 64)]
    for mlp, activation in (("img_mlp", 1 / 160), ("txt_mlp", txt_activation)):
        tensors += modelopt_module(f"double_blocks.0.{mlp}.0", rows=64, activation=activation)
        tensors += modelopt_module(f"double_blocks.0.{mlp}.2", columns=64, activation=activation)
    return tensors


def test_without_a_config_a_module_lacking_the_input_scale_its_block_types_other_modules_hold_is_an_error(tmp_path):
    findings = _findings(_lone_file(_double_block(None)), tmp_path)
    assert {(f["code"], f["severity"], f["tensor"]) for f in findings} == {
        ("NV202", "error", "double_blocks.0.txt_mlp.0.input_scale"),
        ("NV202", "error", "double_blocks.0.txt_mlp.2.input_scale"),
    }
    assert "other NVFP4 modules of double_blocks.* hold their input_scale" in findings[0]["why"]


def test_without_a_config_a_file_whose_modules_all_lack_input_scales_is_weight_only_and_clean(tmp_path):
    tensors = [t for t in _double_block(None) if not t.name.endswith(".input_scale")]
    assert _findings(_lone_file(tensors), tmp_path) == []


def test_without_a_config_a_module_in_no_numbered_block_is_not_judged(tmp_path):
    tensors = [*_double_block(1 / 150), *modelopt_module("final_layer.linear", activation=None)]
    assert _findings(_lone_file(tensors), tmp_path) == []


def test_without_a_config_modules_of_another_block_type_are_no_siblings(tmp_path):
    tensors = [*_double_block(1 / 150), *modelopt_module("single_blocks.0.linear2", activation=None)]
    assert _findings(_lone_file(tensors), tmp_path) == []
