"""The SGLang loader functions we patch, and the replacements.

SGLang's MLA models fuse ``q_a_proj`` and ``kv_a_proj_with_mqa`` (dots.3 adds
``g_proj``) into one ``ReplicatedLinear`` on load, and its NVFP4 linear takes
one weight global scale for the whole fused weight
(``CompressedTensorsW4A4Fp4.process_weights_after_loading``:
``alpha = 1 / (input_global_scale * weight_global_scale.max())``). Each model's
``load_weights`` fuses them its own way (:data:`SINGLE_SLOT_FUSIONS` lists the
fused layers; docs/sglang.md lists the loaders): most ``torch.cat`` the parts,
so legacy (1,) scales reach the layer as shape (2,) and its ``weight_loader``
asserts equal sizes; 0-D ones fail in ``torch.cat``, or take a branch that
keeps ``q_a_proj``'s value (DeepSeek), or an ``IndexError`` (Kimi-K3, which
copies slices into the fused parameter itself and so keeps ``q_a_proj``'s
value of (1,) ones, whatever ``kv_a_proj_with_mqa``'s is).

So the patch does three things, all on SGLang's default model loader
(``DefaultModelLoader.load_weights_only``, the safetensors load formats, which
loads drafts too) or below it, so that it holds for every model's loader:

- every 0-D global scale enters the model's ``load_weights`` as (1,), the
  shape llm-compressor has always written, which every loader takes up to the
  fusion;
- the per-tensor scales of a fusion's parts are compared as they enter, by
  their names in the checkpoint: parts whose values differ are a named error
  before the model's loader can keep one of them;
- a per-tensor scale slot of a ``ReplicatedLinear`` takes the fused parts'
  values as one, where they are one.

One value for all would be wrong for the others: their NVFP4 blocks are
scaled relative to their own global scale, so any other value scales their
output by the ratio of the two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from scalar_scales.nvfp4 import MODELOPT_LAYOUT, is_global_scale
from scalar_scales.patching import Patch, PatchSet
from sglang_patch.declared import LOGGER, SUPPORTED, FusedScalesDifferError, sglang_version

__all__ = ["LOADER_PATCHES", "SINGLE_SLOT_FUSIONS", "announce_at_first_load"]

SINGLE_SLOT_FUSIONS = {
    "fused_qkv_a_proj_with_mqa": ("q_a_proj", "kv_a_proj_with_mqa"),
    "fused_qkv_a_g_proj_with_mqa": ("q_a_proj", "kv_a_proj_with_mqa", "g_proj"),
}
"""The ``ReplicatedLinear`` layers SGLang 0.5.23's loaders fuse checkpoint layers into, one per-tensor scale for
all of them, and those layers, in the order the loaders concatenate them (read from its ``models/``)."""


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
            return original(model, _FusedPartners(model).checked(_legacy_shaped(weights)), target_device)
        finally:
            _loading.remove(model)

    return staticmethod(wrapper)


def _legacy_shaped(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in weights:
        if tensor.dim() == 0 and is_global_scale(name):
            tensor = tensor.reshape(1)
        yield name, tensor


class _FusedPartners:
    """The model's single-slot fusions' per-tensor scales, compared by their checkpoint names as they enter its
    ``load_weights``: whatever a model's loader does with them, parts that differ never load."""

    def __init__(self, model: torch.nn.Module) -> None:
        from sglang.srt.layers.linear import ReplicatedLinear

        present = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, ReplicatedLinear)}
        self.fusions = {fused: parts for fused, parts in SINGLE_SLOT_FUSIONS.items() if fused in present}
        self.waiting: dict[str, dict[str, tuple[str, torch.Tensor]]] = {}

    def checked(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            if self.fusions and tensor.numel() == 1 and name.endswith(_PER_TENSOR_SCALE_ENDINGS):
                self._see(name, tensor)
            yield name, tensor

    def _see(self, name: str, tensor: torch.Tensor) -> None:
        for fused, parts in self.fusions.items():
            for part in parts:
                if f".{part}." in f".{name}":
                    fused_name = f".{name}".replace(f".{part}.", f".{fused}.", 1)[1:]
                    group = self.waiting.setdefault(fused_name, {})
                    group[part] = (name, tensor)
                    if len(group) == len(parts):
                        del self.waiting[fused_name]
                        _refuse_differing(fused_name, [group[p] for p in parts])


_PER_TENSOR_SCALE_ENDINGS = ("scale", *MODELOPT_LAYOUT.scale_suffixes)
"""How a single-value scale's name ends: compressed-tensors' ``*_global_scale``, ModelOpt's ``input_scale`` and its
``weight_scale_2``, whose 0-D parts DeepSeek's loader fuses by keeping ``q_a_proj``'s."""


def _refuse_differing(fused_name: str, parts: list[tuple[str, torch.Tensor]]) -> None:
    values = [float(tensor.reshape(()).item()) for _, tensor in parts]
    if any(value != values[0] for value in values):
        _differ(fused_name, [name for name, _ in parts], values)


def _differ(fused_name: str, part_names: list[str], values: list[float]) -> None:
    parts = f" ({', '.join(part_names[:-1])} and {part_names[-1]})" if part_names else ""
    raise FusedScalesDifferError(
        f"{fused_name}: SGLang fuses {len(values)} layers{parts} into one, which takes one per-tensor scale, but "
        f"theirs differ ({', '.join(repr(v) for v in values)}); no one value is right for all of them: quantize "
        "them with a shared global scale (llm-compressor does)"
    )


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
        fused = next((f for f in SINGLE_SLOT_FUSIONS if f".{f}." in f".{where}"), None)
        named = [where.replace(fused, part) for part in SINGLE_SLOT_FUSIONS[fused]] if fused else []
        _differ(where, named if len(named) == values.numel() else [], values.reshape(-1).tolist())
    return first


LOADER_PATCHES = PatchSet(
    "sglang_patch loader",
    [
        Patch(
            "sglang.srt.model_loader.loader.DefaultModelLoader",
            "load_weights_only",
            _as_legacy_shape,
            "0-D global scales enter as (1,), the shape llm-compressor has always written, and the per-tensor "
            "scales of layers fused into one are compared by name",
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
