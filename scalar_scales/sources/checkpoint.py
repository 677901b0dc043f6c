"""What a checkpoint is, wherever its files are: its layout, its configs, and where shards come from.

A checkpoint is a folder (or a Hub repository) with
``model.safetensors.index.json``, or with one ``model.safetensors``, or a
single ``.safetensors`` file; or a diffusers model folder (a pipeline's
``transformer/``), whose names for these are
``diffusion_pytorch_model.safetensors.index.json`` and
``diffusion_pytorch_model.safetensors``, beside a ``config.json`` that names
its ``_class_name`` and holds its ``quantization_config`` as transformers'
does. Which of these it is, and which shards it has, is decided once
(:func:`shard_names`) for local folders and Hub repositories alike. What its configs declare is read by
:mod:`scalar_scales.sources.declaration`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import FileIdentity, SafetensorsHeader, header_length_of, parse_header
from scalar_scales.files.scalars import read_scalars
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME, Declaration, declaration
from scalar_scales.sources.hub_address import HubAddress

__all__ = [
    "CONFIG_NAME",
    "DIFFUSERS_INDEX_NAME",
    "DIFFUSERS_SINGLE_FILE_NAME",
    "INDEX_NAME",
    "INDEX_NAMES",
    "SINGLE_FILE_NAME",
    "SINGLE_FILE_NAMES",
    "UNIQUE_KEYS",
    "CheckpointLocation",
    "NetworkShardSource",
    "OpenedCheckpoint",
    "ScaleSelector",
    "ShardRead",
    "ShardSource",
    "index_name",
    "read_shard_from",
    "shard_name",
    "shard_names",
    "weight_map_of",
]

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"
DIFFUSERS_INDEX_NAME = "diffusion_pytorch_model.safetensors.index.json"
DIFFUSERS_SINGLE_FILE_NAME = "diffusion_pytorch_model.safetensors"
_NAMES = ((INDEX_NAME, SINGLE_FILE_NAME), (DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_FILE_NAME))
"""Each library's index and the single file a folder holds without one: transformers' (``save_pretrained`` of a
model) and diffusers' (``ModelMixin.save_pretrained``: ``_add_variant(SAFE_WEIGHTS_NAME)`` and
``SAFE_WEIGHTS_INDEX_NAME`` of ``diffusers.utils.constants``), looked for in that order."""
INDEX_NAMES = tuple(index for index, _ in _NAMES)
SINGLE_FILE_NAMES = tuple(single for _, single in _NAMES)
UNIQUE_KEYS = {CONFIG_NAME: "quantization_config", MODELOPT_CONFIG_NAME: "quantization"}
"""What a tool reads of each JSON file to decide, in which no key may be given twice (``files.json_document``)."""


class CheckpointLocation(Protocol):
    """Where a checkpoint's files are: a local folder's paths, or a Hub repository's addresses.

    ``weight_map`` is the index's tensor -> shard file name map, parsed and
    checked; None without an index (a lone file, or a single-file folder).
    """

    @property
    def root(self) -> Path | str: ...

    @property
    def files(self) -> tuple[Any, ...]: ...

    @property
    def config(self) -> Path | str | None: ...

    @property
    def modelopt_config(self) -> Path | str | None:
        """ModelOpt's ``hf_quant_config.json``, where the checkpoint has one."""

    @property
    def weight_map(self) -> dict[str, str] | None: ...


ScaleSelector = Callable[[SafetensorsHeader], list[int]]
"""Which entries of a shard's header are the per-tensor scales whose values are wanted (header indices)."""


class ShardRead(NamedTuple):
    """One shard as a source read it: its validated header, the entries ``select`` chose, and their values (None
    for each where values were not asked for, or for a dtype this tool does not decode)."""

    header: SafetensorsHeader
    indices: list[int]
    values: list[float | None]


_VALUE_SPAN_GAP = 1 << 16
"""Scales closer than this are read in one span: a few kilobytes more read costs less than another call."""


def read_shard_from(
    file: Path,
    prefix: bytes,
    size: int,
    read: Callable[[int, int], bytes],
    select: ScaleSelector,
    *,
    values: bool,
    identity: FileIdentity | None = None,
) -> ShardRead:
    """A shard read from bytes at hand (a local descriptor's, a staged blob's): the file of ``size`` bytes whose
    first 8 are ``prefix``, where ``read(offset, count)`` gives the ``count`` bytes at ``offset``; its validated
    header and the values of the scales ``select`` picks. ``identity``: a local file's, as it was opened."""
    header = parse_header(file, read(8, header_length_of(file, prefix, size)), size, identity)
    indices = select(header)
    if not (values and indices):
        return ShardRead(header, indices, [None] * len(indices))
    start = header.data_start
    found = read_scalars(header, indices, lambda begin, end: read(start + begin, end - begin), _VALUE_SPAN_GAP)
    return ShardRead(header, indices, found)


class ShardSource(Protocol):
    """Where a shard's bytes come from.

    :meth:`read_shard` reads a shard's header and the values of the entries
    ``select`` picks from it as one file: for a local shard, through one open
    descriptor, refusing a file that changes while it is read; for a remote
    one, at the one commit the whole check reads. A check reads its shards
    one after the other, or, from a :class:`NetworkShardSource`, together.
    """

    def read_shard(self, file: Any, select: ScaleSelector, *, values: bool) -> ShardRead: ...


@runtime_checkable
class NetworkShardSource(ShardSource, Protocol):
    """A source whose reads wait on a server (the Hub's: :class:`~scalar_scales.sources.hub.HubShards`), so that it
    reads a checkpoint's shards together."""

    def read_shards(self, files: Sequence[Any], select: ScaleSelector, *, values: bool) -> list[ShardRead]:
        """Each file's :meth:`read_shard`, in order, read together: a bounded number at once, with the source's
        progress display, and the first failure ending the others' reads where they wait."""
        ...


@dataclass(frozen=True)
class OpenedCheckpoint:
    """A checkpoint ready to scan: where its files are, its parsed ``config.json`` and ``hf_quant_config.json``
    (None without one), the source that reads its shards, and, for a Hub repository, the commit every file was
    read at (None for local files) and the repository's address (``hub``: its ``canonical`` ``hf://`` form is
    how a report names it; set offline too, where the files are read from huggingface_hub's cache)."""

    location: CheckpointLocation
    config: dict[str, Any] | None
    source: ShardSource
    modelopt_config: dict[str, Any] | None = None
    commit: str | None = None
    hub: HubAddress | None = None
    changed_locally: tuple[str, ...] = ()
    """Offline, the files of the cached snapshot that are not links to the cache's blobs, as huggingface_hub caches
    a commit's files: edited or put there on this machine (``migrate --materialize``), so they may not be the
    commit's; a report that names the commit says so. Empty for local files and a check over the network."""

    @cached_property
    def declared(self) -> Declaration | None:
        """What the configs declare (:func:`~scalar_scales.sources.declaration.declaration`); None without either
        file."""
        if self.config is None and self.modelopt_config is None:
            return None
        location = self.location
        return declaration(self.config, location.config, self.modelopt_config, location.modelopt_config)


def shard_name(path: Path | str) -> str:
    """A shard's file name, from a local path or an ``hf://`` address (a string)."""
    return path.name if isinstance(path, Path) else path.rpartition("/")[2]


def index_name(is_listed: Callable[[str], bool]) -> str | None:
    """The name of the index the checkpoint has (``is_listed(name)``: it has that file), transformers' or
    diffusers'; None without one."""
    return next(filter(is_listed, INDEX_NAMES), None)


def shard_names(
    is_listed: Callable[[str], bool],
    read_index: Callable[[str], dict[str, Any]],
    root: str | os.PathLike[str],
    label: Callable[[str], str],
    *,
    missing: str = "missing",
) -> tuple[list[str], dict[str, str] | None]:
    """The shards of the checkpoint at ``root``, and its index's ``weight_map`` (None without an index).

    ``is_listed(name)``: the checkpoint has that file; ``read_index(name)``:
    the index of that name, parsed; ``label(name)``: how errors name a file;
    ``missing``: what a shard the index names and the checkpoint lacks is
    said to be.
    """
    if (index := index_name(is_listed)) is not None:
        weight_map, names = weight_map_of(read_index(index), label(index))
        if absent := [name for name in names if not is_listed(name)]:
            raise CheckpointError(label(absent[0]), f"named in {index} but {missing}")
        return names, weight_map
    if (single := next(filter(is_listed, SINGLE_FILE_NAMES), None)) is not None:
        return [single], None
    raise CheckpointError(
        root,
        f"holds neither {INDEX_NAME} nor {SINGLE_FILE_NAME} (nor diffusers' {DIFFUSERS_INDEX_NAME} or "
        f"{DIFFUSERS_SINGLE_FILE_NAME})",
    )


def weight_map_of(index: dict[str, Any], path: str | os.PathLike[str]) -> tuple[dict[str, str], list[str]]:
    """The index's ``weight_map``: every tensor's shard, each a ``.safetensors`` file in the index's folder; and
    those shards' names, sorted.

    Parsed as JSON: file names that appear anywhere else in the index (its
    ``metadata``, say) are not shards, and a name that leads out of the
    folder is refused, so nothing outside the checkpoint is ever touched.
    ``path`` names the index in errors.
    """
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(path, "weight_map is missing or not an object mapping tensors to shard files")
    try:
        names = set(weight_map.values())
    except TypeError:  # an array or an object where a file name should be
        names = set()
    if not names or not all(map(_is_shard_name, names)):
        tensor, name = next((t, n) for t, n in weight_map.items() if not _is_shard_name(n))
        raise CheckpointError(
            path, f"weight_map maps {tensor!r} to {name!r}, which is not a .safetensors file in this folder"
        )
    return weight_map, sorted(names)


def _is_shard_name(name: object) -> bool:
    """A file name in this folder: no separator, and no NUL, which no file system has in a name."""
    return isinstance(name, str) and name.endswith(".safetensors") and Path(name).name == name and "\0" not in name
