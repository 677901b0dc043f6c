"""A diffusers transformer folder quantized to NVFP4 in compressed-tensors' names, as auto-round exports Wan 2.2.

A diffusers pipeline saves each model in a folder of its own (``transformer/``,
``transformer_2/``) with diffusers' file names, ``diffusion_pytorch_model*.safetensors``
and ``diffusion_pytorch_model.safetensors.index.json``, and a ``config.json``
that names the model's ``_class_name`` instead of ``architectures`` and holds
its ``quantization_config`` at the top, where transformers' does. Each block of
a Wan transformer has a self-attention ``attn1`` and a cross-attention
``attn2``, each with ``to_q``, ``to_k`` and ``to_v`` (diffusers'
``WanTransformerBlock``). The folder is the small synthetic checkpoint,
migrated, its experts' projections renamed to those, its files renamed to
diffusers' names: real safetensors files that the reference reader accepts.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

from scalar_scales.migration import migrate_checkpoint
from scalar_scales.sources import (
    CONFIG_NAME,
    DIFFUSERS_INDEX_NAME,
    DIFFUSERS_SINGLE_FILE_NAME,
    INDEX_NAME,
)
from scalar_scales_testkit.broken import Tensors, rewrite_shard
from scalar_scales_testkit.cli import make_checkpoint, shards

__all__ = ["WAN_CLASS", "WEIGHT_GLOBAL", "wan_transformer"]

WAN_CLASS = "WanTransformer3DModel"
WEIGHT_GLOBAL = 1000.0
"""Every weight global scale of the folder, unless the caller sets another: fused partners agree."""
INPUT_GLOBAL = 84.3294
"""Every input global scale: auto-round #2380 found them equal within each Q/K/V group."""

_RENAMES = {
    "mlp.experts.0.gate_proj": "attn1.to_q",
    "mlp.experts.0.up_proj": "attn1.to_k",
    "mlp.experts.0.down_proj": "attn1.to_v",
    "mlp.experts.1.gate_proj": "attn2.to_q",
    "mlp.experts.1.up_proj": "attn2.to_k",
    "mlp.experts.1.down_proj": "attn2.to_v",
}
"""Each synthetic layer's experts' projections, as a Wan block's attentions name them."""


def wan_transformer(directory: Path, *, weight_global: Mapping[str, float] = {}, sharded: bool = True) -> Path:
    """Write the folder into ``directory``: 2 blocks (``blocks.0``, ``blocks.1``), each module's weight global
    scale :data:`WEIGHT_GLOBAL` or ``weight_global[module]`` (``blocks.0.attn1.to_k``), 0-D under format_version 2.
    ``sharded``: two shards and the index; otherwise one ``diffusion_pytorch_model.safetensors``."""
    checkpoint = make_checkpoint(directory, shards=2 if sharded else 1, experts=2, layers=2)
    migrate_checkpoint(checkpoint)
    weight_map: dict[str, str] = {}
    files = shards(checkpoint)
    for number, shard in enumerate(files, 1):
        name = (
            f"diffusion_pytorch_model-{number:05d}-of-{len(files):05d}.safetensors"
            if sharded
            else DIFFUSERS_SINGLE_FILE_NAME
        )

        def renamed(tensors: Tensors) -> None:
            for tensor in list(tensors):
                entry = tensors.pop(tensor)
                module, _, leaf = _wan_name(tensor).rpartition(".")
                if leaf == "weight_global_scale":
                    entry["data"] = struct.pack("<f", weight_global.get(module, WEIGHT_GLOBAL))
                elif leaf == "input_global_scale":
                    entry["data"] = struct.pack("<f", INPUT_GLOBAL)
                tensors[f"{module}.{leaf}"] = entry

        rewrite_shard(shard, renamed)
        shard.rename(checkpoint / name)
        weight_map.update((tensor, name) for tensor in _names(checkpoint / name))
    (checkpoint / INDEX_NAME).unlink()
    if sharded:
        (checkpoint / DIFFUSERS_INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((checkpoint / CONFIG_NAME).read_text())
    (checkpoint / CONFIG_NAME).write_text(
        json.dumps(
            {
                "_class_name": WAN_CLASS,
                "_diffusers_version": "0.35.1",
                "num_layers": 2,
                "quantization_config": config["quantization_config"],
            },
            indent=2,
        )
    )
    return checkpoint


def _wan_name(tensor: str) -> str:
    for old, new in _RENAMES.items():
        tensor = tensor.replace(f".{old}.", f".{new}.")
    return tensor.replace("model.layers.", "blocks.")


def _names(shard: Path) -> list[str]:
    raw = shard.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return [name for name in json.loads(raw[8 : 8 + length]) if name != "__metadata__"]
