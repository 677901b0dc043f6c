"""What a checkpoint's config declares about its quantization, for either producer of NVFP4 checkpoints.

- **compressed-tensors** (llm-compressor): ``config.json``'s
  ``quantization_config`` (``quant_method: compressed-tensors``), with config
  groups, each with ``targets``, ``weights``, ``input_activations`` and a
  ``format``; an ``ignore`` list; a ``kv_cache_scheme``; and this project's
  marker, ``format_version``. The top-level ``format`` is
  ``nvfp4-pack-quantized`` or ``mixed-precision``.
- **ModelOpt** (NVIDIA's): ``config.json``'s ``quantization_config`` with
  ``quant_method: modelopt``, or ``hf_quant_config.json``'s ``quantization``:
  one ``quant_algo`` (``NVFP4``), ``ignore`` (``exclude_modules`` in
  hf_quant_config.json) and a KV-cache algorithm; or ``quant_algo:
  MIXED_PRECISION`` with ``quantized_layers``, each module's own algorithm.

Which file counts is vLLM's choice (``get_quant_config``): config.json's
``quantization_config`` when there is one, hf_quant_config.json otherwise, or
when a MIXED_PRECISION config.json leaves its ``quantized_layers`` there.
What vLLM refuses (no ``quant_algo``, an ``exclude_modules`` that is not a
list), and what no reading can make sense of, is a :class:`CheckpointError`;
a field of the wrong kind that vLLM would pass over is read as empty, so
that the other checks still run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalar_scales.errors import CheckpointError, printable
from scalar_scales.nvfp4 import (
    COMPRESSED_TENSORS,
    FORMAT_VERSION_KEY,
    GROUP_SIZE,
    LEGACY_FORMAT_VERSION,
    MODELOPT,
    NVFP4_FORMAT,
    SCALAR_FORMAT_VERSION,
    Producer,
)

__all__ = ["MODELOPT_CONFIG_NAME", "Declaration", "Group", "declaration", "exclusions", "kv_cache_algorithm"]

MODELOPT_CONFIG_NAME = "hf_quant_config.json"
_COMPRESSED_TENSORS_METHODS = (None, "compressed-tensors", "compressed_tensors")


@dataclass(frozen=True)
class Group:
    """One way of quantizing, and the modules it is for.

    ``targets`` are compressed-tensors' (``re:`` patterns, names and class
    names). A ModelOpt group is for every linear module (``everything``),
    or for the modules MIXED_PRECISION's ``quantized_layers`` gives it
    (:attr:`Declaration.quantized_layers`).
    """

    name: str
    format: str | None
    """compressed-tensors' ``format`` of the group, or ModelOpt's ``quant_algo``."""
    nvfp4: bool
    input_activations: bool
    """The group quantizes activations (W4A4), so its modules need input scales."""
    targets: tuple[str, ...] = ()
    everything: bool = False
    group_size: int = GROUP_SIZE
    input_group_size: int = GROUP_SIZE
    """compressed-tensors: the group size of the group's ``input_activations`` (its weights' where it has none)."""
    not_nvfp4_weights: tuple[str, ...] = ()
    """compressed-tensors: the group's ``weights`` arguments, other than ``group_size``, that state something other
    than NVFP4's (``num_bits 8``), as the group states them; an argument the group leaves out is not judged."""


@dataclass(frozen=True)
class Declaration:
    """A checkpoint's quantization declaration: its producer, its own name for its format, and its groups."""

    producer: Producer | None
    """None: no quantization this tool reads (no ``quantization_config``, or another ``quant_method``)."""
    format_name: str | None
    """What the config calls its format: ``nvfp4-pack-quantized``, ``mixed-precision``, ``NVFP4``,
    ``MIXED_PRECISION``, or another ``quant_method``."""
    groups: tuple[Group, ...] = ()
    ignore: tuple[str, ...] = ()
    """compressed-tensors' ``ignore``, or ModelOpt's exclusions (wildcards)."""
    ignore_key: str = "ignore"
    """The key the exclusions came from: ``ignore`` in config.json, ``exclude_modules`` in hf_quant_config.json."""
    kv_cache: bool = False
    """The config declares quantized KV-cache scales (``k_scale``, ``v_scale``)."""
    source: str | None = None
    """The file the declaration is in."""
    format_version: int | None = None
    """compressed-tensors' marker: 2 for 0-D global scales, 1 (legacy (1,)) when the key is absent; None for any
    other producer."""
    format_version_declared: bool = False
    """The config has the marker's key (``format_version`` 1 is then what it says, not what its absence means)."""
    quantized_layers: tuple[tuple[str, int], ...] = ()
    """ModelOpt MIXED_PRECISION: each module ``quantized_layers`` names, with the index of its group, in the
    file's order (vLLM takes the first that fits a fused module)."""
    weight_only_groups: tuple[str, ...] = ()
    """ModelOpt: the config groups, where ``quant_algo`` says ``NVFP4`` (W4A4) and every one of them says
    ``input_activations: null`` (weight-only). The engines read this contradiction two ways: vLLM since PR #54427
    as ``W4A16_NVFP4`` (as :attr:`groups` do), vLLM before it and SGLang as ``NVFP4`` (vLLM #54189)."""

    @property
    def stated_format_version(self) -> int | None:
        """The marker as the config states it: None where it has no ``format_version``."""
        return self.format_version if self.format_version_declared else None

    @property
    def nvfp4_groups(self) -> tuple[Group, ...]:
        return tuple(group for group in self.groups if group.nvfp4)

    @property
    def quantization_format(self) -> str | None:
        """``nvfp4-pack-quantized`` for a compressed-tensors checkpoint with an NVFP4 group (a mixed-precision one
        too), else the config's own name for its format."""
        if self.producer == COMPRESSED_TENSORS and (self.nvfp4_groups or self.format_name == NVFP4_FORMAT):
            return NVFP4_FORMAT
        return self.format_name

    @property
    def is_nvfp4(self) -> bool:
        return bool(self.nvfp4_groups) or self.quantization_format == NVFP4_FORMAT


def declaration(
    config: Mapping[str, Any] | None,
    config_path: str | os.PathLike[str] | None,
    modelopt_config: Mapping[str, Any] | None = None,
    modelopt_path: str | os.PathLike[str] | None = None,
) -> Declaration:
    """The declaration of a checkpoint's parsed ``config.json`` and ``hf_quant_config.json`` (either may be None;
    the paths name them in errors and in :attr:`Declaration.source`)."""
    quantization_config = None if config is None else config.get("quantization_config")
    if quantization_config is not None and not isinstance(quantization_config, dict):
        raise CheckpointError(
            config_path or "config.json",
            f"quantization_config must be an object, not {_json_kind(quantization_config)}",
        )
    file_quantization = None if modelopt_config is None else modelopt_config.get("quantization")
    if file_quantization is not None and not isinstance(file_quantization, dict):
        raise CheckpointError(
            modelopt_path or MODELOPT_CONFIG_NAME,
            f"quantization must be an object, not {_json_kind(file_quantization)}",
        )
    if quantization_config is not None:
        method = quantization_config.get("quant_method")
        if method == MODELOPT:
            mixed_elsewhere = (
                str(quantization_config.get("quant_algo") or "").upper() == "MIXED_PRECISION"
                and "quantized_layers" not in quantization_config
                and file_quantization is not None
            )
            if not mixed_elsewhere:
                return _modelopt(quantization_config, quantization_config, str(config_path), exclude_key="ignore")
        elif method in _COMPRESSED_TENSORS_METHODS:
            return _compressed_tensors(quantization_config, str(config_path))
        else:
            return Declaration(None, printable(str(method)), source=str(config_path))
    if file_quantization is not None:
        assert modelopt_config is not None
        return _modelopt(file_quantization, modelopt_config, str(modelopt_path), exclude_key="exclude_modules")
    return Declaration(None, None, source=None if config_path is None else str(config_path))


def _mapping(container: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = (container or {}).get(key)
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def _group_size(value: object) -> int:
    return value if type(value) is int and value > 0 else GROUP_SIZE


def _compressed_tensors(quantization_config: Mapping[str, Any], path: str) -> Declaration:
    groups_field = quantization_config.get("config_groups") or {}
    if not isinstance(groups_field, dict) or not all(isinstance(group, dict) for group in groups_field.values()):
        raise CheckpointError(path, "quantization_config.config_groups must be an object of objects")
    top_format = quantization_config.get("format")
    formats = [top_format, *(group.get("format") for group in groups_field.values())]
    if not all(fmt is None or isinstance(fmt, str) for fmt in formats):
        raise CheckpointError(path, "a quantization_config format must be a string")
    version = quantization_config.get(FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION)
    if type(version) is not int or version not in (LEGACY_FORMAT_VERSION, SCALAR_FORMAT_VERSION):
        raise CheckpointError(
            path, f"quantization_config.{FORMAT_VERSION_KEY} must be 1 or 2, not {json.dumps(version)}"
        )
    groups = []
    for name, group in groups_field.items():
        group_format = group.get("format") or top_format
        groups.append(
            Group(
                name=printable(str(name)),
                format=None if group_format is None else printable(group_format),
                nvfp4=group_format == NVFP4_FORMAT,
                input_activations=group.get("input_activations") is not None,
                targets=_strings(group.get("targets")),
                group_size=_group_size(_mapping(group, "weights").get("group_size")),
                input_group_size=_group_size(
                    _mapping(group, "input_activations").get("group_size")
                    or _mapping(group, "weights").get("group_size")
                ),
                not_nvfp4_weights=_not_nvfp4(_mapping(group, "weights")),
            )
        )
    return Declaration(
        COMPRESSED_TENSORS,
        None if top_format is None else printable(top_format),
        tuple(groups),
        _strings(quantization_config.get("ignore")),
        kv_cache=quantization_config.get("kv_cache_scheme") is not None,
        source=path,
        format_version=version,
        format_version_declared=FORMAT_VERSION_KEY in quantization_config,
    )


_NVFP4_ARGUMENTS = (("num_bits", 4), ("type", "float"), ("strategy", "tensor_group"), ("symmetric", True))
"""compressed-tensors' quantization arguments of NVFP4 weights, but the group size (vLLM's ``_is_nvfp4_format``)."""
_LOWERED = frozenset({"type", "strategy"})
"""The arguments compressed-tensors' ``QuantizationArgs`` lowercases before the engines compare them (its
``validate_type`` and ``validate_strategy``): ``"FLOAT"`` is NVFP4's ``float``."""


def _not_nvfp4(arguments: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        f"{key} {printable(json.dumps(arguments[key]))}"
        for key, value in _NVFP4_ARGUMENTS
        if key in arguments and _as_read(key, arguments[key]) != value
    )


def _as_read(key: str, value: object) -> object:
    return value.lower() if key in _LOWERED and isinstance(value, str) else value


def _modelopt(
    quantization: Mapping[str, Any], original: Mapping[str, Any], path: str, *, exclude_key: str
) -> Declaration:
    """A ModelOpt declaration, read as ``ModelOptQuantConfigBase.from_config`` reads it: config.json's
    ``quantization_config`` (``exclude_key`` ``ignore``) or hf_quant_config.json's ``quantization``
    (``exclude_modules``); ``original`` is the object vLLM reads ``config_groups`` from."""
    algo = quantization.get("quant_algo")
    if not algo or not isinstance(algo, str):
        raise CheckpointError(path, "the ModelOpt quantization has no quant_algo string; vLLM refuses it")
    algo = printable(algo.upper())
    exclude = quantization.get(exclude_key, [])
    if not isinstance(exclude, list):
        raise CheckpointError(path, f"{exclude_key} must be a list, not {_json_kind(exclude)}; vLLM refuses it")
    group_size = _group_size(quantization.get("group_size"))
    quantized_layers: tuple[tuple[str, int], ...] = ()
    weight_only_groups: tuple[str, ...] = ()
    if algo == "MIXED_PRECISION":
        layers = _mapping(quantization, "quantized_layers")
        if not layers:
            raise CheckpointError(path, "MIXED_PRECISION needs a non-empty quantized_layers object; vLLM refuses it")
        recipes: dict[tuple[str, int], int] = {}
        assigned: list[tuple[str, int]] = []
        for module, recipe in layers.items():
            if isinstance(recipe, Mapping) and isinstance(recipe.get("quant_algo"), str):
                key = (printable(recipe["quant_algo"].upper()), _group_size(recipe.get("group_size", group_size)))
                assigned.append((module, recipes.setdefault(key, len(recipes))))
        groups = tuple(
            _modelopt_group(f"{layer_algo} (group size {size})", layer_algo, size) for layer_algo, size in recipes
        )
        quantized_layers = tuple(assigned)
    else:
        weight_only_groups = _weight_only_groups(original) if algo == "NVFP4" else ()
        groups = (_modelopt_group(algo, algo, group_size, weight_only=bool(weight_only_groups), everything=True),)
    return Declaration(
        MODELOPT,
        algo,
        groups,
        exclusions(quantization, exclude_key),
        ignore_key=exclude_key,
        kv_cache=kv_cache_algorithm(quantization) is not None,
        source=path,
        quantized_layers=quantized_layers,
        weight_only_groups=weight_only_groups,
    )


def kv_cache_algorithm(quantization: Mapping[str, Any]) -> str | None:
    """The KV-cache algorithm a ModelOpt declaration (one file's) names: ``kv_cache_quant_algo``, or config.json's
    ``kv_cache_scheme`` (FP8 where it says 8-bit floats, as vLLM's ``ModelOptQuantConfigBase.from_config`` reads
    it); None where it names none."""
    algo = quantization.get("kv_cache_quant_algo")
    if isinstance(algo, str) and algo:
        return printable(algo.upper())
    scheme = quantization.get("kv_cache_scheme")
    if isinstance(scheme, Mapping):
        return "FP8" if (scheme.get("type"), scheme.get("num_bits")) == ("float", 8) else "a kv_cache_scheme"
    return None


def exclusions(quantization: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The modules a ModelOpt declaration (one file's) excludes: the strings of its ``key`` list (``ignore`` in
    config.json, ``exclude_modules`` in hf_quant_config.json)."""
    return _strings(quantization.get(key))


def _weight_only_groups(original: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of ``original``'s config groups where every one says ``input_activations: null``, the test of
    vLLM's ``ModelOptNvFp4Config._from_config`` since PR #54427 (not applied to MIXED_PRECISION, whose per-layer
    configs vLLM builds without it); () otherwise."""
    config_groups = _mapping(original, "config_groups")
    weight_only = all(isinstance(g, Mapping) and g.get("input_activations") is None for g in config_groups.values())
    return tuple(printable(str(name)) for name in config_groups) if config_groups and weight_only else ()


def _modelopt_group(name: str, algo: str, group_size: int, *, weight_only: bool = False, **members: Any) -> Group:
    """A ModelOpt algorithm as a group: ``NVFP4`` is W4A4, ``W4A16_NVFP4`` weight-only, and so is ``NVFP4`` whose
    config groups all say ``input_activations: null`` (``weight_only``), as vLLM reads it since PR #54427."""
    weight_only = weight_only or algo == "W4A16_NVFP4"
    return Group(
        name=name,
        format=algo,
        nvfp4="NVFP4" in algo,
        input_activations=not weight_only,
        group_size=group_size,
        **members,
    )


def _json_kind(value: object) -> str:
    return {str: "a string", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )
