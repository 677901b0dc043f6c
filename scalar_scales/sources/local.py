"""Shards on this machine: a folder, or one ``.safetensors`` file; headers read from the file, values from its
mapping."""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, read_header
from scalar_scales.files.json_document import read_json_object
from scalar_scales.files.scalars import decode_scalars
from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    SINGLE_FILE_NAME,
    UNIQUE_KEYS,
    OpenedCheckpoint,
    shard_names,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME

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

    A folder with an index has the shards its index names: the index is
    read, and checked, when ``files`` or ``weight_map`` is first asked for,
    so that a scan can start on ``likely_files`` (the folder's ``.safetensors``
    files, nearly always the same) while the index, which names every
    tensor of a large MoE, is parsed.
    """

    root: Path
    folder: Path
    likely_files: tuple[Path, ...]
    config: Path | None
    index: Path | None = None
    modelopt_config: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        return self._shards[0]

    @property
    def weight_map(self) -> dict[str, str] | None:
        """The index's tensor -> shard file name map, parsed and checked; None without an index."""
        return self._shards[1]

    @cached_property
    def _shards(self) -> tuple[tuple[Path, ...], dict[str, str] | None]:
        index = self.index
        if index is None:
            return self.likely_files, None
        root = self.root
        names, weight_map = shard_names(
            lambda name: _kind(root / name) != "missing",
            lambda: read_json_object(_regular(index)),
            root,
            lambda n: str(root / n),
        )
        return tuple(_regular(root / name) for name in names), weight_map


def resolve_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """A folder (index or single ``model.safetensors``) or a single ``.safetensors`` file.

    Every file it names must be a regular file (or a link to one): a
    dangling link, a folder or a FIFO where a shard, the index or
    ``config.json`` should be is refused, naming it, and never opened (a FIFO
    would block the read). The index's own checks come when its shards are
    first asked for (:attr:`Checkpoint.files`).
    """
    if not os.fspath(path):
        raise CheckpointError('""', "no checkpoint named: give a folder, a .safetensors file or hf://ORG/NAME")
    root = Path(path)
    kind = _kind(root)
    if kind == "a file":
        if root.suffix != ".safetensors":
            raise CheckpointError(root, "not a .safetensors file")
        return Checkpoint(root, Path(os.path.realpath(root.parent)), (root,), None)
    if kind == "missing":
        raise CheckpointError(root, "no such file or folder")
    if kind != "a folder":
        raise CheckpointError(root, f"is {kind}, not a checkpoint folder or a .safetensors file")
    config, modelopt_config = (
        _regular(root / name) if _kind(root / name) != "missing" else None
        for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME)
    )
    folder = Path(os.path.realpath(root))
    if _kind(root / INDEX_NAME) == "missing":
        if _kind(root / SINGLE_FILE_NAME) == "missing":
            raise CheckpointError(root, f"holds neither {INDEX_NAME} nor {SINGLE_FILE_NAME}")
        return Checkpoint(root, folder, (_regular(root / SINGLE_FILE_NAME),), config, None, modelopt_config)
    index = _regular(root / INDEX_NAME)
    likely = tuple(sorted(entry for entry in root.glob("*.safetensors") if _kind(entry) == "a file"))
    return Checkpoint(root, folder, likely, config, index, modelopt_config)


def _kind(path: Path) -> str:
    """``a file``, ``a folder``, ``missing``, or what else is there: a dangling link, a FIFO, ..."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling link" if os.path.islink(path) else "missing"
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "a device")


def _regular(path: Path) -> Path:
    """``path``, which must be a regular file (or a link to one)."""
    kind = _kind(path)
    if kind != "a file":
        raise CheckpointError(path, f"is {kind}, not a file")
    return path


def open_local(path: str | os.PathLike[str] | Checkpoint) -> OpenedCheckpoint:
    """The checkpoint at ``path`` (or already resolved), its parsed configs, and the reader of its files."""
    checkpoint = path if isinstance(path, Checkpoint) else resolve_checkpoint(path)
    config, modelopt_config = (
        read_json_object(file, UNIQUE_KEYS[file.name]) if file else None
        for file in (checkpoint.config, checkpoint.modelopt_config)
    )
    return OpenedCheckpoint(checkpoint, config, LOCAL_SHARDS, modelopt_config)


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``config.json`` of the checkpoint folder, parsed; None where there is none."""
    config = Path(folder) / CONFIG_NAME
    return read_json_object(config, UNIQUE_KEYS[CONFIG_NAME]) if config.is_file() else None


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
        dtypes = list(map(header.dtypes.__getitem__, indices))
        offsets = list(map(header.data_start.__add__, map(header.begins.__getitem__, indices)))
        with open(header.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return decode_scalars(dtypes, data, offsets)


LOCAL_SHARDS = LocalShards()
