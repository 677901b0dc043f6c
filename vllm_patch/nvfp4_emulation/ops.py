"""The emulated computations, as torch custom ops: vLLM's ``torch.compile`` treats each as one opaque call.

Importing this module registers them (``scalar_scales::nvfp4_emulated_linear``
and ``scalar_scales::nvfp4_emulated_experts``), so only the emulation's
patches import it, on the CPU platform, once vLLM imports its NVFP4 code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from vllm_patch.nvfp4_emulation.numerics import fake_quantize_nvfp4_activation

__all__ = ["emulated_experts", "emulated_linear"]


@torch.library.custom_op("scalar_scales::nvfp4_emulated_linear", mutates_args=())
def emulated_linear(
    x: torch.Tensor, weight: torch.Tensor, input_global_scales: torch.Tensor, widths: list[int], use_a16: bool
) -> torch.Tensor:
    """A dequantized NVFP4 linear layer; W4A4 fake-quantizes the input per partition with its own global scale
    (once, where the partitions' scales are equal, as llm-compressor calibrates q, k and v on one input).

    A custom op, so that vLLM's ``torch.compile`` treats it as one opaque call.
    """
    weight = weight.to(x.dtype)
    if use_a16:
        return torch.nn.functional.linear(x, weight)
    if bool((input_global_scales == input_global_scales[0]).all()):
        return torch.nn.functional.linear(fake_quantize_nvfp4_activation(x, input_global_scales[0]), weight)
    parts = [
        torch.nn.functional.linear(fake_quantize_nvfp4_activation(x, scale), part)
        for part, scale in zip(weight.split(widths), input_global_scales, strict=True)
    ]
    return torch.cat(parts, dim=-1)


@emulated_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, input_global_scales: torch.Tensor, widths: list[int], use_a16: bool):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("scalar_scales::nvfp4_emulated_experts", mutates_args=())
def emulated_experts(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    w13_input_global_scale: torch.Tensor,
    w2_input_global_scale: torch.Tensor,
    use_a16: bool,
) -> torch.Tensor:
    """Each selected expert on its tokens (SiLU-gated), summed with the routing weights. ``topk_ids`` are this
    rank's expert indices; -1 marks an expert another rank computes.

    W4A4 fake-quantizes the gate and up inputs each with its own input global
    scale, and the down input with the expert's: all experts' rows in one
    call each, every row with its expert's scale (the gate's input serves the
    up projection too where their scales are equal). A custom op, so that
    vLLM's ``torch.compile`` treats it as one opaque call.
    """
    linear = torch.nn.functional.linear
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    rows = torch.nonzero(topk_ids.reshape(-1) >= 0).squeeze(1)
    if rows.numel() == 0:  # every selected expert is another rank's
        return out.to(x.dtype)
    experts = topk_ids.reshape(-1)[rows].long()
    experts, order = experts.sort(stable=True)
    rows = rows[order]
    tokens, slots = rows // topk_ids.shape[1], rows % topk_ids.shape[1]
    active, counts = torch.unique_consecutive(experts, return_counts=True)
    xe = x[tokens]
    if use_a16:
        gate_in = up_in = xe
    else:
        gate_scales, up_scales = w13_input_global_scale[experts, 0], w13_input_global_scale[experts, 1]
        gate_in = fake_quantize_nvfp4_activation(xe, gate_scales)
        up_in = gate_in if torch.equal(gate_scales, up_scales) else fake_quantize_nvfp4_activation(xe, up_scales)
    chunks = counts.tolist()
    gate_up = [w13[e].to(x.dtype) for e in active.tolist()]
    gated = functools.partial(_gated, same_input=gate_in is up_in)
    hidden = _per_expert(gated, gate_up, gate_in.split(chunks), up_in.split(chunks))
    if not use_a16:
        hidden = fake_quantize_nvfp4_activation(hidden, w2_input_global_scale[experts])
    down = [w2[e].to(x.dtype) for e in active.tolist()]
    y = _per_expert(linear, hidden.split(chunks), down)
    out.index_add_(0, tokens, y.float() * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)


def _gated(gate_up: torch.Tensor, gate_in: torch.Tensor, up_in: torch.Tensor, *, same_input: bool) -> torch.Tensor:
    """SiLU(gate) * up for one expert; one matmul for both halves when they take the same input."""
    half = gate_up.shape[0] // 2
    if same_input:
        both = torch.nn.functional.linear(gate_in, gate_up)
        return torch.nn.functional.silu(both[:, :half]) * both[:, half:]
    linear = torch.nn.functional.linear
    return torch.nn.functional.silu(linear(gate_in, gate_up[:half])) * linear(up_in, gate_up[half:])


def _per_expert(compute: Callable[..., torch.Tensor], *columns: Any) -> torch.Tensor:
    """``compute`` on each active expert's arguments (one from each column), the results stacked by rows."""
    return torch.cat([compute(*arguments) for arguments in zip(*columns, strict=True)])


@emulated_experts.register_fake
def _(x, topk_weights, topk_ids, w13, w2, w13_input_global_scale, w2_input_global_scale, use_a16):
    return torch.empty_like(x)
