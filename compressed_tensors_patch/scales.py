"""The two layouts of an NVFP4 per-tensor global scale.

In memory, compressed-tensors and llm-compressor keep every global scale as
shape (1,): llm-compressor PRs 3185 and 3191 show that 0-D parameters hang
distributed GPTQ and break save. On disk, format 2 writes them as 0-D, the
shape a per-tensor scale has in every loader that copies it into a scalar
slot (vLLM issue 43297). Converting between the two never changes a value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scalar_scales.nvfp4 import is_global_scale

if TYPE_CHECKING:  # torch only in annotations: the package imports without it, so `scalar-scales-demo` can say so
    import torch

__all__ = [
    "GlobalScaleShapeError",
    "as_memory_layout",
    "as_written_layout",
    "check_global_scales",
    "restore_memory_layout_on_first_forward",
]

MEMORY_SHAPE = (1,)


class GlobalScaleShapeError(ValueError):
    """A per-tensor global scale that does not hold exactly one value."""

    def __init__(self, name: str, shape: tuple[int, ...]):
        self.name = name
        self.shape = shape
        numel = math.prod(shape)
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
    for name, tensor in state_dict.items():
        if is_global_scale(name) and tensor.dim() != len(shape):
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
    for name, tensor in state_dict.items():
        if is_global_scale(name) and tuple(tensor.shape) != MEMORY_SHAPE:
            out[name] = _reshaped(name, tensor, MEMORY_SHAPE)
    return out


def restore_memory_layout_on_first_forward(model: torch.nn.Module) -> None:
    """Before ``model``'s next forward pass, and before any other hook of it, give its global scales shape (1,).

    The hook removes itself once it has run; it is the model's own, so it
    runs whether or not the patch is still applied. Values are unchanged.
    """

    def restore(module: torch.nn.Module, args: Any) -> None:
        handle.remove()
        for name, param in module.named_parameters():
            if is_global_scale(name) and tuple(param.shape) != MEMORY_SHAPE:
                param.data = _reshaped(name, param.data, MEMORY_SHAPE)

    handle = model.register_forward_pre_hook(restore, prepend=True)


def check_global_scales(named_tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`GlobalScaleShapeError` for the first global scale with numel != 1."""
    for name, tensor in named_tensors.items():
        if is_global_scale(name) and tensor.numel() != 1:
            raise GlobalScaleShapeError(name, tuple(tensor.shape))


def _reshaped(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    if tensor.numel() != 1:
        raise GlobalScaleShapeError(name, tuple(tensor.shape))
    return (tensor.detach() if tensor.requires_grad else tensor).reshape(shape)
