"""Shards on this machine: a folder, or one ``.safetensors`` file; headers read from the file, values from its
mapping."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, read_header
from scalar_scales.files.json_document import read_json_object
from scalar_scales.files.scalars import decode_scalar
from scalar_scales.sources.checkpoint import CONFIG_NAME, INDEX_NAME, OpenedCheckpoint, shard_names

__all__ = [
    "LOCAL_SHARDS",
    "Checkpoint",
    "LocalShards",
    "open_local",
    "read_config",
    "read_headers",
    "resolve_checkpoint",
]


@dataclass(frozen=True)
class Checkpoint:
    """What a user pointed at: its shards, the folder that holds them, and its index and config when it has them.

    ``folder`` is the real path of that folder, however the user spelled the
    path (a file in it, the folder, a link): one checkpoint, one lock.
    """

    root: Path
    folder: Path
    files: tuple[Path, ...]
    config: Path | None
    weight_map: dict[str, str] | None = None


def resolve_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """A folder (index or single ``model.safetensors``) or a single ``.safetensors`` file."""
    root = Path(path)
    if root.is_file():
        if root.suffix != ".safetensors":
            raise CheckpointError(root, "not a .safetensors file")
        return Checkpoint(root, Path(os.path.realpath(root.parent)), (root,), None)
    if not root.is_dir():
        raise CheckpointError(root, "no such file or folder")
    names, weight_map = shard_names(
        lambda name: (root / name).is_file(), lambda: read_json_object(root / INDEX_NAME), root, lambda n: str(root / n)
    )
    config = root / CONFIG_NAME if (root / CONFIG_NAME).is_file() else None
    return Checkpoint(root, Path(os.path.realpath(root)), tuple(root / name for name in names), config, weight_map)


def open_local(path: str | os.PathLike[str] | Checkpoint) -> OpenedCheckpoint:
    """The checkpoint at ``path`` (or already resolved), its parsed ``config.json``, and the reader of its files."""
    checkpoint = path if isinstance(path, Checkpoint) else resolve_checkpoint(path)
    config = read_json_object(checkpoint.config) if checkpoint.config else None
    return OpenedCheckpoint(checkpoint, config, LOCAL_SHARDS)


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``config.json`` of the checkpoint folder, parsed; None where there is none."""
    config = Path(folder) / CONFIG_NAME
    return read_json_object(config) if config.is_file() else None


def read_headers(path: str | os.PathLike[str]) -> list[SafetensorsHeader]:
    """The validated header of every shard of the checkpoint at ``path``."""
    return [read_header(shard) for shard in resolve_checkpoint(path).files]


class LocalShards:
    """Shards on this machine: headers read from the file, values from its mapping."""

    network = False
    read_header = staticmethod(read_header)

    @staticmethod
    def read_values(header: SafetensorsHeader, indices: list[int]) -> list[float | None]:
        if not indices:
            return []
        with open(header.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            base = header.data_start
            return [decode_scalar(header.dtypes[i], data, base + header.begins[i]) for i in indices]


LOCAL_SHARDS = LocalShards()
