"""What vLLM makes of a ModelOpt expert's ``input_scale`` too small for its float32 reciprocal to be finite (a dead
expert's 1e-40, vLLM PR 42601): NV301 says it quantizes the expert's activations with Inf, as for an input scale of
0 (scalar_scales.doctor.scale_rules). ``make_nvfp4_moe_quant_config`` for a backend that keeps each expert's own
input scale (CUTLASS), in every vLLM release the environments run.
"""

from __future__ import annotations

import math

import torch
from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend, make_nvfp4_moe_quant_config

from scalar_scales.doctor.scale_rules import RECIPROCAL_FLOOR


def test_an_expert_input_scale_below_the_floor_becomes_an_activation_scale_of_inf_as_0_does():
    input_scales = torch.tensor([1 / 448, 1e-40, 0.0], dtype=torch.float32)
    assert 0.0 < input_scales[1].item() < RECIPROCAL_FLOOR
    ones = torch.ones(3)
    config = make_nvfp4_moe_quant_config(
        NvFp4MoeBackend.VLLM_CUTLASS, ones, ones, ones, ones, input_scales, input_scales
    )
    assert config.a1_gscale is not None and config.a2_gscale is not None
    for activation_scales in (config.a1_gscale, config.a2_gscale):
        assert math.isfinite(activation_scales[0].item())
        assert activation_scales[1:].tolist() == [math.inf, math.inf]
