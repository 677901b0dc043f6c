"""A corpus of broken NVFP4 checkpoints: the examples of each rule of ``scalar-scales check``, broken as it happens.

Every case starts from a clean checkpoint and changes one thing, keeping
the files valid safetensors: the reference reader accepts every shard. The
compressed-tensors corpus starts from the small synthetic checkpoint,
migrated (0-D scales, format_version 2); the ModelOpt one from a real
export (``scalar_scales_testkit.modelopt_exports``). Each case is a
rule's example (:mod:`scalar_scales.doctor.examples`: a rule names its
examples where it is defined), made in each layout the rule is about by
:func:`make_example`, which takes the checkpoint and its producer's layout
and returns the tensor the finding must name (None for the config). The
edits work on single-file checkpoints too, as ``oneshot`` and ModelOpt
write the toys: ``scripts/check_evidence.py`` breaks those.
:func:`to_modelopt` writes a compressed-tensors checkpoint in ModelOpt's
names, for the models no exporter is run on here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, assert_never

from scalar_scales.doctor import RULES
from scalar_scales.doctor.examples import (
    AddScales,
    Declare,
    DeclareElsewhere,
    DeclareGroupSize,
    DeclareKVCache,
    DeclareWeights,
    DropDeclaration,
    Edit,
    Example,
    HalveGroups,
    IgnoreLayer,
    IndexAdds,
    IndexDrops,
    InvertScales,
    LegacyShapes,
    MultiplyValue,
    Remove,
    RemoveEvery,
    ScaleAmax,
    SetDtype,
    SetValue,
    TargetOnlyLayer,
    Undeclare,
    Unexclude,
    Unquantize,
    WeightOnly,
)
from scalar_scales.files import Layout
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT, ProducerLayout
from scalar_scales.sources import CONFIG_NAME, INDEX_NAME, MODELOPT_CONFIG_NAME, read_headers
from scalar_scales_testkit.cli import make_checkpoint, rewrite_header

__all__ = [
    "CORPUS",
    "EXPERT",
    "MODELOPT_CORPUS",
    "BrokenCase",
    "clean_checkpoint",
    "make_example",
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


def _remove_every(checkpoint: Path, suffix: str) -> None:
    removed: set[str] = set()

    def change(tensors: Tensors) -> None:
        for name in [name for name in tensors if name.endswith(suffix)]:
            tensors.pop(name)
            removed.add(name)

    for shard in _shards(checkpoint):
        rewrite_shard(shard, change)
    if (checkpoint / INDEX_NAME).exists():
        _edit_index(checkpoint, lambda weight_map: [weight_map.pop(name) for name in removed])


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


_MIRRORED = {
    "quant_algo": "quant_algo",
    "ignore": "exclude_modules",
    "kv_cache_quant_algo": "kv_cache_quant_algo",
    "group_size": "group_size",
    "quantized_layers": "quantized_layers",
}
"""The fields of config.json's ModelOpt ``quantization_config`` that hf_quant_config.json's ``quantization`` says
too, by the name each file gives them: the fields NV612 holds the two files to."""


def _edit_declaration(checkpoint: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the quantization declaration a server reads; where it is config.json's ModelOpt one, the fields
    hf_quant_config.json says too change there alike, as the exporter writes both (NV612 is the two disagreeing)."""
    path, key = _declaration_of(checkpoint)
    config = json.loads(path.read_text())
    before = dict(config[key])
    change(config[key])
    path.write_text(json.dumps(config, indent=2))
    served, elsewhere = config[key], checkpoint / MODELOPT_CONFIG_NAME
    if path.name != CONFIG_NAME or served.get("quant_method") != "modelopt" or not elsewhere.exists():
        return
    modelopt = json.loads(elsewhere.read_text())
    for field, mirrored in _MIRRORED.items():
        if served.get(field) != before.get(field):
            if field in served:
                modelopt["quantization"][mirrored] = served[field]
            else:
                modelopt["quantization"].pop(mirrored, None)
    elsewhere.write_text(json.dumps(modelopt, indent=4))


def _ignore_key(checkpoint: Path) -> str:
    return "exclude_modules" if _declaration_of(checkpoint)[0].name == MODELOPT_CONFIG_NAME else "ignore"


def make_example(example: Example, checkpoint: Path, layout: ProducerLayout, module: str = EXPERT) -> str | None:
    """Break ``checkpoint``, of ``layout``, as the rule's ``example`` says, ``{module}`` being ``module``; return
    the tensor the finding must name (None for the config)."""
    fields = {
        "module": module,
        "weight": layout.weight,
        "weight_scale": layout.weight_scale,
        "weight_global": layout.weight_global,
        "input_global": layout.input_global,
    }
    named: str | None = None
    for edit in example.edits:
        named = _apply(edit, checkpoint, layout, fields)
    return named if example.names is None else example.names.format(**fields)


def _apply(edit: Edit, checkpoint: Path, layout: ProducerLayout, fields: dict[str, str]) -> str | None:
    """Make one edit (:mod:`scalar_scales.doctor.examples` says what each is); return the tensor it names."""
    match edit:
        case Remove(tensor):
            return _remove(checkpoint, tensor.format(**fields))
        case RemoveEvery(leaf):
            _remove_every(checkpoint, "." + leaf.format(**fields))
        case SetValue(tensor, value):
            name = tensor.format(**fields)
            _set_values(checkpoint, lambda each, _: value if each == name else None)
            return name
        case MultiplyValue(tensor, factor):
            name = tensor.format(**fields)
            _set_values(checkpoint, lambda each, old: factor * old if each == name else None)
            return name
        case ScaleAmax(tensor, factor):
            name = tensor.format(**fields)
            times = 1.0 / factor if layout.divisor else factor
            _set_values(checkpoint, lambda each, old: times * old if each == name else None)
            return name
        case SetDtype(tensor, dtype):
            name = tensor.format(**fields)
            rewrite_header(shard_of(checkpoint, name), lambda header: header[name].update(dtype=dtype))
            return name
        case HalveGroups(tensor):
            return _halve_groups(checkpoint, tensor.format(**fields))
        case IndexAdds(tensor, beside):
            name, shard = tensor.format(**fields), shard_of(checkpoint, beside.format(**fields)).name
            _edit_index(checkpoint, lambda weight_map: weight_map.update({name: shard}))
            return name
        case IndexDrops(tensor):
            name = tensor.format(**fields)
            _edit_index(checkpoint, lambda weight_map: weight_map.pop(name))
            return name
        case Unquantize(modules):
            return _unquantize(checkpoint, layout, modules)
        case InvertScales():
            _set_values(checkpoint, lambda each, old: 1.0 / old if each.endswith(layout.scale_suffixes) else None)
        case AddScales(tensors, value, beside):
            _add_scales(checkpoint, tensors, value, shard_of(checkpoint, beside.format(**fields)))
        case LegacyShapes():
            _legacy_shapes(checkpoint, layout)
        case Declare(key, value):
            _edit_declaration(checkpoint, lambda q: q.update({key: value}))
        case DeclareElsewhere(key, value):
            path = checkpoint / MODELOPT_CONFIG_NAME
            modelopt = json.loads(path.read_text())
            modelopt["quantization"][key] = value
            path.write_text(json.dumps(modelopt, indent=4))
        case Undeclare(key):
            _edit_declaration(checkpoint, lambda q: q.pop(key))
        case DropDeclaration():
            _drop_declaration(checkpoint)
        case IgnoreLayer(layer):
            entry = (
                rf"re:model\.layers\.{layer}\..*" if layout is COMPRESSED_TENSORS_LAYOUT else f"model.layers.{layer}.*"
            )
            key = _ignore_key(checkpoint)
            _edit_declaration(checkpoint, lambda q: q.update({key: [*q.get(key, []), entry]}))
        case TargetOnlyLayer(layer):
            _target_only_layer(checkpoint, layout, layer)
        case WeightOnly():
            _edit_declaration(
                checkpoint, lambda q: [group.update(input_activations=None) for group in q["config_groups"].values()]
            )
        case DeclareKVCache():
            if layout is COMPRESSED_TENSORS_LAYOUT:
                scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
                _edit_declaration(checkpoint, lambda q: q.update(kv_cache_scheme=scheme))
            else:
                _edit_declaration(checkpoint, lambda q: q.update(kv_cache_quant_algo="FP8"))
        case DeclareGroupSize(size):
            _edit_declaration(checkpoint, partial(_declare_group_size, layout, size))
        case DeclareWeights(key, value):
            _edit_declaration(
                checkpoint, lambda q: [group["weights"].update({key: value}) for group in q["config_groups"].values()]
            )
        case Unexclude(suffix):
            _unexclude(checkpoint, suffix)
        case _:
            assert_never(edit)
    return None


def _unexclude(checkpoint: Path, suffix: str) -> None:
    """Drop the exclusions that name a module ending with ``suffix`` (a wildcard's, or a ``re:``'s, text as
    written), from config.json's ``ignore`` and hf_quant_config.json's ``exclude_modules`` alike."""
    for path, section, key in (
        (checkpoint / CONFIG_NAME, "quantization_config", "ignore"),
        (checkpoint / MODELOPT_CONFIG_NAME, "quantization", "exclude_modules"),
    ):
        if path.exists():
            config = json.loads(path.read_text())
            declared = config.get(section)
            if isinstance(declared, dict) and isinstance(declared.get(key), list):
                declared[key] = [entry for entry in declared[key] if not entry.endswith(suffix)]
                path.write_text(json.dumps(config, indent=2))


def _declare_group_size(layout: ProducerLayout, size: int, declaration: dict[str, Any]) -> None:
    if layout is not COMPRESSED_TENSORS_LAYOUT:
        declaration["group_size"] = size
        return
    for group in declaration["config_groups"].values():
        for args in ("weights", "input_activations"):
            if group.get(args):
                group[args]["group_size"] = size


def _legacy_shapes(checkpoint: Path, layout: ProducerLayout) -> None:
    if layout is COMPRESSED_TENSORS_LAYOUT:
        migrate_checkpoint(checkpoint, to="legacy")
        return

    def reshape(header: dict[str, Any]) -> None:
        for name, entry in header.items():
            if name.endswith(layout.scale_suffixes):
                entry["shape"] = [1]

    for shard in _shards(checkpoint):
        rewrite_header(shard, reshape)


def _halve_groups(checkpoint: Path, tensor: str) -> str:
    def change(tensors: Tensors) -> None:
        rows, groups = tensors[tensor]["shape"]
        tensors[tensor]["shape"] = [rows, groups // 2]
        tensors[tensor]["data"] = tensors[tensor]["data"][: rows * (groups // 2)]

    rewrite_shard(shard_of(checkpoint, tensor), change)
    return tensor


def _target_only_layer(checkpoint: Path, layout: ProducerLayout, layer: int) -> None:
    """compressed-tensors' groups target the layer alone; ModelOpt's MIXED_PRECISION lists its modules and those
    outside the layers (embeddings, the head) alone."""
    if layout is COMPRESSED_TENSORS_LAYOUT:
        targets = [rf"re:model\.layers\.{layer}\..*"]
        _edit_declaration(
            checkpoint, lambda q: [group.update(targets=targets) for group in q["config_groups"].values()]
        )
        return
    suffix = f".{layout.weight}"
    modules = [
        name[: -len(suffix)]
        for shard in _shards(checkpoint)
        for name in _names(shard)
        if name.endswith(suffix) and (not name.startswith("model.layers.") or name.startswith(f"model.layers.{layer}."))
    ]
    recipe = {"quant_algo": "NVFP4", "group_size": 16}

    def mixed(q: dict[str, Any]) -> None:
        q.update(quant_algo="MIXED_PRECISION", quantized_layers=dict.fromkeys(modules, recipe))

    _edit_declaration(checkpoint, mixed)


def _names(shard: Path) -> list[str]:
    return read_headers(shard)[0].names


def _unquantize(checkpoint: Path, layout: ProducerLayout, modules: tuple[str, ...]) -> str:
    names = {name for shard in _shards(checkpoint) for name in _names(shard)}
    target = next((module for module in modules if f"{module}.{layout.weight}" in names), modules[-1])
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


def _add_scales(checkpoint: Path, names: tuple[str, ...], value: float, shard: Path) -> None:
    def add(tensors: Tensors) -> None:
        for name in names:
            tensors[name] = {"dtype": "F32", "shape": [], "data": struct.pack("<f", value)}

    rewrite_shard(shard, add)
    if (checkpoint / INDEX_NAME).exists():
        _edit_index(checkpoint, lambda weight_map: weight_map.update(dict.fromkeys(names, shard.name)))


def _drop_declaration(checkpoint: Path) -> None:
    if (checkpoint / MODELOPT_CONFIG_NAME).exists():
        (checkpoint / MODELOPT_CONFIG_NAME).unlink()
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    config.pop("quantization_config", None)
    (checkpoint / CONFIG_NAME).write_text(json.dumps(config, indent=2))


class BrokenCase(NamedTuple):
    """One case of the corpus: a rule's example (:class:`~scalar_scales.doctor.examples.Example`), made by
    ``make(checkpoint, layout, module=EXPERT)``, which returns the tensor the finding names (None: the config)."""

    code: str
    make: Break
    alongside: tuple[str, ...] = ()
    """Codes the same break necessarily brings too (NV102's (1,) scales are each NV101)."""
    per_module: bool = False
    """The break changes one module (``module``); the others change the checkpoint as a whole."""
    edits_declaration: bool = False
    """The break changes the quantization declaration (a tool that writes its own, as a converter does, undoes
    it)."""


_DECLARATION_EDITS = (
    Declare,
    DeclareElsewhere,
    Undeclare,
    DropDeclaration,
    IgnoreLayer,
    TargetOnlyLayer,
    WeightOnly,
    DeclareKVCache,
    DeclareGroupSize,
    DeclareWeights,
    Unexclude,
)


def _case(code: str, example: Example) -> BrokenCase:
    edits_declaration = any(isinstance(edit, _DECLARATION_EDITS) for edit in example.edits)
    return BrokenCase(code, partial(make_example, example), example.alongside, example.per_module, edits_declaration)


def _corpus(layout: ProducerLayout) -> dict[str, BrokenCase]:
    """Every example of every rule about ``layout``, by its name, in code order."""
    return {
        example.name: _case(rule.code, example)
        for rule in RULES.values()
        if rule.is_about(layout)
        for example in rule.examples
    }


CORPUS: dict[str, BrokenCase] = _corpus(COMPRESSED_TENSORS_LAYOUT)
"""compressed-tensors: each checkpoint is reported by its own rule, naming the tensor, and check changes nothing."""

MODELOPT_CORPUS: dict[str, BrokenCase] = _corpus(MODELOPT_LAYOUT)
"""ModelOpt: the same, for every rule about ModelOpt's layout (not the marker's, compressed-tensors' own, nor NV604:
vLLM's ModelOpt weight-only methods take an input scale and drop it)."""
