"""A checkpoint's JSON files (``config.json``, the index) parsed as one JSON object, or refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from scalar_scales.errors import CheckpointError

__all__ = ["json_object", "read_json_object"]


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in the file at ``path``."""
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
