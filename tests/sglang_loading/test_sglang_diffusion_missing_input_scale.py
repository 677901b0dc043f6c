"""What SGLang 0.5.23's diffusion loader does with an NVFP4 module's ``input_scale`` that the checkpoint lacks, as
BFL's FLUX.2-dev-NVFP4 mixed file lacks its ``txt_mlp`` layers' (SGLang PR #23625): NV202's message says it fills
in 1.0 (scalar_scales.doctor.module_rules), and this is the loader doing it, on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

fsdp_load = pytest.importorskip(
    "sglang.multimodal_gen.runtime.loader.fsdp_load", reason="SGLang tests run in the sglang environment"
)

MODULE = "double_blocks.0.txt_mlp.0"


class _Fp4Linear(nn.Module):
    """The parameters an NVFP4 linear layer of SGLang's diffusion models loads: its packed weight and its input
    scale, created on the meta device as the loader's models are."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(4, 8, dtype=torch.uint8), requires_grad=False)
        self.input_scale = nn.Parameter(torch.empty(1, dtype=torch.float32), requires_grad=False)


def test_the_diffusion_loader_fills_a_missing_input_scale_with_1():
    with torch.device("meta"):
        model = nn.ModuleDict({"txt_mlp": _Fp4Linear()})
    checkpoint = iter([("txt_mlp.weight", torch.ones(4, 8, dtype=torch.uint8))])
    fsdp_load.load_model_from_full_model_state_dict(
        model, checkpoint, torch.device("cpu"), None, param_names_mapping=lambda name: (name, None, None)
    )
    assert model["txt_mlp"].input_scale.tolist() == [1.0]
    assert model["txt_mlp"].weight.sum().item() == 32
