"""Write a synthetic NVFP4 MoE checkpoint shaped like DeepSeek-V4-Flash, without torch.

43 layers x 256 experts x 3 projections, each with ``weight_packed`` (U8),
``weight_scale`` (F8_E4M3), ``weight_global_scale`` and
``input_global_scale`` (F32, shape (1,) as llm-compressor writes them):
66,048 global scales, sharded over 46 files with an index and a
``config.json`` that says ``nvfp4-pack-quantized``. The data size is a
parameter; the packed weights grow with it, the headers do not. Headers are
compact JSON padded with spaces to 8 bytes, as the reference writer makes
them. Used by the benchmarks and the command-line tests.
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

from scalar_scales.sources import CONFIG_NAME, INDEX_NAME

__all__ = ["V4_FLASH", "nvfp4_checkpoint_config", "write_synthetic_checkpoint"]

V4_FLASH = {"layers": 43, "experts": 256, "shards": 46}
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
FUSED = ("gate_proj", "up_proj")
GROUP = 16


def write_synthetic_checkpoint(
    directory: str | os.PathLike[str],
    *,
    data_bytes: int,
    layers: int = V4_FLASH["layers"],
    experts: int = V4_FLASH["experts"],
    shards: int = V4_FLASH["shards"],
    seed: int = 0,
    sparse: bool = False,
) -> Path:
    """Write the checkpoint into ``directory`` (created) and return it.

    ``sparse``: leave the packed weights and group scales as holes (zeros
    that take no disk space), for checks that read only headers and scales.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    projections = [
        f"model.layers.{layer}.mlp.experts.{expert}.{projection}"
        for layer in range(layers)
        for expert in range(experts)
        for projection in PROJECTIONS
    ]
    rows, packed_cols = _packed_shape(data_bytes, len(projections))
    rng = random.Random(seed)
    per_shard = -(-len(projections) // shards)
    weight_map: dict[str, str] = {}
    expert_scales: dict[str, tuple[float, float]] = {}
    total = 0
    for index in range(shards):
        members = projections[index * per_shard : (index + 1) * per_shard]
        if not members:
            break
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        size, tensors = _write_shard(directory / name, members, rows, packed_cols, rng, expert_scales, sparse)
        total += size
        weight_map.update(dict.fromkeys(tensors, name))
    (directory / INDEX_NAME).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    (directory / CONFIG_NAME).write_text(json.dumps(nvfp4_checkpoint_config(), indent=2, sort_keys=True))
    return directory


def _packed_shape(data_bytes: int, count: int) -> tuple[int, int]:
    """Rows and packed columns per projection so that the checkpoint holds about ``data_bytes``."""
    packed_cols = 64  # 128 FP4 values per row, 8 FP8 group scales
    per_projection = max(data_bytes // count, packed_cols + packed_cols // 8)
    return max(1, per_projection // (packed_cols + packed_cols // 8)), packed_cols


def _write_shard(
    path: Path,
    members: list[str],
    rows: int,
    packed_cols: int,
    rng: random.Random,
    expert_scales: dict[str, tuple[float, float]],
    sparse: bool,
) -> tuple[int, list[str]]:
    """Write one shard; return its data size and the names of its tensors."""
    entries: dict[str, dict[str, object]] = {}
    offset = 0
    scale_values: list[float] = []

    def add(name: str, dtype: str, shape: list[int], size: int) -> None:
        nonlocal offset
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size

    # The reference writer orders by dtype alignment first, so the F32 scales lead. As llm-compressor writes
    # them, an expert's gate and up projections share their weight global scale (vLLM fuses them) and, seeing
    # the same input, their input global scale.
    for member in members:
        expert, _, projection = member.rpartition(".")
        fresh = (rng.uniform(100.0, 50000.0), rng.uniform(100.0, 50000.0))
        shared = expert_scales.setdefault(expert, fresh) if projection in FUSED else fresh
        for suffix, value in zip(("input_global_scale", "weight_global_scale"), shared, strict=True):
            add(f"{member}.{suffix}", "F32", [1], 4)
            scale_values.append(value)
    for member in members:
        add(f"{member}.weight_packed", "U8", [rows, packed_cols], rows * packed_cols)
        add(f"{member}.weight_scale", "F8_E4M3", [rows, packed_cols * 2 // GROUP], rows * packed_cols * 2 // GROUP)
    header = json.dumps({"__metadata__": {"format": "pt"}, **entries}, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    block = rng.randbytes(1 << 20)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.write(struct.pack(f"<{len(scale_values)}f", *scale_values))
        remaining = offset - 4 * len(scale_values)
        if sparse:
            f.truncate(f.tell() + remaining)
            remaining = 0
        while remaining > 0:
            chunk = block[: min(len(block), remaining)]
            f.write(chunk)
            remaining -= len(chunk)
    return offset, list(entries)


def nvfp4_checkpoint_config() -> dict[str, object]:
    """A ``config.json`` with the ``quantization_config`` llm-compressor writes for NVFP4 (W4A4)."""
    weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": GROUP, "symmetric": True}
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": weights,
                    "input_activations": {**weights, "dynamic": False},
                    "format": "nvfp4-pack-quantized",
                }
            },
            "ignore": ["lm_head"],
            "version": "0.19.0",
        },
    }
