"""A corpus of broken NVFP4 checkpoints: one per rule of ``scalar-scales check``, each broken the way it happens.

Every case starts from a clean checkpoint and changes one thing, keeping
the files valid safetensors: the reference reader accepts every shard. The
compressed-tensors corpus starts from the small synthetic checkpoint,
migrated (0-D scales, format_version 2); the ModelOpt one from a real
export (``scalar_scales_testkit.modelopt_exports``). The ``break_*``
functions take the checkpoint and its producer's layout, and return the
tensor the finding must name (None for the config). They work on
single-file checkpoints too, as ``oneshot`` and ModelOpt write the toys:
``scripts/check_evidence.py`` breaks those. :func:`to_modelopt` writes a
compressed-tensors checkpoint in ModelOpt's names, for the models no
exporter is run on here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from scalar_scales.files import Layout
from scalar_scales.migrate import migrate_checkpoint
from scalar_scales.nvfp4 import (
    COMPRESSED_TENSORS_LAYOUT,
    FORMAT_VERSION_KEY,
    MODELOPT_LAYOUT,
    SCALAR_FORMAT_VERSION,
    ProducerLayout,
)
from scalar_scales.sources import CONFIG_NAME, INDEX_NAME, MODELOPT_CONFIG_NAME, read_headers
from scalar_scales_testkit.cli import make_checkpoint, rewrite_header

__all__ = [
    "CORPUS",
    "EXPERT",
    "MODELOPT_CORPUS",
    "BrokenCase",
    "clean_checkpoint",
    "mla_checkpoint",
    "rewrite_shard",
    "shard_of",
    "to_modelopt",
]

Tensors = dict[str, dict[str, Any]]
"""A shard's tensors, in file order: name -> {"dtype", "shape", "data"}."""

Break = Callable[..., "str | None"]
"""(checkpoint, layout, module=EXPERT) -> the tensor the finding names; per-module breaks change ``module`` only."""

EXPERT = "model.layers.1.mlp.experts.2"
"""The module most cases break: an expert of the last layer, in the synthetic checkpoint and in every toy."""


def clean_checkpoint(directory: Path) -> Path:
    """The small synthetic checkpoint, migrated to 0-D scales and format_version 2: no rule finds anything."""
    checkpoint = make_checkpoint(directory)
    migrate_checkpoint(checkpoint)
    return checkpoint


MLA_RENAMES = {
    ".mlp.experts.0.gate_proj.": ".self_attn.q_a_proj.",
    ".mlp.experts.0.up_proj.": ".self_attn.kv_a_proj_with_mqa.",
}
"""How :func:`mla_checkpoint` makes layer 0's first expert's fused pair an MLA layer's a-projections."""


def mla_checkpoint(directory: Path, architecture: str, to: Layout = "scalar") -> Path:
    """The clean synthetic checkpoint (migrated ``to``) as an MLA model of class ``architecture`` would hold it:
    every layer's first expert's gate and up projections are its MLA a-projections (``q_a_proj``,
    ``kv_a_proj_with_mqa``), which SGLang fuses; no rule finds anything in it but NV101 for (1,) scales."""
    checkpoint = make_checkpoint(directory)
    migrate_checkpoint(checkpoint, to=to)

    def renamed(name: str) -> str:
        for old, new in MLA_RENAMES.items():
            name = name.replace(old, new)
        return name

    for shard in _shards(checkpoint):
        rewrite_header(shard, lambda header: {renamed(name): entry for name, entry in header.items()})
    _edit_index(checkpoint, lambda weight_map: _rename_all(weight_map, renamed))
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    (checkpoint / CONFIG_NAME).write_text(json.dumps({**config, "architectures": [architecture]}, indent=2))
    return checkpoint


def _rename_all(weight_map: dict[str, str], renamed: Callable[[str], str]) -> None:
    entries = {renamed(name): file for name, file in weight_map.items()}
    weight_map.clear()
    weight_map.update(entries)


def to_modelopt(checkpoint: Path, *, in_config_json: bool = False) -> None:
    """Rewrite a compressed-tensors NVFP4 checkpoint in ModelOpt's names and convention: ``weight`` for
    ``weight_packed``, and 0-D multipliers ``weight_scale_2`` and ``input_scale``, the reciprocals of
    compressed-tensors' divisors; the config declares ``NVFP4``, excluding what compressed-tensors ignored."""
    renames = {
        f".{ct}": f".{mo}"
        for ct, mo in zip(COMPRESSED_TENSORS_LAYOUT.leaves, MODELOPT_LAYOUT.leaves, strict=True)
        if ct != mo
    }

    def change(tensors: Tensors) -> None:
        for name in list(tensors):
            tensor = tensors.pop(name)
            for old, new in renames.items():
                if name.endswith(old):
                    name = name[: -len(old)] + new
                    if tensor["dtype"] == "F32":
                        tensor["shape"] = []
                        tensor["data"] = struct.pack("<f", 1.0 / struct.unpack("<f", tensor["data"])[0])
            tensors[name] = tensor

    for shard in _shards(checkpoint):
        rewrite_shard(shard, change)
    if (checkpoint / INDEX_NAME).exists():
        index = json.loads((checkpoint / INDEX_NAME).read_text())
        index["weight_map"] = {
            next((name[: -len(old)] + new for old, new in renames.items() if name.endswith(old)), name): shard
            for name, shard in index["weight_map"].items()
        }
        (checkpoint / INDEX_NAME).write_text(json.dumps(index, indent=2))
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    ignore = config.pop("quantization_config").get("ignore", [])
    exclude = [entry for entry in ignore if not entry.startswith("re:")]
    quantization = {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16}
    if in_config_json:
        config["quantization_config"] = {"quant_method": "modelopt", **quantization, "ignore": exclude}
    else:
        producer = {"name": "modelopt", "version": "0.37.0"}
        modelopt = {"producer": producer, "quantization": {**quantization, "exclude_modules": exclude}}
        (checkpoint / MODELOPT_CONFIG_NAME).write_text(json.dumps(modelopt, indent=2))
    (checkpoint / CONFIG_NAME).write_text(json.dumps(config, indent=2))


def _shards(checkpoint: Path) -> list[Path]:
    return sorted(checkpoint.glob("*.safetensors"))


def shard_of(checkpoint: Path, tensor: str) -> Path:
    """The shard that holds ``tensor``, by the index where there is one."""
    if not (checkpoint / INDEX_NAME).exists():
        (shard,) = _shards(checkpoint)
        return shard
    index = json.loads((checkpoint / INDEX_NAME).read_text())
    return checkpoint / index["weight_map"][tensor]


def rewrite_shard(path: Path, change: Callable[[Tensors], None]) -> None:
    """Rewrite a shard as a valid safetensors file after ``change`` has edited its tensors (data bytes included)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    metadata = header.pop("__metadata__", None)
    start = 8 + length
    tensors: Tensors = {}
    for name, spec in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        begin, end = spec["data_offsets"]
        tensors[name] = {"dtype": spec["dtype"], "shape": spec["shape"], "data": raw[start + begin : start + end]}
    change(tensors)
    entries: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name, tensor in tensors.items():
        end = offset + len(tensor["data"])
        entries[name] = {"dtype": tensor["dtype"], "shape": tensor["shape"], "data_offsets": [offset, end]}
        offset = end
    encoded = json.dumps(entries, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(t["data"] for t in tensors.values()))


def _edit_index(checkpoint: Path, change: Callable[[dict[str, str]], None]) -> None:
    """Edit the index's ``weight_map``; a single-file checkpoint gets the index that lists its file first."""
    index_path = checkpoint / INDEX_NAME
    if index_path.exists():
        index = json.loads(index_path.read_text())
    else:
        (shard,) = _shards(checkpoint)
        weight_map = dict.fromkeys(_names(shard), shard.name)
        index = {"metadata": {"total_size": shard.stat().st_size}, "weight_map": weight_map}
    change(index["weight_map"])
    index_path.write_text(json.dumps(index, indent=2))


def _remove(checkpoint: Path, tensor: str) -> str:
    rewrite_shard(shard_of(checkpoint, tensor), lambda tensors: tensors.pop(tensor))
    if (checkpoint / INDEX_NAME).exists():
        _edit_index(checkpoint, lambda weight_map: weight_map.pop(tensor))
    return tensor


def _set_values(checkpoint: Path, value_of: Callable[[str, float], float | None]) -> None:
    """Set each one-value F32 scale to ``value_of(name, value)`` where that is not None."""

    def change(tensors: Tensors) -> None:
        for name, tensor in tensors.items():
            if tensor["dtype"] == "F32" and len(tensor["data"]) == 4:
                new = value_of(name, struct.unpack("<f", tensor["data"])[0])
                if new is not None:
                    tensor["data"] = struct.pack("<f", new)

    for shard in _shards(checkpoint):
        rewrite_shard(shard, change)


def _declaration_of(checkpoint: Path) -> tuple[Path, str]:
    """The file and key of the declaration a server reads (vLLM's ``get_quant_config``): config.json's
    ``quantization_config`` where there is one, hf_quant_config.json's ``quantization`` otherwise. ModelOpt's
    exporter writes both."""
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    if "quantization_config" in config or not (checkpoint / MODELOPT_CONFIG_NAME).exists():
        return checkpoint / CONFIG_NAME, "quantization_config"
    return checkpoint / MODELOPT_CONFIG_NAME, "quantization"


def _edit_declaration(checkpoint: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the quantization declaration a server reads."""
    path, key = _declaration_of(checkpoint)
    config = json.loads(path.read_text())
    change(config[key])
    path.write_text(json.dumps(config, indent=2))


def _ignore_key(checkpoint: Path) -> str:
    return "exclude_modules" if _declaration_of(checkpoint)[0].name == MODELOPT_CONFIG_NAME else "ignore"


def break_legacy_scales(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """As llm-compressor writes NVFP4 today: every global scale (1,), no marker."""
    if layout is COMPRESSED_TENSORS_LAYOUT:
        migrate_checkpoint(checkpoint, to="legacy")
    else:

        def reshape(header: dict[str, Any]) -> None:
            for name, entry in header.items():
                if name.endswith(layout.scale_suffixes):
                    entry["shape"] = [1]

        for shard in _shards(checkpoint):
            rewrite_header(shard, reshape)
    return f"{module}.down_proj.{layout.weight_global}"


def break_marker_disagrees(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> None:
    """(1,) scales under a config that declares 0-D ones: a legacy checkpoint whose config was copied from a
    migrated one."""
    migrate_checkpoint(checkpoint, to="legacy")
    _edit_declaration(checkpoint, lambda q: q.update({FORMAT_VERSION_KEY: SCALAR_FORMAT_VERSION}))
    return None


def break_marker(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> None:
    """0-D scales, but the config lost its format_version (re-saved by a tool that rewrites config.json, or
    written by compressed-tensors' ModelOpt converter)."""
    _edit_declaration(checkpoint, lambda q: q.pop(FORMAT_VERSION_KEY))
    return None


def break_missing_weight_global_scale(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    return _remove(checkpoint, f"{module}.down_proj.{layout.weight_global}")


def break_missing_input_global_scale(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """vLLM #45212: a per-expert input scale missing."""
    return _remove(checkpoint, f"{module}.down_proj.{layout.input_global}")


def break_missing_weight_scale(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    return _remove(checkpoint, f"{module}.down_proj.{layout.weight_scale}")


def break_uncalibrated_expert(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """An expert calibration never routed a token to: its input scale is 0."""
    tensor = f"{module}.down_proj.{layout.input_global}"
    _set_values(checkpoint, lambda name, value: 0.0 if name == tensor else None)
    return tensor


def break_reciprocal_convention(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """Every global scale written in the other producer's convention: the reciprocal of this layout's value."""
    _set_values(checkpoint, lambda name, value: 1.0 / value if name.endswith(layout.scale_suffixes) else None)
    return f"{module}.down_proj.{layout.weight_global}"


def break_fused_partners(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """vLLM #54150: an expert's up projection calibrated apart from its gate projection."""
    tensor = f"{module}.up_proj.{layout.weight_global}"
    _set_values(checkpoint, lambda name, value: 2.0 * value if name == tensor else None)
    return tensor


def break_weight_scale_shape(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """Group scales for groups of 32 where the config says 16, as a packer with the wrong group size writes them."""
    tensor = f"{module}.gate_proj.{layout.weight_scale}"

    def change(tensors: Tensors) -> None:
        rows, groups = tensors[tensor]["shape"]
        tensors[tensor]["shape"] = [rows, groups // 2]
        tensors[tensor]["data"] = tensors[tensor]["data"][: rows * (groups // 2)]

    rewrite_shard(shard_of(checkpoint, tensor), change)
    return tensor


def break_dtype(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """Group scales labelled with the other FP8 format."""
    tensor = f"{module}.gate_proj.{layout.weight_scale}"
    rewrite_header(shard_of(checkpoint, tensor), lambda header: header[tensor].update(dtype="F8_E5M2"))
    return tensor


def break_index_names_missing(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """The index lists a tensor no shard holds (a shard re-saved without it)."""
    tensor = f"{module}.down_proj.bias"
    shard = shard_of(checkpoint, f"{module}.down_proj.{layout.weight}").name
    _edit_index(checkpoint, lambda weight_map: weight_map.update({tensor: shard}))
    return tensor


def break_index_forgot(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """A tensor the index forgot."""
    tensor = f"{module}.up_proj.{layout.weight}"
    _edit_index(checkpoint, lambda weight_map: weight_map.pop(tensor))
    return tensor


def break_ignored_layer(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """vLLM #43304: a layer stored as NVFP4 that the config leaves unquantized, as MTP layers are."""
    entry = r"re:model\.layers\.1\..*" if layout is COMPRESSED_TENSORS_LAYOUT else "model.layers.1.*"
    key = _ignore_key(checkpoint)
    _edit_declaration(checkpoint, lambda q: q.update({key: [*q.get(key, []), entry]}))
    return f"{module}.down_proj.{layout.weight}"


def break_untargeted_layer(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """A layer stored as NVFP4 that no NVFP4 group targets: compressed-tensors' group names layer 0 only, and
    ModelOpt's MIXED_PRECISION lists layer 0's modules only."""
    if layout is COMPRESSED_TENSORS_LAYOUT:
        _edit_declaration(
            checkpoint,
            lambda q: [group.update(targets=[r"re:model\.layers\.0\..*"]) for group in q["config_groups"].values()],
        )
    else:
        suffix = f".{layout.weight}"
        modules = [
            name[: -len(suffix)]
            for shard in _shards(checkpoint)
            for name in _names(shard)
            if name.endswith(suffix) and not name.startswith("model.layers.1.")
        ]
        recipe = {"quant_algo": "NVFP4", "group_size": 16}

        def mixed(q: dict[str, Any]) -> None:
            q.update(quant_algo="MIXED_PRECISION", quantized_layers=dict.fromkeys(modules, recipe))

        _edit_declaration(checkpoint, mixed)
    return f"{module}.down_proj.{layout.weight}"


def _names(shard: Path) -> list[str]:
    return read_headers(shard)[0].names


def break_unquantized_target(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """A linear layer the NVFP4 group targets, stored in BF16 as the quantizer skipped it: layer 0's attention
    output projection where the checkpoint has one, else an expert's down projection."""
    names = {name for shard in _shards(checkpoint) for name in _names(shard)}
    target = "model.layers.0.self_attn.o_proj"
    if f"{target}.{layout.weight}" not in names:
        target = "model.layers.0.mlp.experts.0.down_proj"
    tensor = f"{target}.weight"
    members = [f"{target}.{leaf}" for leaf in layout.leaves]
    shard = shard_of(checkpoint, members[0])

    def unquantize(tensors: Tensors) -> None:
        rows, packed = tensors[members[0]]["shape"]
        for member in members:
            tensors.pop(member, None)
        tensors[tensor] = {"dtype": "BF16", "shape": [rows, 2 * packed], "data": bytes(rows * 2 * packed * 2)}

    rewrite_shard(shard, unquantize)
    if (checkpoint / INDEX_NAME).exists():

        def relist(weight_map: dict[str, str]) -> None:
            for member in members:
                weight_map.pop(member, None)
            weight_map[tensor] = shard.name

        _edit_index(checkpoint, relist)
    return tensor


def break_weight_only_input_scale(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str:
    """A weight-only (NVFP4A16) group whose modules still carry input global scales."""
    _edit_declaration(
        checkpoint, lambda q: [group.update(input_activations=None) for group in q["config_groups"].values()]
    )
    return f"{module}.down_proj.{layout.input_global}"


def break_kv_scales_missing(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> None:
    """A declared FP8 KV cache, without its scales."""
    if layout is COMPRESSED_TENSORS_LAYOUT:
        scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
        _edit_declaration(checkpoint, lambda q: q.update(kv_cache_scheme=scheme))
    else:
        _edit_declaration(checkpoint, lambda q: q.update(kv_cache_quant_algo="FP8"))
    return None


def break_kv_scales_undeclared(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> None:
    """KV-cache scales stored, with no KV-cache quantization declared."""
    names = [f"model.layers.0.self_attn.{scale}" for scale in ("k_scale", "v_scale")]
    shard = shard_of(checkpoint, f"model.layers.0.mlp.experts.0.gate_proj.{layout.weight}")

    def add(tensors: Tensors) -> None:
        for name in names:
            tensors[name] = {"dtype": "F32", "shape": [], "data": struct.pack("<f", 1.0)}

    rewrite_shard(shard, add)
    if (checkpoint / INDEX_NAME).exists():
        _edit_index(checkpoint, lambda weight_map: weight_map.update(dict.fromkeys(names, shard.name)))
    return None


def break_undeclared(checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> None:
    """NVFP4 shards under a config that declares no quantization (the declaration dropped in a re-save)."""
    if (checkpoint / MODELOPT_CONFIG_NAME).exists():
        (checkpoint / MODELOPT_CONFIG_NAME).unlink()
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    config.pop("quantization_config", None)
    (checkpoint / CONFIG_NAME).write_text(json.dumps(config, indent=2))
    return None


class BrokenCase(NamedTuple):
    code: str
    make: Break
    alongside: tuple[str, ...] = ()
    """Codes the same break necessarily brings too (NV102's (1,) scales are each NV101)."""
    per_module: bool = False
    """The break changes one module (``module``); the others change the checkpoint as a whole."""


_SHARED: dict[str, BrokenCase] = {
    "legacy-scales": BrokenCase("NV101", break_legacy_scales),
    "no-weight-global-scale": BrokenCase("NV201", break_missing_weight_global_scale, per_module=True),
    "no-input-global-scale": BrokenCase("NV202", break_missing_input_global_scale, per_module=True),
    "no-weight-scale": BrokenCase("NV203", break_missing_weight_scale, per_module=True),
    "uncalibrated-expert": BrokenCase("NV301", break_uncalibrated_expert, per_module=True),
    "reciprocal-convention": BrokenCase("NV302", break_reciprocal_convention),
    "fused-partners-differ": BrokenCase("NV303", break_fused_partners, per_module=True),
    "weight-scale-groups-of-32": BrokenCase("NV401", break_weight_scale_shape, per_module=True),
    "weight-scale-e5m2": BrokenCase("NV402", break_dtype, per_module=True),
    "index-names-a-missing-tensor": BrokenCase("NV501", break_index_names_missing),
    "index-forgot-a-tensor": BrokenCase("NV502", break_index_forgot),
    "quantized-layer-ignored": BrokenCase("NV601", break_ignored_layer),
    "quantized-layer-untargeted": BrokenCase("NV602", break_untargeted_layer),
    "targeted-layer-unquantized": BrokenCase("NV603", break_unquantized_target),
    "kv-scales-missing": BrokenCase("NV605", break_kv_scales_missing),
    "kv-scales-undeclared": BrokenCase("NV606", break_kv_scales_undeclared),
    "quantization-undeclared": BrokenCase("NV607", break_undeclared),
}

CORPUS: dict[str, BrokenCase] = {
    **_SHARED,
    "marker-disagrees": BrokenCase("NV102", break_marker_disagrees, ("NV101",)),
    "marker-lost": BrokenCase("NV103", break_marker),
    "weight-only-with-input-scales": BrokenCase("NV604", break_weight_only_input_scale),
}
"""compressed-tensors: each checkpoint is reported by its own rule, naming the tensor, and check changes nothing."""

MODELOPT_CORPUS: dict[str, BrokenCase] = dict(_SHARED)
"""ModelOpt: the same, for every rule but the marker's (compressed-tensors' own) and NV604 (vLLM's ModelOpt
weight-only methods take an input scale and drop it)."""
