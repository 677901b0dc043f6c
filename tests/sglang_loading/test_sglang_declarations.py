"""How SGLang reads a ModelOpt declaration that contradicts itself (NV608): ``quant_algo: NVFP4`` (W4A4) over config
groups that all say ``input_activations: null`` (weight-only), as vLLM #54189's checkpoint does.

SGLang reads config.json's ``quantization_config`` (``ModelOptFp4Config.from_config``, its flat format) as vLLM does;
the declarations are NVIDIA's own exports' (nvidia-modelopt 0.47), broken as NV608's examples break them.
"""

from __future__ import annotations

import json

import pytest
from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp4Config

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import MODELOPT_LAYOUT
from scalar_scales_testkit.broken import MODELOPT_CORPUS
from scalar_scales_testkit.modelopt_exports import copy_of_export


def sglang_config(checkpoint) -> ModelOptFp4Config:
    return ModelOptFp4Config.from_config(json.loads((checkpoint / "config.json").read_text())["quantization_config"])


@pytest.mark.parametrize("example", [example.name for example in RULES["NV608"].examples])
def test_sglang_reads_quant_algo_alone_and_builds_w4a4(tmp_path, example):
    """SGLang 0.5.23 has no counterpart of vLLM PR #54427: NVFP4 is W4A4 whatever the groups say (a checkpoint
    without input scales keeps the 1.0 its NVFP4 methods allocate them with)."""
    checkpoint = copy_of_export(tmp_path / "checkpoint")
    MODELOPT_CORPUS[example].make(checkpoint, MODELOPT_LAYOUT)
    assert sglang_config(checkpoint).is_w4a16 is False


def test_sglang_reads_a_weight_only_export_as_weight_only(tmp_path):
    """The control: what ModelOpt writes for weight-only (quant_algo W4A16_NVFP4) is read so."""
    assert sglang_config(copy_of_export(tmp_path / "checkpoint", "w4a16")).is_w4a16 is True
