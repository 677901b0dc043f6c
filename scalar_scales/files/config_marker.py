"""Set or remove ``config.json``'s ``quantization_config.format_version``, and change no other byte.

``config.json`` belongs to the user: its key order, indentation, line ends,
trailing newline, mode and owner stay as they were. So the marker is edited
in the file's text. Adding it appends ``"format_version": 2`` after the last
member of ``quantization_config``, spaced like that member; removing it
deletes exactly that text again. Migrating to format 2 and back to legacy
therefore gives back a marker-less ``config.json`` byte for byte.

The edit is planned (:func:`plan_format_version`) before anything of a
checkpoint is written, so that a ``config.json`` this tool cannot edit is
refused while nothing has changed, and written (:func:`write_planned`) last,
only if the file still holds the text it was planned from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

from scalar_scales.errors import CheckpointError
from scalar_scales.files.durable import os_errors_named, replaced
from scalar_scales.nvfp4 import FORMAT_VERSION_KEY

__all__ = ["MarkerEdit", "plan_format_version", "set_format_version", "with_format_version", "write_planned"]

_WHITESPACE = " \t\n\r"
_QUANTIZATION_CONFIG = "quantization_config"


class _Member(NamedTuple):
    """Where one ``"key": value`` of a JSON object is in the text."""

    key: str
    lead_start: int
    """Just after the ``{`` or ``,`` before the key: the whitespace that leads the member starts here."""
    key_start: int
    key_end: int
    value_start: int
    value_end: int


class MarkerEdit(NamedTuple):
    """A planned marker edit: the file, the bytes it was planned from, and the bytes it gets."""

    path: Path
    old: bytes
    new: bytes


def plan_format_version(path: str | os.PathLike[str], version: int | None) -> MarkerEdit | None:
    """The edit that makes ``config.json`` at ``path`` declare ``version`` (None: no key, which is legacy), or None
    where it already does. A file this tool cannot edit is a :class:`CheckpointError` here."""
    path = Path(path)
    with os_errors_named(path, "read"):
        raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(path, f"cannot read: {exc}") from None
    new = with_format_version(text, version, path)
    return None if new == text else MarkerEdit(path, raw, new.encode("utf-8"))


def write_planned(edit: MarkerEdit, *, durable: bool = True) -> None:
    """Write a planned marker edit, atomically; refuse if the file no longer holds what the edit was planned from."""
    with os_errors_named(edit.path, "read"):
        current = edit.path.read_bytes()
    if current != edit.old:
        raise CheckpointError(edit.path, "changed while this run was migrating the shards; its marker was not written")
    with os_errors_named(edit.path, "write"), replaced(edit.path, durable=durable) as f:
        f.write(edit.new)


def set_format_version(path: str | os.PathLike[str], version: int | None, *, durable: bool = True) -> bool:
    """Make ``config.json`` at ``path`` declare ``version`` now (None: no key, which is legacy); True if it
    changed."""
    edit = plan_format_version(path, version)
    if edit is not None:
        write_planned(edit, durable=durable)
    return edit is not None


def with_format_version(text: str, version: int | None, path: str | os.PathLike[str] = "config.json") -> str:
    """``text`` (a ``config.json``) with its marker set to ``version``, or removed for None."""
    decoder = json.JSONDecoder()
    try:
        top = _members(text, _skip(text, 0), decoder)
        (config,) = _named(top, _QUANTIZATION_CONFIG, path)
        if text[config.value_start] != "{":
            raise CheckpointError(path, f"{_QUANTIZATION_CONFIG} is not an object")
        members = _members(text, config.value_start, decoder)
    except (ValueError, IndexError):
        raise CheckpointError(path, "not a JSON object this tool can edit") from None
    markers = _named(members, FORMAT_VERSION_KEY, path, at_most_one=True)
    if version is None:
        return _removed(text, members, markers[0]) if markers else text
    value = json.dumps(version)
    if markers:
        marker = markers[0]
        return text[: marker.value_start] + value + text[marker.value_end :]
    key = json.dumps(FORMAT_VERSION_KEY)
    if not members:
        return text[: config.value_start + 1] + f"{key}: {value}" + text[config.value_start + 1 :]
    last = members[-1]
    lead, colon = text[last.lead_start : last.key_start], text[last.key_end : last.value_start]
    return text[: last.value_end] + "," + lead + key + colon + value + text[last.value_end :]


def _removed(text: str, members: list[_Member], marker: _Member) -> str:
    """``text`` without ``marker``: the exact inverse of appending it."""
    at = members.index(marker)
    if at:
        return text[: members[at - 1].value_end] + text[marker.value_end :]
    if len(members) > 1:
        return text[: marker.key_start] + text[members[1].key_start :]
    return text[: marker.lead_start] + text[marker.value_end :]


def _named(
    members: list[_Member], key: str, path: str | os.PathLike[str], *, at_most_one: bool = False
) -> list[_Member]:
    found = [member for member in members if member.key == key]
    if len(found) > 1:
        raise CheckpointError(path, f"{key} appears more than once; which one counts is ambiguous")
    if not found and not at_most_one:
        raise CheckpointError(path, f"has no {key}")
    return found


def _skip(text: str, at: int) -> int:
    while text[at] in _WHITESPACE:
        at += 1
    return at


def _members(text: str, start: int, decoder: json.JSONDecoder) -> list[_Member]:
    """The members of the object whose ``{`` is at ``start``."""
    if text[start] != "{":
        raise ValueError("not an object")
    members: list[_Member] = []
    lead_start = start + 1
    at = _skip(text, lead_start)
    if text[at] == "}":
        return members
    while True:
        key_start = at
        key, at = decoder.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError("a key is not a string")
        key_end = at
        at = _skip(text, at)
        if text[at] != ":":
            raise ValueError("no colon")
        value_start = _skip(text, at + 1)
        _, value_end = decoder.raw_decode(text, value_start)
        members.append(_Member(key, lead_start, key_start, key_end, value_start, value_end))
        at = _skip(text, value_end)
        if text[at] == "}":
            return members
        if text[at] != ",":
            raise ValueError("no comma")
        lead_start = at + 1
        at = _skip(text, lead_start)
