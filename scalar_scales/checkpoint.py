"""Find the safetensors shards of a checkpoint and read its scale-format marker.

A checkpoint is a folder with ``model.safetensors.index.json``, a folder with
one ``model.safetensors``, or a single ``.safetensors`` file. The marker is
``config.json``'s ``quantization_config.format_version``: 2 means 0-D global
scales, a missing key means legacy (1,), which we call version 1.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalar_scales.durable import replaced
from scalar_scales.safetensors_header import CheckpointError, SafetensorsHeader, read_header

__all__ = [
    "Checkpoint",
    "CONFIG_NAME",
    "FORMAT_VERSION_KEY",
    "GLOBAL_SCALE_SUFFIX",
    "INDEX_NAME",
    "LEGACY_FORMAT_VERSION",
    "SCALAR_FORMAT_VERSION",
    "SINGLE_FILE_NAME",
    "checkpoint_files",
    "format_version",
    "is_global_scale",
    "read_config",
    "read_headers",
    "resolve_checkpoint",
    "write_json_atomically",
]

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"
FORMAT_VERSION_KEY = "format_version"
SCALAR_FORMAT_VERSION = 2
LEGACY_FORMAT_VERSION = 1
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
    """What a user pointed at: its shards, and its config when it is a folder."""

    root: Path
    files: tuple[Path, ...]
    config: Path | None


def resolve_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """A folder (index or single ``model.safetensors``) or a single ``.safetensors`` file."""
    root = Path(path)
    files = tuple(checkpoint_files(root))
    config = root / CONFIG_NAME if root.is_dir() and (root / CONFIG_NAME).is_file() else None
    return Checkpoint(root=root, files=files, config=config)


def checkpoint_files(path: str | os.PathLike[str]) -> list[Path]:
    """The shards of the checkpoint at ``path``, in a stable order."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".safetensors":
            raise CheckpointError(path, "not a .safetensors file")
        return [path]
    if not path.is_dir():
        raise CheckpointError(path, "no such file or folder")
    index = path / INDEX_NAME
    if index.is_file():
        shards = [path / name for name in sorted(_shard_names(index))]
        for shard in shards:
            if not shard.exists():
                raise CheckpointError(shard, f"named in {INDEX_NAME} but missing")
        return shards
    single = path / SINGLE_FILE_NAME
    if single.is_file():
        return [single]
    raise CheckpointError(path, f"holds neither {INDEX_NAME} nor {SINGLE_FILE_NAME}")


def read_headers(path: str | os.PathLike[str]) -> list[SafetensorsHeader]:
    """The validated header of every shard of the checkpoint at ``path``."""
    return [read_header(shard) for shard in checkpoint_files(path)]


_WEIGHT_MAP_FILE = re.compile(rb'":\s*"([^"\\]*\.safetensors)"')


def _shard_names(index: Path) -> set[str]:
    """The file names an index's ``weight_map`` points to.

    The index of a large MoE maps hundreds of thousands of tensors. Where the
    file has no escape sequences, every ``"...": "X.safetensors"`` pair is a
    weight_map entry, and finding them is about twice as fast as ``json``;
    anything else is read with ``json``.
    """
    try:
        data = index.read_bytes()
    except OSError as exc:
        raise CheckpointError(index, f"cannot read: {exc.strerror}") from None
    if b"\\" not in data and b'"weight_map"' in data:
        try:
            names = {name.decode("utf-8") for name in set(_WEIGHT_MAP_FILE.findall(data))}
        except UnicodeDecodeError:
            names = set()
        if names:
            return names
    weight_map = _read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(index, "weight_map is missing or not an object of file names")
    return set(weight_map.values())


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``config.json`` of the checkpoint folder, or None where there is none."""
    config = Path(folder) / CONFIG_NAME
    return _read_json_object(config) if config.is_file() else None


def format_version(config: dict[str, Any] | None) -> int:
    """The scale-format version a config declares; legacy when it declares none."""
    quantization_config = (config or {}).get("quantization_config") or {}
    return int(quantization_config.get(FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION))


def write_json_atomically(path: str | os.PathLike[str], document: dict[str, Any], *, durable: bool = True) -> None:
    """Replace ``path`` with ``document`` atomically (see ``durable``).

    The layout (indent 2, sorted keys) is the one compressed-tensors writes.
    """
    with replaced(path, durable=durable, text=True) as f:
        f.write(json.dumps(document, indent=2, sort_keys=True))


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CheckpointError(path, "not a JSON object")
    return document
