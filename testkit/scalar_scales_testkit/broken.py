"""A corpus of broken NVFP4 checkpoints: one per rule of ``scalar-scales check``, each broken the way it happens.

Every case starts from a clean checkpoint (the small synthetic one,
migrated: 0-D scales, format_version 2) and changes one thing, keeping the
files valid safetensors: the reference reader accepts every shard. The
``break_*`` functions return the tensor the finding must name (None for
the config).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from scalar_scales.migrate import migrate_checkpoint
from scalar_scales.sources import CONFIG_NAME, INDEX_NAME
from scalar_scales_testkit.cli import make_checkpoint, rewrite_header

__all__ = ["CORPUS", "BrokenCase", "clean_checkpoint", "rewrite_shard", "shard_of"]

Tensors = dict[str, dict[str, Any]]
"""A shard's tensors, in file order: name -> {"dtype", "shape", "data"}."""


def clean_checkpoint(directory: Path) -> Path:
    """The small synthetic checkpoint, migrated to 0-D scales and format_version 2: no rule finds anything."""
    checkpoint = make_checkpoint(directory)
    migrate_checkpoint(checkpoint)
    return checkpoint


def shard_of(checkpoint: Path, tensor: str) -> Path:
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


def _remove(checkpoint: Path, tensor: str) -> str:
    rewrite_shard(shard_of(checkpoint, tensor), lambda tensors: tensors.pop(tensor))
    return _unlist(checkpoint, tensor)


def _unlist(checkpoint: Path, tensor: str) -> str:
    """Take ``tensor`` out of the index's ``weight_map``."""
    index_path = checkpoint / INDEX_NAME
    index = json.loads(index_path.read_text())
    del index["weight_map"][tensor]
    index_path.write_text(json.dumps(index, indent=2))
    return tensor


def _set_values(checkpoint: Path, value_of: Callable[[str, float], float | None]) -> None:
    """Set each F32 scale to ``value_of(name, value)`` where that is not None."""

    def change(tensors: Tensors) -> None:
        for name, tensor in tensors.items():
            if tensor["dtype"] == "F32" and len(tensor["data"]) == 4:
                new = value_of(name, struct.unpack("<f", tensor["data"])[0])
                if new is not None:
                    tensor["data"] = struct.pack("<f", new)

    for shard in sorted(checkpoint.glob("*.safetensors")):
        rewrite_shard(shard, change)


def _edit_entry(checkpoint: Path, tensor: str, **fields: Any) -> str:
    rewrite_header(shard_of(checkpoint, tensor), lambda header: header[tensor].update(fields))
    return tensor


EXPERT = "model.layers.1.mlp.experts.2"


def break_legacy_scales(checkpoint: Path) -> str:
    """As llm-compressor writes NVFP4 today: every global scale (1,), no marker."""
    migrate_checkpoint(checkpoint, to="legacy")
    return f"{EXPERT}.down_proj.weight_global_scale"


def break_marker(checkpoint: Path) -> None:
    """0-D scales, but the config lost its format_version (re-saved by a tool that rewrites config.json)."""
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    del config["quantization_config"]["format_version"]
    (checkpoint / CONFIG_NAME).write_text(json.dumps(config, indent=2))
    return None


def break_missing_weight_global_scale(checkpoint: Path) -> str:
    return _remove(checkpoint, f"{EXPERT}.down_proj.weight_global_scale")


def break_missing_input_global_scale(checkpoint: Path) -> str:
    return _remove(checkpoint, f"{EXPERT}.down_proj.input_global_scale")


def break_uncalibrated_expert(checkpoint: Path) -> str:
    """An expert calibration never routed a token to: its input scale is 0."""
    tensor = f"{EXPERT}.down_proj.input_global_scale"
    _set_values(checkpoint, lambda name, value: 0.0 if name == tensor else None)
    return tensor


def break_reciprocal_convention(checkpoint: Path) -> str:
    """Every global scale written ModelOpt's way, amax/(6*448): the reciprocal of compressed-tensors' value."""
    _set_values(checkpoint, lambda name, value: 1.0 / value)
    return f"{EXPERT}.down_proj.weight_global_scale"


def break_fused_partners(checkpoint: Path) -> str:
    """An expert's up projection calibrated apart from its gate projection."""
    tensor = f"{EXPERT}.up_proj.weight_global_scale"
    _set_values(checkpoint, lambda name, value: 2.0 * value if name == tensor else None)
    return tensor


def break_weight_scale_shape(checkpoint: Path) -> str:
    """Group scales for groups of 32 where the config says 16, as a packer with the wrong group size writes them."""
    tensor = f"{EXPERT}.gate_proj.weight_scale"

    def change(tensors: Tensors) -> None:
        rows, groups = tensors[tensor]["shape"]
        tensors[tensor]["shape"] = [rows, groups // 2]
        tensors[tensor]["data"] = tensors[tensor]["data"][: rows * (groups // 2)]

    rewrite_shard(shard_of(checkpoint, tensor), change)
    return tensor


def break_dtype(checkpoint: Path) -> str:
    """Group scales labelled with the other FP8 format."""
    return _edit_entry(checkpoint, f"{EXPERT}.gate_proj.weight_scale", dtype="F8_E5M2")


def break_index(checkpoint: Path) -> str:
    """A tensor the index forgot: a loader that follows the index never loads it."""
    return _unlist(checkpoint, f"{EXPERT}.up_proj.weight_packed")


class BrokenCase(NamedTuple):
    code: str
    make: Callable[[Path], str | None]


CORPUS: dict[str, BrokenCase] = {
    "legacy-scales": BrokenCase("NV101", break_legacy_scales),
    "marker-lost": BrokenCase("NV102", break_marker),
    "no-weight-global-scale": BrokenCase("NV201", break_missing_weight_global_scale),
    "no-input-global-scale": BrokenCase("NV202", break_missing_input_global_scale),
    "uncalibrated-expert": BrokenCase("NV301", break_uncalibrated_expert),
    "reciprocal-convention": BrokenCase("NV302", break_reciprocal_convention),
    "fused-partners-differ": BrokenCase("NV303", break_fused_partners),
    "weight-scale-groups-of-32": BrokenCase("NV401", break_weight_scale_shape),
    "weight-scale-e5m2": BrokenCase("NV402", break_dtype),
    "index-forgot-a-tensor": BrokenCase("NV501", break_index),
}
