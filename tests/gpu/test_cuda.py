"""The GPU check: quantize, save and reload the toy MoE on CUDA, and the scale-loading shapes on CUDA tensors."""

from __future__ import annotations

import pytest
import torch

import vllm_patch
from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.checkpoints import global_scale_shapes
from scalar_scales_testkit.producer import cosine, differing, load_and_run

MIN_COSINE = 0.95


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
@pytest.mark.parametrize("patched", [False, True], ids=["legacy", "format2"])
def test_quantizing_on_cuda_writes_the_forms_global_scale_shape(quantized, report, scheme, patched):
    shapes = global_scale_shapes(quantized(scheme, patched))
    report(f"{scheme} {'patched' if patched else 'unpatched'} `oneshot`: global scales on disk", str(sorted(shapes)))
    assert shapes == ({()} if patched else {(1,)})


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
@pytest.mark.parametrize("patched", [False, True], ids=["legacy", "format2"])
def test_reloading_on_cuda_matches_the_bf16_logits(quantized, device, prompt_ids, bf16_logits, report, scheme, patched):
    _, logits = load_and_run(quantized(scheme, patched), prompt_ids, patched=True, device=device)
    similarity = cosine(logits, bf16_logits)
    report(f"{scheme} {'format 2' if patched else 'legacy'} reloaded: logits cosine vs bf16", f"{similarity:.4f}")
    assert similarity >= MIN_COSINE


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
def test_both_forms_decompress_bit_identically_on_cuda(quantized, device, prompt_ids, report, scheme):
    legacy, _ = load_and_run(quantized(scheme, False), prompt_ids, patched=True, device=device)
    scalar, _ = load_and_run(quantized(scheme, True), prompt_ids, patched=True, device=device)
    changed = differing(legacy, scalar)
    report(f"{scheme} legacy vs format 2: decompressed parameters that differ", f"{len(changed)} of {len(legacy)}")
    assert changed == []


def test_to_scalar_gives_a_0d_view_of_a_cuda_scale(device, report):
    value = torch.tensor([0.5], device=device)
    scalar = vllm_patch.to_scalar(value, name="w13_weight_global_scale", expert_id=3, shard_id="w1")
    report("`to_scalar` of a (1,) tensor", f"shape {tuple(scalar.shape)} on {scalar.device.type}, shares storage")
    assert scalar.shape == () and scalar.device == value.device and scalar.data_ptr() == value.data_ptr()


def test_copy_through_to_scalar_loads_into_a_0d_cuda_slot(device, report):
    param = torch.nn.Parameter(torch.zeros(8, 2, device=device), requires_grad=False)
    param.data[3][0].copy_(vllm_patch.to_scalar(torch.tensor([0.5], device=device)))
    report("`param[e][i].copy_(to_scalar((1,)))`", "loads" if param.data[3][0].item() == 0.5 else "wrong value")
    assert param.data[3][0].item() == 0.5


def outcome(operation, device: torch.device) -> str:
    """What `operation(slot, value)` does with a (1,) value for a 0-D slot of an (8, 2) parameter on ``device``."""
    param = torch.zeros(8, 2, device=device)
    try:
        operation(param, torch.tensor([0.5], device=device))
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "loads" if param[3][0].item() == 0.5 else "runs, wrong value"


def assign(param: torch.Tensor, value: torch.Tensor) -> None:
    param[3][0] = value


def copy(param: torch.Tensor, value: torch.Tensor) -> None:
    param[3][0].copy_(value)


@pytest.mark.parametrize("operation", [assign, copy], ids=["item-assignment", "copy_"])
def test_a_1_shaped_value_into_a_0d_slot_behaves_on_cuda_as_on_cpu(device, report, operation):
    """Measured, not assumed: on the CPU item assignment loads and copy_ raises (vLLM issue 43297)."""
    label = {"assign": "`param[e][i] = (1,)-tensor`", "copy": "`param[e][i].copy_((1,)-tensor)`"}[operation.__name__]
    on_device = outcome(operation, device)
    report(label, on_device)
    assert on_device == outcome(operation, torch.device("cpu"))
