"""The SGLang loader functions we patch, and the replacements.

SGLang's DeepSeek-family loaders fuse ``q_a_proj`` and ``kv_a_proj_with_mqa``
into one ``ReplicatedLinear`` (``fused_qkv_a_proj_with_mqa``) on load, and its
NVFP4 kernel takes one weight global scale for the whole fused weight
(``CompressedTensorsW4A4Fp4.process_weights_after_loading``:
``alpha = 1 / (input_global_scale * weight_global_scale.max())``). Legacy
(1,) scales reach that layer concatenated, shape (2,), and its
``weight_loader`` asserts equal sizes: the model does not load. 0-D scales
take another branch, which keeps ``q_a_proj``'s value and drops
``kv_a_proj_with_mqa``'s without a word.

So the patch does two things:

- every 0-D ``*_global_scale`` enters SGLang's model loading as (1,), the
  shape llm-compressor wrote for all of SGLang's history and every model's
  loader takes (``DefaultModelLoader.load_weights_only``);
- a single-value slot of a ``ReplicatedLinear`` takes a fused scale's values
  as one, where they are one: equal partners load, and partners that differ
  are a named error. One value for both would be wrong for the other: its
  NVFP4 blocks are scaled relative to its own global scale, so any other
  value scales its output by the ratio of the two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any

import torch

from scalar_scales.patching import Patch, PatchSet, UnsupportedUpstreamError

__all__ = ["LOADER_PATCHES", "TESTED_SGLANG", "FusedScalesDifferError", "sglang_version"]

TESTED_SGLANG = ("0.5.23",)
"""The SGLang releases the patch was written for and tested on; any other is refused, nothing patched."""

GLOBAL_SCALE_SUFFIX = "_global_scale"
"""compressed-tensors' NVFP4 per-tensor scales: ``weight_global_scale``, ``input_global_scale``."""


class FusedScalesDifferError(ValueError):
    """The global scales of layers SGLang fuses into one differ, so no one value is right for the fused layer."""


@functools.cache
def sglang_version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "unknown"


def _check() -> str:
    version = sglang_version()
    if version not in TESTED_SGLANG:
        raise UnsupportedUpstreamError(
            f"SGLang {version} is not a release the patch was tested on ({', '.join(TESTED_SGLANG)}); nothing patched"
        )
    return f"SGLang {version}"


_loading: list[torch.nn.Module] = []
"""The models whose weights are being loaded now, so that an error can name a parameter by its full name
(SGLang's layers do not know their own; its loader threads share this list)."""


def _as_legacy_shape(load_weights_only: Any) -> Any:
    """``DefaultModelLoader.load_weights_only`` (a staticmethod): the checkpoint's 0-D global scales as (1,)."""
    original = load_weights_only.__func__

    @functools.wraps(original)
    def wrapper(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]], target_device: Any) -> Any:
        _loading.append(model)
        try:
            return original(model, _legacy_shaped(weights), target_device)
        finally:
            _loading.remove(model)

    return staticmethod(wrapper)


def _legacy_shaped(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in weights:
        if tensor.dim() == 0 and name.endswith(GLOBAL_SCALE_SUFFIX):
            tensor = tensor.reshape(1)
        yield name, tensor


def _one_value_slot(weight_loader: Callable[..., Any]) -> Callable[..., Any]:
    """``ReplicatedLinear.weight_loader``: a single-value slot takes fused partners' equal values as one."""

    @functools.wraps(weight_loader)
    def wrapper(self: torch.nn.Module, param: torch.nn.Parameter, loaded_weight: torch.Tensor) -> Any:
        if param.numel() == 1 and loaded_weight.dim() <= 1 and loaded_weight.shape != param.shape:
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
        raise FusedScalesDifferError(
            f"{where}: SGLang fuses {values.numel()} layers here into one, whose NVFP4 kernel takes one global "
            f"scale, but theirs differ ({', '.join(f'{v:g}' for v in values.reshape(-1).tolist())}); no one "
            "value is right for all of them: quantize them with a shared global scale (llm-compressor does)"
        )
    return first


LOADER_PATCHES = PatchSet(
    "sglang_patch loader",
    [
        Patch(
            "sglang.srt.model_loader.loader.DefaultModelLoader",
            "load_weights_only",
            _as_legacy_shape,
            "0-D global scales enter as (1,), the shape every SGLang loader takes",
            parameters=("model", "weights", "target_device"),
        ),
        Patch(
            "sglang.srt.layers.linear.ReplicatedLinear",
            "weight_loader",
            _one_value_slot,
            "a fused layer's single-value scale takes its partners' equal values as one, and refuses differing ones",
            parameters=("self", "param", "loaded_weight"),
        ),
    ],
    check=_check,
)
"""SGLang's model-loading patches."""
