"""What a checkpoint is, wherever its files are: its layout, its config's declaration, and where shards come from.

A checkpoint is a folder (or a Hub repository) with
``model.safetensors.index.json``, or with one ``model.safetensors``, or a
single ``.safetensors`` file. Which of these it is, and which shards it
has, is decided once (:func:`shard_names`) for local folders and Hub
repositories alike. Its marker is ``config.json``'s
``quantization_config.format_version``: 2 means 0-D global scales, a missing
key means legacy (1,), which we call version 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.nvfp4 import FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION, NVFP4_FORMAT, SCALAR_FORMAT_VERSION

__all__ = [
    "CONFIG_NAME",
    "INDEX_NAME",
    "SINGLE_FILE_NAME",
    "UNIQUE_KEYS",
    "CheckpointLocation",
    "Declaration",
    "OpenedCheckpoint",
    "ShardSource",
    "declaration",
    "shard_name",
    "shard_names",
    "weight_map_of",
]

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"
UNIQUE_KEYS = {CONFIG_NAME: "quantization_config"}
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
    def weight_map(self) -> dict[str, str] | None: ...


class ShardSource(Protocol):
    """Where a shard's bytes come from. ``network``: its reads wait on the network, so jobs run in threads."""

    network: bool

    def read_header(self, file: Any) -> SafetensorsHeader: ...

    def read_values(self, header: SafetensorsHeader, indices: list[int]) -> list[float | None]: ...


@dataclass(frozen=True)
class OpenedCheckpoint:
    """A checkpoint ready to scan: where its files are, its parsed ``config.json`` (None without one), and the
    source that reads its shards."""

    location: CheckpointLocation
    config: dict[str, Any] | None
    source: ShardSource


def shard_name(path: Path | str) -> str:
    """A shard's file name, from a local path or an ``hf://`` address (a string)."""
    return path.name if isinstance(path, Path) else path.rpartition("/")[2]


def shard_names(
    is_listed: Callable[[str], bool],
    read_index: Callable[[], dict[str, Any]],
    root: str | os.PathLike[str],
    label: Callable[[str], str],
) -> tuple[list[str], dict[str, str] | None]:
    """The shards of the checkpoint at ``root``, and its index's ``weight_map`` (None without an index).

    ``is_listed(name)``: the checkpoint has that file; ``read_index()``: its
    index, parsed; ``label(name)``: how errors name a file.
    """
    if is_listed(INDEX_NAME):
        weight_map = weight_map_of(read_index(), label(INDEX_NAME))
        names = sorted(set(weight_map.values()))
        if missing := [name for name in names if not is_listed(name)]:
            raise CheckpointError(label(missing[0]), f"named in {INDEX_NAME} but missing")
        return names, weight_map
    if is_listed(SINGLE_FILE_NAME):
        return [SINGLE_FILE_NAME], None
    raise CheckpointError(root, f"holds neither {INDEX_NAME} nor {SINGLE_FILE_NAME}")


def weight_map_of(index: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, str]:
    """The index's ``weight_map``: every tensor's shard, each a ``.safetensors`` file in the index's folder.

    Parsed as JSON: file names that appear anywhere else in the index (its
    ``metadata``, say) are not shards, and a name that leads out of the
    folder is refused, so nothing outside the checkpoint is ever touched.
    ``path`` names the index in errors.
    """
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(path, "weight_map is missing or not an object mapping tensors to shard files")
    names = weight_map.values()
    if set(map(type, names)) != {str} or not all(map(_is_shard_name, set(names))):
        tensor, name = next((t, n) for t, n in weight_map.items() if not _is_shard_name(n))
        raise CheckpointError(
            path, f"weight_map maps {tensor!r} to {name!r}, which is not a .safetensors file in this folder"
        )
    return weight_map


def _is_shard_name(name: object) -> bool:
    return isinstance(name, str) and name.endswith(".safetensors") and Path(name).name == name


@dataclass(frozen=True)
class Declaration:
    """What ``config.json``'s ``quantization_config`` declares, checked."""

    quantization_format: str | None
    """``nvfp4-pack-quantized`` when any config group uses it, else the top-level ``format``."""
    format_version: int
    """2 for 0-D global scales; 1 (legacy, (1,)) when the key is absent."""


def declaration(config: dict[str, Any], path: str | os.PathLike[str]) -> Declaration:
    """The declaration of ``config`` (the parsed ``path``); a malformed one is a :class:`CheckpointError`."""
    quantization_config = config.get("quantization_config")
    if quantization_config is None:
        return Declaration(None, LEGACY_FORMAT_VERSION)
    if not isinstance(quantization_config, dict):
        raise CheckpointError(path, f"quantization_config must be an object, not {_json_kind(quantization_config)}")
    groups = quantization_config.get("config_groups") or {}
    if not isinstance(groups, dict) or not all(isinstance(group, dict) for group in groups.values()):
        raise CheckpointError(path, "quantization_config.config_groups must be an object of objects")
    formats = [quantization_config.get("format"), *(group.get("format") for group in groups.values())]
    if not all(fmt is None or isinstance(fmt, str) for fmt in formats):
        raise CheckpointError(path, "a quantization_config format must be a string")
    version = quantization_config.get(FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION)
    if type(version) is not int or version not in (LEGACY_FORMAT_VERSION, SCALAR_FORMAT_VERSION):
        raise CheckpointError(
            path, f"quantization_config.{FORMAT_VERSION_KEY} must be 1 or 2, not {json.dumps(version)}"
        )
    quantization_format = NVFP4_FORMAT if NVFP4_FORMAT in formats else formats[0]
    return Declaration(quantization_format, version)


def _json_kind(value: object) -> str:
    return {str: "a string", list: "a list", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )
