"""Find the safetensors shards of a checkpoint and read its scale-format marker.

A checkpoint is a folder with ``model.safetensors.index.json``, a folder with
one ``model.safetensors``, or a single ``.safetensors`` file. The marker is
``config.json``'s ``quantization_config.format_version``: 2 means 0-D global
scales, a missing key means legacy (1,), which we call version 1.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalar_scales.safetensors_header import CheckpointError, SafetensorsHeader, read_header

__all__ = [
    "Checkpoint",
    "CONFIG_NAME",
    "Declaration",
    "NVFP4_FORMAT",
    "FORMAT_VERSION_KEY",
    "GLOBAL_SCALE_SUFFIX",
    "INDEX_NAME",
    "LEGACY_FORMAT_VERSION",
    "SCALAR_FORMAT_VERSION",
    "SINGLE_FILE_NAME",
    "checkpoint_files",
    "declaration",
    "is_global_scale",
    "json_object",
    "read_config",
    "read_headers",
    "resolve_checkpoint",
    "weight_map_of",
]

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"
FORMAT_VERSION_KEY = "format_version"
SCALAR_FORMAT_VERSION = 2
LEGACY_FORMAT_VERSION = 1
NVFP4_FORMAT = "nvfp4-pack-quantized"
GLOBAL_SCALE_SUFFIX = "_global_scale"
"""compressed-tensors names a tensor-group quantizer's per-tensor scale ``<base>_global_scale``: NVFP4 has
``weight_global_scale`` and, for calibrated activations, ``input_global_scale``."""


def is_global_scale(tensor_name: str) -> bool:
    """Whether a tensor (a checkpoint entry, a parameter or a state-dict key) is a per-tensor global scale.

    The one definition every package uses: the command line, the producer
    patch and the test kit.
    """
    return tensor_name.endswith(GLOBAL_SCALE_SUFFIX)


@dataclass(frozen=True)
class Checkpoint:
    """What a user pointed at: its shards, the folder that holds them, and its index and config when it has them.

    ``folder`` is the real path of that folder, however the user spelled the
    path (a file in it, the folder, a link): one checkpoint, one lock.
    ``weight_map`` is the index's tensor -> shard file name map, parsed and
    checked; None without an index (a lone file, or a single-file folder).
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
    config = root / CONFIG_NAME if (root / CONFIG_NAME).is_file() else None
    folder = Path(os.path.realpath(root))
    index = root / INDEX_NAME
    if index.is_file():
        weight_map = _weight_map(index)
        files = tuple(root / name for name in sorted(set(weight_map.values())))
        for shard in files:
            if not shard.is_file():
                raise CheckpointError(shard, f"named in {INDEX_NAME} but missing")
        return Checkpoint(root, folder, files, config, weight_map)
    single = root / SINGLE_FILE_NAME
    if single.is_file():
        return Checkpoint(root, folder, (single,), config)
    raise CheckpointError(root, f"holds neither {INDEX_NAME} nor {SINGLE_FILE_NAME}")


def checkpoint_files(path: str | os.PathLike[str]) -> list[Path]:
    """The shards of the checkpoint at ``path``, in a stable order."""
    return list(resolve_checkpoint(path).files)


def read_headers(path: str | os.PathLike[str]) -> list[SafetensorsHeader]:
    """The validated header of every shard of the checkpoint at ``path``."""
    return [read_header(shard) for shard in checkpoint_files(path)]


def _weight_map(index: Path) -> dict[str, str]:
    return weight_map_of(_read_json_object(index), index)


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


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``config.json`` of the checkpoint folder, or None where there is none."""
    config = Path(folder) / CONFIG_NAME
    return _read_json_object(config) if config.is_file() else None


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


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    return json_object(raw, path)


def json_object(raw: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """``raw`` parsed as a JSON object (a config or an index), or a :class:`CheckpointError` naming ``path``."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CheckpointError(path, "not a JSON object")
    return document
