"""The vLLM MoE loader methods we patch, how we recognise them, and the replacements.

vLLM <= 0.23 keeps its MoE loaders on ``FusedMoE`` (``layer.py``); >= 0.24 on
``RoutedExperts`` (``routed_experts.py``), which added ``_to_scalar`` for the
per-tensor path (PR 43362) and then took it off ``_load_single_value`` again
(PR 46420), because the size-2 compressed-tensors ``weight_shape`` goes
through there too. The patch set declares the vLLM releases it supports
(``vllm_version.SUPPORTED``); inside them, we find the class and each method
by structure (the methods exist with the parameters we wrap; the names a
method's code uses), so a release whose loader has another shape is refused
too.

Where upstream writes a scale by item assignment (``param[e][i] = t``), a
(1,) value already works, so the wrapper only refuses a value that is not a
single one, with an error that names the weight, expert and shard. Where
upstream uses ``copy_`` into a 0-D slot, a (1,) value fails, and the wrapper
coerces it. Only scalar slots are touched: the size-2 ``weight_shape`` and
every real per-channel or group tensor pass through as they came. The hot
wrappers spell out upstream's parameters rather than taking ``*args``: they
run once per checkpoint scale.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from scalar_scales.patching import Patch, PatchSet, UnsupportedUpstreamError
from vllm_patch.scalar import to_scalar
from vllm_patch.targets import LOADER_CLASSES
from vllm_patch.vllm_logging import warn
from vllm_patch.vllm_version import SUPPORTED

__all__ = ["LOADER_PATCHES", "LoaderPlan", "plan_loader_patches"]


class LoaderPlan(NamedTuple):
    """What to patch on the installed vLLM, and what it already coerces itself."""

    owner: str
    patches: list[Patch]
    already_coerced: list[str]


def plan_loader_patches() -> LoaderPlan | None:
    """The patches for the installed vLLM's MoE loader, or None when we do not recognise it.

    A class is recognised when every method of ``_LOADER_METHODS`` is on it
    with the parameters we wrap.
    """
    for owner_path in LOADER_CLASSES:
        patches = [
            Patch(owner_path, name, wrap, why, parameters=parameters)
            for name, (parameters, wrap, why) in _LOADER_METHODS.items()
        ]
        try:
            originals = [patch.resolve()[1] for patch in patches]
        except UnsupportedUpstreamError:
            continue
        already = [
            patch.attribute
            for patch, original in zip(patches, originals, strict=True)
            if "_to_scalar" in _code_names(original)
        ]
        return LoaderPlan(owner_path, patches, already)
    return None


def _planned_rows() -> list[Patch]:
    plan = plan_loader_patches()
    if plan is None:
        raise UnsupportedUpstreamError(
            "MoE loader not recognised (no FusedMoE/RoutedExperts whose loader methods take the parameters we patch)"
        )
    return plan.patches


def _per_tensor(method: Callable[..., Any]) -> Callable[..., Any]:
    """``_load_per_tensor_weight_scale``: every slot is a scalar.

    Upstream writes with item assignment (``param[e][i] = t``), which already
    takes a (1,) value (and >= 0.24 also reshapes through ``_to_scalar``), so
    a single value goes through as it came; anything else fails here, named.
    """

    @functools.wraps(method)
    def wrapper(self: Any, shard_id: Any, param: torch.Tensor, loaded_weight: torch.Tensor, expert_id: Any) -> Any:
        if loaded_weight.numel() != 1:
            to_scalar(loaded_weight, name=_parameter_name(self, param), expert_id=expert_id, shard_id=shard_id)
        return method(self, shard_id, param, loaded_weight, expert_id)

    return wrapper


def _single_value(method: Callable[..., Any]) -> Callable[..., Any]:
    """``_load_single_value``: the same, but only for a scalar slot; the size-2 ``weight_shape`` row is left alone."""

    @functools.wraps(method)
    def wrapper(self: Any, param: torch.Tensor, loaded_weight: torch.Tensor, expert_id: Any) -> Any:
        if param.dim() == 1 and loaded_weight.numel() != 1:
            to_scalar(loaded_weight, name=_parameter_name(self, param), expert_id=expert_id)
        return method(self, param, loaded_weight, expert_id)

    return wrapper


def _copy_into_slot(method: Callable[..., Any]) -> Callable[..., Any]:
    """``copy_``-based loaders: a single-element value bound for a 0-D ``expert_data`` goes in as 0-D.

    ``slot.copy_(t)`` with a (1,) ``t`` and a 0-D slot is the crash of vLLM
    issue 43297 (``output with shape [] doesn't match the broadcast shape [1]``).
    ``loaded_weight`` (and ``shard_id``, for the message) are found by the
    method's own signature, so positional and keyword calls are treated alike.
    """
    names = list(inspect.signature(method).parameters)[3:]  # after self, expert_data, shard_dim
    at = names.index("loaded_weight")
    shard_at = names.index("shard_id") if "shard_id" in names else None

    @functools.wraps(method)
    def wrapper(self: Any, expert_data: torch.Tensor, shard_dim: int, *args: Any, **kwargs: Any) -> Any:
        if expert_data.dim() == 0:
            positional = len(args) > at
            loaded_weight = args[at] if positional else kwargs.get("loaded_weight")
            if loaded_weight is not None and loaded_weight.dim():
                shard_id = args[shard_at] if shard_at is not None and len(args) > shard_at else kwargs.get("shard_id")
                scalar = to_scalar(loaded_weight, name=_parameter_name(self, expert_data), shard_id=shard_id)
                if positional:
                    args = (*args[:at], scalar, *args[at + 1 :])
                else:
                    kwargs["loaded_weight"] = scalar
        return method(self, expert_data, shard_dim, *args, **kwargs)

    return wrapper


def _parameter_name(layer: torch.nn.Module, tensor: torch.Tensor) -> str | None:
    """The layer parameter ``tensor`` is (or is a view of), with the layer's prefix: for error messages only."""
    storage = tensor.untyped_storage().data_ptr()
    prefix = getattr(layer, "layer_name", None) or getattr(layer, "prefix", None)
    for name, param in layer.named_parameters():
        if param.untyped_storage().data_ptr() == storage:
            return f"{prefix}.{name}" if prefix else name
    return None


def _code_names(method: Any) -> tuple[str, ...]:
    function = getattr(method, "__func__", method)
    code = getattr(function, "__code__", None)
    return code.co_names if code is not None else ()


_NAMES = "a scale of more than one value is refused, named; one value goes in as upstream writes it"
_COERCES = "a (1,) scale bound for a 0-D slot goes in as 0-D, where upstream's copy_ refuses it"

_LOADER_METHODS: dict[str, tuple[tuple[str, ...], Callable[[Callable[..., Any]], Callable[..., Any]], str]] = {
    "_load_per_tensor_weight_scale": (
        ("self", "shard_id", "param", "loaded_weight", "expert_id"),
        _per_tensor,
        _NAMES,
    ),
    "_load_single_value": (
        ("self", "param", "loaded_weight", "expert_id"),
        _single_value,
        _NAMES,
    ),
    "_load_per_channel_weight_scale": (
        ("self", "expert_data", "shard_dim", "shard_id", "loaded_weight", "tp_rank"),
        _copy_into_slot,
        _COERCES,
    ),
    "_load_w2": (
        ("self", "expert_data", "shard_dim", "loaded_weight", "tp_rank", "load_full"),
        _copy_into_slot,
        _COERCES,
    ),
}
"""The loader methods we wrap: the parameters both vLLM generations give them, the wrapper, and why.

``_load_w13`` is not here: it splits its destination into w1/w3 halves, so a
0-D slot fails there (IndexError) whatever the shape of the value."""


LOADER_PATCHES = PatchSet("vllm_patch loader", _planned_rows, supports=SUPPORTED, warn=warn)
"""The MoE loader's patches, planned for the installed vLLM when first applied."""
