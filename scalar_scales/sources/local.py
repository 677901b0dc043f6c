"""Shards on this machine: a folder, or one ``.safetensors`` file, each shard read through one descriptor."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, BinaryIO

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import (
    SafetensorsHeader,
    file_identity,
    read_header,
)
from scalar_scales.files.json_document import read_json_object
from scalar_scales.shell import command as shell_command
from scalar_scales.shell import path_argument
from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    INDEX_NAMES,
    SINGLE_FILE_NAME,
    SINGLE_FILE_NAMES,
    UNIQUE_KEYS,
    OpenedCheckpoint,
    ScaleSelector,
    ShardRead,
    index_name,
    read_shard_from,
    shard_names,
    weight_map_of,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME

__all__ = [
    "LOCAL_SHARDS",
    "Checkpoint",
    "LocalShards",
    "open_local",
    "read_config",
    "read_headers",
    "refuse_a_shard",
    "resolve_checkpoint",
]


@dataclass(frozen=True)
class Checkpoint:
    """What a user pointed at: the folder that holds its shards, its config files, and its shards.

    ``folder`` is the real path of that folder, however the user spelled the
    path (a file in it, the folder, a link): one checkpoint, one lock.
    ``file`` is the ``.safetensors`` file a user named, where it was one;
    otherwise the shards are the folder's, as :func:`shard_names` decides
    (the index's, or ``model.safetensors``; diffusers' names too), when first
    asked for.
    """

    root: Path
    folder: Path
    config: Path | None
    modelopt_config: Path | None = None
    file: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        return self._shards[0]

    @property
    def weight_map(self) -> dict[str, str] | None:
        """The index's tensor -> shard file name map, parsed and checked; None without an index."""
        return self._shards[1]

    @property
    def index(self) -> Path | None:
        """The index file, where the checkpoint has one."""
        name = None if self.weight_map is None else index_name(lambda name: _kind(self.root / name) != "missing")
        return None if name is None else self.root / name

    @cached_property
    def _shards(self) -> tuple[tuple[Path, ...], dict[str, str] | None]:
        if self.file is not None:
            return (self.file,), None
        root = self.root
        try:
            names, weight_map = shard_names(
                lambda name: _kind(root / name) != "missing",
                lambda name: read_json_object(_regular(root / name)),
                root,
                lambda n: str(root / n),
            )
        except CheckpointError as error:
            raise _naming_its_lone_file(root, error) from None
        return tuple(_regular(root / name) for name in names), weight_map


def _naming_its_lone_file(root: Path, error: CheckpointError) -> CheckpointError:
    """``error``, a folder refused for holding no shard by the names libraries save, and where the folder holds no
    config.json and one ``.safetensors`` file by another name (a lone file, as FLUX.2-dev-NVFP4's
    ``flux2-dev-nvfp4-mixed.safetensors``), the path that reads that file alone."""
    if error.path != str(root) or _kind(root / CONFIG_NAME) != "missing":
        return error
    files = sorted(root.glob("*.safetensors"))
    if len(files) != 1:
        return error
    return CheckpointError(
        root, f"{error.problem}; its one .safetensors file is read alone where named: {path_argument(files[0])}"
    )


def resolve_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """A folder (index or single ``model.safetensors``, or diffusers' names for them) or a single ``.safetensors``
    file.

    Every file it names must be a regular file (or a link to one): a
    dangling link, a folder or a FIFO where a shard, the index or
    ``config.json`` should be is refused, naming it, and never opened (a FIFO
    would block the read). Which shards a folder has is decided, and the
    index checked, when they are first asked for (:attr:`Checkpoint.files`).
    """
    if not os.fspath(path):
        raise CheckpointError('""', "no checkpoint named: give a folder, a .safetensors file or hf://ORG/NAME")
    root = Path(path)
    kind = _kind(root)
    if kind == "a file":
        if root.suffix != ".safetensors":
            raise CheckpointError(root, "not a .safetensors file")
        return Checkpoint(root, Path(os.path.realpath(root.parent)), None, file=root)
    if kind == "missing":
        if _looks_like_a_repository(os.fspath(path)):
            raise CheckpointError(root, f"no such file or folder; for the Hub repository, write hf://{os.fspath(path)}")
        raise CheckpointError(root, "no such file or folder")
    if kind != "a folder":
        raise CheckpointError(root, f"is {kind}, not a checkpoint folder or a .safetensors file")
    config, modelopt_config = (
        _regular(root / name) if _kind(root / name) != "missing" else None
        for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME)
    )
    return Checkpoint(root, Path(os.path.realpath(root)), config, modelopt_config)


def refuse_a_shard(checkpoint: Checkpoint, command: str, because: str) -> None:
    """Refuse a ``.safetensors`` file a user named that is a shard of the checkpoint in its folder, in one line that
    gives ``scalar-scales COMMAND FOLDER``, since ``command`` takes a checkpoint's shards together ``because``. A
    shard taken alone was judged without its config, and migrated without its marker, which then spoke falsely of
    it. It is a shard where the folder's index names it or, in a folder without an index, where the folder holds
    config.json; a file the index does not name (``consolidated.safetensors``) is no shard of it. Where the folder
    has no index and the file is not the one the folder's command takes (``model.safetensors``), that command
    takes it no more than this one: the line says to write the index first. A folder, or a lone file, passes."""
    if checkpoint.file is None:
        return
    folder = checkpoint.root.parent

    def holds(name: str) -> bool:
        return _kind(folder / name) != "missing"

    remedy, lacking = shell_command("scalar-scales", command, path_argument(folder)), ""
    if (name := index_name(holds)) is not None:
        index = folder / name
        _, names = weight_map_of(read_json_object(_regular(index)), index)
        if checkpoint.root.name not in names:
            return
        why = f"its {name} names it"
    elif holds(CONFIG_NAME):
        why = f"its folder holds {CONFIG_NAME}"
        single = next(filter(holds, SINGLE_FILE_NAMES), None)
        if checkpoint.root.name != single:
            index_wanted, single_wanted = _names_of_its_kind(checkpoint.root.name)
            taken = f"no {single_wanted}" if single is None else f"a {single}, which {command} takes alone"
            lacking = f", which has no {index_wanted} naming its shards and {taken}"
            remedy = f"write the index, then {remedy}"
    else:
        return
    raise CheckpointError(
        checkpoint.root, f"is a shard of the checkpoint {folder} ({why}){lacking}; {command} {because}: {remedy}"
    )


def _names_of_its_kind(shard: str) -> tuple[str, str]:
    """The index and the single file of the library whose shards are named as ``shard`` is: diffusers'
    (``diffusion_pytorch_model-00001-of-00002.safetensors``), or else transformers'."""
    return next(
        (
            (index, single)
            for index, single in zip(INDEX_NAMES, SINGLE_FILE_NAMES, strict=True)
            if shard.startswith(single.removesuffix(".safetensors") + "-")
        ),
        (INDEX_NAME, SINGLE_FILE_NAME),
    )


_REPOSITORY_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_]", re.ASCII)


def _looks_like_a_repository(path: str) -> bool:
    """``ORG/NAME`` as the Hub spells repository ids (the bare form ``hf download`` takes): two names, no more."""
    return _REPOSITORY_ID.fullmatch(path) is not None and ".." not in path


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
    """Shards on this machine: each opened once, its header and its scales' values read from that descriptor."""

    @staticmethod
    def read_shard(file: Path, select: ScaleSelector, *, values: bool) -> ShardRead:
        try:
            with open(file, "rb") as f:
                identity = file_identity(os.fstat(f.fileno()))
                read = partial(_read_exactly, f)
                shard = read_shard_from(file, f.read(8), identity.size, read, select, values=values, identity=identity)
                if file_identity(os.fstat(f.fileno())) != identity:
                    raise CheckpointError(file, "changed while it was read")
        except OSError as exc:
            raise CheckpointError(file, f"cannot read: {exc.strerror or exc}") from None
        return shard


def _read_exactly(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise CheckpointError(f.name, f"changed while it was read: {size} bytes at {offset} were not there")
    return data


LOCAL_SHARDS = LocalShards()
