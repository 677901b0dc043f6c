"""Artifacts read through the product's own torch-free header reader: layouts, markers and raw tensor bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scalar_scales.files import TensorEntry
from scalar_scales.nvfp4 import is_global_scale
from scalar_scales.sources import read_headers

__all__ = ["described", "global_scale_shapes", "quantization_config", "tensor_bytes", "tensor_entries"]


def tensor_entries(checkpoint: Path) -> dict[str, TensorEntry]:
    return {name: entry for header in read_headers(checkpoint) for name, entry in header.tensors.items()}


def tensor_bytes(checkpoint: Path) -> dict[str, bytes]:
    """Every tensor's raw data bytes, by name: for comparing artifacts exactly."""
    out: dict[str, bytes] = {}
    for header in read_headers(checkpoint):
        data = header.path.read_bytes()[header.data_start :]
        out.update({name: data[e.begin : e.end] for name, e in header.tensors.items()})
    return out


def described(checkpoint: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor's dtype and shape, as the headers say: what two checkpoints must share to be the same."""
    return {name: (e.dtype, e.shape) for name, e in tensor_entries(checkpoint).items()}


def global_scale_shapes(checkpoint: Path) -> set[tuple[int, ...]]:
    return {e.shape for name, e in tensor_entries(checkpoint).items() if is_global_scale(name)}


def quantization_config(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "config.json").read_text())["quantization_config"]
