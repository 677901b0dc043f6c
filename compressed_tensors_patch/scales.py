"""The two layouts of an NVFP4 per-tensor global scale.

In memory, compressed-tensors and llm-compressor keep every global scale as
shape (1,): llm-compressor PRs 3185 and 3191 show that 0-D parameters hang
distributed GPTQ and break save. On disk, format 2 writes them as 0-D, the
shape a per-tensor scale has in every loader that copies it into a scalar
slot (vLLM issue 43297). Converting between the two never changes a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = [
    "GLOBAL_SCALE_NAMES",
    "GlobalScaleShapeError",
    "as_memory_layout",
    "as_written_layout",
    "check_global_scales",
]

GLOBAL_SCALE_NAMES: tuple[str, ...] = ("weight_global_scale", "input_global_scale")
MEMORY_SHAPE = (1,)


class GlobalScaleShapeError(ValueError):
    """A per-tensor global scale that does not hold exactly one value."""

    def __init__(self, name: str, shape: tuple[int, ...]):
        self.name = name
        self.shape = shape
        numel = torch.Size(shape).numel()
        super().__init__(
            f"{name} has shape {shape} ({numel} elements); a per-tensor global scale must hold exactly one value"
        )


def as_written_layout(state_dict: dict[str, Any], *, scalar: bool) -> dict[str, Any]:
    """Put the global scales of ``state_dict`` in the on-disk layout: 0-D if ``scalar``, else (1,).

    Changes ``state_dict`` in place: it is the dict ``compress`` just built
    and returned, which nothing else holds yet. This runs once per quantized
    module on every save, so it does no more than it must.
    """
    shape = () if scalar else MEMORY_SHAPE
    for name in GLOBAL_SCALE_NAMES:
        tensor = state_dict.get(name)
        if tensor is not None and tensor.dim() != len(shape):
            state_dict[name] = _reshaped(name, tensor, shape)
    return state_dict


def as_memory_layout(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state_dict`` with its global scales as (1,), the shape compressed-tensors computes with.

    Decompression divides a bf16 group scale by the global scale. A 0-D float32
    divisor does not take part in dtype promotion (the result stays bf16), a
    (1,) one does (float32), so pinning (1,) keeps format-2 artifacts
    decompressing bit-identically to legacy ones.
    """
    out = dict(state_dict)
    for name in GLOBAL_SCALE_NAMES:
        tensor = out.get(name)
        if tensor is not None and tuple(tensor.shape) != MEMORY_SHAPE:
            out[name] = _reshaped(name, tensor, MEMORY_SHAPE)
    return out


def check_global_scales(named_tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`GlobalScaleShapeError` for the first global scale with numel != 1."""
    for name, tensor in named_tensors.items():
        if name.rsplit(".", 1)[-1] in GLOBAL_SCALE_NAMES and tensor.numel() != 1:
            raise GlobalScaleShapeError(name, tuple(tensor.shape))


def _reshaped(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    if tensor.numel() != 1:
        raise GlobalScaleShapeError(name, tuple(tensor.shape))
    return (tensor.detach() if tensor.requires_grad else tensor).reshape(shape)
