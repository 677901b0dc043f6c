"""A checkpoint's JSON files (``config.json``, the index) parsed as one JSON object, or refused in one line.

``json`` keeps the last of two equal keys without a word, and another reader
may keep the first: within what a tool reads to decide by (``config.json``'s
``quantization_config``), a key given twice is refused as ambiguous, and
elsewhere the last one counts, as ``json`` and transformers read it. (In the
index's ``weight_map``, a tensor named twice for two shards is found by the
index check against the shards, NV501; and the index is large, so it is
parsed without looking for repeats.)
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from scalar_scales.errors import CheckpointError

__all__ = ["MAX_JSON_BYTES", "json_object", "read_json_object"]

MAX_JSON_BYTES = 256 << 20
"""The most a checkpoint's JSON file (config, index; a Hub's model info) may hold: a V4-Flash index is 13 MB."""


def read_json_object(path: Path, unique: str | None = None) -> dict[str, Any]:
    """The JSON object in the file at ``path`` (:func:`json_object` says what ``unique`` is), read with a bound:
    a file of more than :data:`MAX_JSON_BYTES` is refused unread."""
    too_large = f"holds more than the {MAX_JSON_BYTES} bytes a config or an index may hold"
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_JSON_BYTES:
                raise CheckpointError(path, too_large)
            raw = f.read(MAX_JSON_BYTES + 1)  # a file that grows meanwhile, or one whose size says nothing
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise CheckpointError(path, too_large)
    return json_object(raw, path, unique)


def json_object(raw: bytes, path: str | os.PathLike[str], unique: str | None = None) -> dict[str, Any]:
    """``raw`` parsed as a JSON object (a config or an index), or a :class:`CheckpointError` naming ``path``.

    ``unique``: a top-level key that must appear once, and within whose value
    no object may give a key twice.
    """
    duplicated: dict[int, tuple[dict[str, Any], set[str]]] = {}
    """Each object that gives a key twice (by id, kept alive so that no id is reused), with those keys: a real
    file has none, so nothing is walked unless one does."""

    def remember_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) < len(pairs):
            counted = Counter(key for key, _ in pairs)
            duplicated[id(found)] = (found, {key for key, n in counted.items() if n > 1})
        return found

    try:
        hook = None if unique is None else remember_duplicates
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=hook)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(path, f"not valid JSON ({exc})") from None
    except ValueError:  # past Python's bound on the digits of an integer it converts
        raise CheckpointError(path, f"holds an integer of more than {sys.get_int_max_str_digits()} digits") from None
    if not isinstance(document, dict):
        raise CheckpointError(path, "not a JSON object")
    if unique is not None and duplicated:
        if unique in duplicated.get(id(document), ({}, set()))[1]:
            raise CheckpointError(path, f"{unique} appears more than once; which one counts is ambiguous")
        twice = _first_duplicate(document.get(unique), unique, duplicated)
        if twice is not None:
            raise CheckpointError(path, f"{twice} appears more than once; which one counts is ambiguous")
    return document


def _first_duplicate(value: Any, where: str, duplicated: dict[int, tuple[dict[str, Any], set[str]]]) -> str | None:
    """The dotted name of a key given twice in an object within ``value``, or None."""
    if isinstance(value, dict):
        if id(value) in duplicated:
            return f"{where}.{min(duplicated[id(value)][1])}"
        items: Any = value.items()
    elif isinstance(value, list):
        items = ((str(index), item) for index, item in enumerate(value))
    else:
        return None
    for key, item in items:
        found = _first_duplicate(item, f"{where}.{key}", duplicated)
        if found is not None:
            return found
    return None
