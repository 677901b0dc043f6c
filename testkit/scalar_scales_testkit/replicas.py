"""Tiny checkpoints written to a reported checkpoint's header layout: the tensor names, dtypes and shapes of its
modules, and its config.json / hf_quant_config.json declarations, with a few modules of a few rows each.

A :class:`Replica` is data (shards of :class:`Tensor`, the declarations); :func:`write_replica` writes it as real
safetensors files (the reference reader's layout: a JSON header padded to 8 bytes, then the data, tensors ordered
by dtype size, then name). The module helpers say what each producer writes for one NVFP4 module:
:func:`ct_module` compressed-tensors' (``weight_packed``, ``weight_scale``, ``weight_global_scale``,
``input_global_scale``, divisors), :func:`modelopt_module` ModelOpt's (``weight``, ``weight_scale``,
``weight_scale_2``, ``input_scale``, 0-D multipliers). compressed-tensors replicas are written as ``scalar-scales
migrate`` leaves them (0-D global scales, ``format_version`` 2), as the broken corpus is, so that a replica's
findings are its thread's defect's and not NV101's (which every llm-compressor checkpoint has).
"""

from __future__ import annotations

import copy
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalar_scales.sources import CONFIG_NAME, INDEX_NAME, MODELOPT_CONFIG_NAME

__all__ = [
    "Replica",
    "Tensor",
    "bf16",
    "ct_config",
    "ct_module",
    "modelopt_config",
    "modelopt_module",
    "write_replica",
]

_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1}
GROUP = 16


@dataclass
class Tensor:
    """One tensor: its name, dtype and shape; a one-value F32 tensor holds ``value``, any other holds zeros."""

    name: str
    dtype: str
    shape: list[int]
    value: float | None = None

    def data(self) -> bytes:
        if self.value is not None:
            return struct.pack("<f", self.value)
        return bytes(_SIZES[self.dtype] * math.prod(self.shape))


@dataclass
class Replica:
    """A checkpoint as data: its shards (file name -> tensors), config.json, and hf_quant_config.json where the
    producer writes one. ``index`` writes model.safetensors.index.json (always, where there are several shards)."""

    shards: dict[str, list[Tensor]]
    config: dict[str, Any] | None
    """config.json; None for a checkpoint shipped as a lone file."""
    modelopt: dict[str, Any] | None = None
    index: bool = False
    target: str | None = None
    """What a user points ``check`` at, inside the folder: None for the folder, else a file's name."""

    def copy(self) -> Replica:
        return copy.deepcopy(self)

    def tensor(self, name: str) -> Tensor:
        return next(t for tensors in self.shards.values() for t in tensors if t.name == name)

    def remove(self, name: str) -> None:
        for tensors in self.shards.values():
            tensors[:] = [t for t in tensors if t.name != name]

    def add(self, *tensors: Tensor, shard: str | None = None) -> None:
        self.shards[shard or next(iter(self.shards))].extend(tensors)

    def set_value(self, name: str, value: float) -> None:
        self.tensor(name).value = value


def write_replica(replica: Replica, directory: Path) -> Path:
    """Write ``replica`` into ``directory`` (created); return what a user points ``check`` at."""
    directory.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    for name, tensors in replica.shards.items():
        total += _write_shard(directory / name, tensors)
        weight_map.update(dict.fromkeys((t.name for t in tensors), name))
    if replica.index or len(replica.shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (directory / INDEX_NAME).write_text(json.dumps(index, indent=2))
    if replica.config is not None:
        (directory / CONFIG_NAME).write_text(json.dumps(replica.config, indent=2))
    if replica.modelopt is not None:
        (directory / MODELOPT_CONFIG_NAME).write_text(json.dumps(replica.modelopt, indent=2))
    return directory if replica.target is None else directory / replica.target


def _write_shard(path: Path, tensors: list[Tensor]) -> int:
    ordered = sorted(tensors, key=lambda t: (-_SIZES[t.dtype], t.name))
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for tensor in ordered:
        size = len(tensor.data())
        entries[tensor.name] = {"dtype": tensor.dtype, "shape": tensor.shape, "data_offsets": [offset, offset + size]}
        offset += size
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"".join(t.data() for t in ordered))
    return offset


def _nvfp4(prefix: str, weight: str, rows: int, columns: int) -> list[Tensor]:
    return [
        Tensor(f"{prefix}.{weight}", "U8", [rows, columns // 2]),
        Tensor(f"{prefix}.weight_scale", "F8_E4M3", [rows, columns // GROUP]),
    ]


def ct_module(
    prefix: str, *, weight: float = 2688.0, activation: float | None = 448.0, rows: int = 32, columns: int = 64
) -> list[Tensor]:
    """One compressed-tensors NVFP4 module: packed weight, group scales and 0-D global scales (divisors); no
    input global scale where ``activation`` is None (NVFP4A16)."""
    tensors = [
        *_nvfp4(prefix, "weight_packed", rows, columns),
        Tensor(f"{prefix}.weight_global_scale", "F32", [], weight),
    ]
    if activation is not None:
        tensors.append(Tensor(f"{prefix}.input_global_scale", "F32", [], activation))
    return tensors


def modelopt_module(
    prefix: str, *, weight: float = 1 / 2688, activation: float | None = 1 / 448, rows: int = 32, columns: int = 64
) -> list[Tensor]:
    """One ModelOpt NVFP4 module: packed weight, group scales, 0-D ``weight_scale_2`` and ``input_scale``
    (multipliers); no input scale where ``activation`` is None (W4A16_NVFP4)."""
    tensors = [*_nvfp4(prefix, "weight", rows, columns), Tensor(f"{prefix}.weight_scale_2", "F32", [], weight)]
    if activation is not None:
        tensors.append(Tensor(f"{prefix}.input_scale", "F32", [], activation))
    return tensors


def bf16(name: str, *shape: int) -> Tensor:
    return Tensor(name, "BF16", list(shape))


def ct_config(
    architecture: str,
    *,
    activations: bool = True,
    ignore: tuple[str, ...] = ("lm_head",),
    targets: tuple[str, ...] = ("Linear",),
    kv_cache: bool = False,
    **model: Any,
) -> dict[str, Any]:
    """config.json with the ``quantization_config`` llm-compressor writes for NVFP4 (``activations``) or
    NVFP4A16, migrated (``format_version`` 2); ``kv_cache`` adds an FP8 ``kv_cache_scheme``."""
    weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": GROUP, "symmetric": True}
    group: dict[str, Any] = {
        "targets": list(targets),
        "weights": {**weights, "dynamic": False},
        "input_activations": {**weights, "dynamic": "local"} if activations else None,
        "format": "nvfp4-pack-quantized",
    }
    quantization: dict[str, Any] = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": group},
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "version": "0.19.0",
        "format_version": 2,
    }
    if kv_cache:
        quantization["kv_cache_scheme"] = {
            "num_bits": 8,
            "type": "float",
            "strategy": "tensor",
            "dynamic": False,
            "symmetric": True,
        }
    return {"architectures": [architecture], **model, "quantization_config": quantization}


def modelopt_config(
    quant_algo: str = "NVFP4",
    *,
    exclude_modules: tuple[str, ...] = ("lm_head",),
    kv_cache_quant_algo: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """hf_quant_config.json as ModelOpt's exporter writes it."""
    return {
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quantization": {
            "quant_algo": quant_algo,
            "kv_cache_quant_algo": kv_cache_quant_algo,
            "group_size": GROUP,
            "exclude_modules": list(exclude_modules),
            **extra,
        },
    }
