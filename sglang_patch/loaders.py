"""The SGLang loader functions we patch, and the replacements.

SGLang's DeepSeek-family loaders fuse ``q_a_proj`` and ``kv_a_proj_with_mqa``
into one ``ReplicatedLinear`` (``fused_qkv_a_proj_with_mqa``) on load, and its
NVFP4 linear takes one weight global scale for the whole fused weight
(``CompressedTensorsW4A4Fp4.process_weights_after_loading``:
``alpha = 1 / (input_global_scale * weight_global_scale.max())``). Legacy
(1,) scales reach that layer concatenated, shape (2,), and its
``weight_loader`` asserts equal sizes: the model does not load. 0-D scales
take another branch in DeepSeek's loader, which keeps ``q_a_proj``'s value
and drops ``kv_a_proj_with_mqa``'s without a word, and GLM-4-MoE-Lite's
loader refuses them (it concatenates them too).

So the patch does two things:

- on SGLang's default model loader (``DefaultModelLoader.load_weights_only``,
  the safetensors load formats) every 0-D global scale enters the model's
  ``load_weights`` as (1,), the shape llm-compressor has always written, which
  the loaders of both models take up to the fusion;
- a per-tensor scale slot of a ``ReplicatedLinear`` takes the fused parts'
  values as one, where they are one: equal parts load, and parts that differ
  are a named error. One value for both would be wrong for the other: its
  NVFP4 blocks are scaled relative to its own global scale, so any other
  value scales its output by the ratio of the two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales.patching import Patch, PatchSet
from sglang_patch.declared import LOGGER, SUPPORTED, FusedScalesDifferError, sglang_version

__all__ = ["LOADER_PATCHES", "announce_at_first_load"]

_FUSED = "fused_qkv_a_proj_with_mqa"
_PARTS = ("q_a_proj", "kv_a_proj_with_mqa")
"""The fused layer, and the checkpoint's layers SGLang fuses into it, in the order it concatenates them."""


def _warn(message: str) -> None:
    """One warning line about the installed SGLang, as every line of the plugin's that says something is wrong."""
    LOGGER.warning("scalar-scales: SGLang %s: %s", sglang_version(), message)


_loading: list[torch.nn.Module] = []
"""The models whose weights are being loaded now, so that an error can name a parameter by its full name
(SGLang's layers do not know their own; its loader threads share this list)."""
_first_load: list[Callable[[], None]] = []
"""Called at the first load, then forgotten: the plugin's one log line, written once SGLang's logging is set up
(SGLang loads plugins before it configures logging)."""


def _as_legacy_shape(load_weights_only: Any) -> Any:
    """``DefaultModelLoader.load_weights_only`` (a staticmethod): the checkpoint's 0-D global scales as (1,)."""
    original = load_weights_only.__func__

    @functools.wraps(original)
    def wrapper(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]], target_device: Any) -> Any:
        while _first_load:
            _first_load.pop()()
        _loading.append(model)
        try:
            return original(model, _legacy_shaped(weights), target_device)
        finally:
            _loading.remove(model)

    return staticmethod(wrapper)


def _legacy_shaped(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in weights:
        if tensor.dim() == 0 and is_global_scale(name):
            tensor = tensor.reshape(1)
        yield name, tensor


def _one_value_slot(weight_loader: Callable[..., Any]) -> Callable[..., Any]:
    """``ReplicatedLinear.weight_loader``: a per-tensor scale slot takes fused parts' equal values as one."""
    from sglang.srt.layers.parameter import PerTensorScaleParameter

    @functools.wraps(weight_loader)
    def wrapper(self: torch.nn.Module, param: torch.nn.Parameter, loaded_weight: torch.Tensor) -> Any:
        if (
            isinstance(param, PerTensorScaleParameter)
            and param.numel() == 1
            and loaded_weight.dim() <= 1
            and loaded_weight.shape != param.shape
        ):
            loaded_weight = _one_value(self, param, loaded_weight).reshape(param.shape)
        return weight_loader(self, param, loaded_weight)

    return wrapper


def _one_value(layer: torch.nn.Module, param: torch.nn.Parameter, values: torch.Tensor) -> torch.Tensor:
    first = values.reshape(-1)[:1]
    if values.numel() > 1 and not bool(torch.all(values == first)):
        where = next(
            (n for model in (*_loading, layer) for n, p in model.named_parameters() if p is param),
            "a per-tensor scale",
        )
        parts = f" ({' and '.join(where.replace(_FUSED, part) for part in _PARTS)})" if _FUSED in where else ""
        raise FusedScalesDifferError(
            f"{where}: SGLang fuses {values.numel()} layers{parts} into one, which takes one per-tensor scale, but "
            f"theirs differ ({', '.join(repr(v) for v in values.reshape(-1).tolist())}); no one value is right for "
            "all of them: quantize them with a shared global scale (llm-compressor does)"
        )
    return first


LOADER_PATCHES = PatchSet(
    "sglang_patch loader",
    [
        Patch(
            "sglang.srt.model_loader.loader.DefaultModelLoader",
            "load_weights_only",
            _as_legacy_shape,
            "0-D global scales enter as (1,), the shape llm-compressor has always written",
            parameters=("model", "weights", "target_device"),
        ),
        Patch(
            "sglang.srt.layers.linear.ReplicatedLinear",
            "weight_loader",
            _one_value_slot,
            "a fused layer's per-tensor scale takes its parts' equal values as one, and refuses differing ones",
            parameters=("self", "param", "loaded_weight"),
        ),
    ],
    supports=SUPPORTED,
    warn=_warn,
)
"""SGLang's model-loading patches."""


def announce_at_first_load(line: Callable[[], None] | None) -> None:
    """Have ``line`` written when SGLang first loads weights through the patched loader (None: nothing)."""
    _first_load[:] = [] if line is None else [line]
