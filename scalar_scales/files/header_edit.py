"""Plan the header edit that turns per-tensor scales between shape (1,) and 0-D.

In a safetensors header, ``"shape":[1]`` and ``"shape":[ ]`` have the same
length, and safetensors reads ``[ ]`` as shape (). Going to 0-D therefore
changes one byte per scale, the ``1`` becomes a space, and going back puts the
``1`` where the space is. Because each edit is a single byte between two valid
headers, every partially written state of a shard is itself a valid file.

A header written natively with 0-D scales says ``[]``, with no byte to spare;
turning it into (1,) needs longer header content. That plan is not
``in_place``, and the shard is then written anew and renamed.

Where the reader proves where every entry's shape is written
(:attr:`~scalar_scales.files.header.SafetensorsHeader.shape_spans`: in the
reference writer's compact layout, among others), flipping those bytes is
correct by construction. Any other plan is checked before it is returned:
the new header must parse, and must say exactly what the old one said except
for the changed tensors' shapes. A header the reader accepts but whose
entries cannot be located as objects (an entry written as an array, say) is
refused for editing, with nothing written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import FileIdentity, Layout, SafetensorsHeader

__all__ = ["HeaderEdit", "Layout", "plan_header_edit"]

# A tensor entry is an object of strings and integer lists: no nested braces.
_ENTRY = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*\{([^{}]*)\}')
_SHAPE = re.compile(rb'"shape"\s*:\s*\[([^\]]*)\]')


@dataclass(frozen=True)
class HeaderEdit:
    """The new header bytes for one shard and what changed."""

    path: Path
    old_length: int
    identity: FileIdentity | None
    """The file the plan was made from (:func:`~scalar_scales.files.header.file_identity`): the one an edit must
    still find."""
    new_raw: bytes
    changed: tuple[str, ...]
    span: tuple[int, int]
    """The range of header bytes (from the start of the JSON) that the edit touches."""
    in_place: bool
    """Every changed byte keeps its position, so the shard can be edited where it is.

    Otherwise the header content got longer (its total length may still fit
    in the old padding), bytes shift, and a torn write could leave an
    unreadable header: the shard must be written anew and renamed.
    """

    @property
    def old_data_start(self) -> int:
        return 8 + self.old_length


def plan_header_edit(header: SafetensorsHeader, indices: Collection[int], to: Layout) -> HeaderEdit | None:
    """The edit that puts the entries at ``indices`` into layout ``to``, or None if none needs it.

    The entries must be single-element tensors, each (1,) or (); the caller
    has checked that.
    """
    want = () if to == "scalar" else (1,)
    todo = sorted(i for i in indices if header.shapes[i] != want)
    if not todo:
        return None
    if not isinstance(header.path, Path):
        raise CheckpointError(header.path, "only a local file can be edited")
    spans = header.shape_spans if header.shape_spans is not None else _locate_shapes(header, todo)
    raw = header.raw
    pieces: list[bytes] = []
    cursor = 0
    for i in todo:
        begin, end = spans[i]
        pieces += (raw[cursor:begin], _edited_inner(raw[begin:end], to))
        cursor = end
    pieces.append(raw[cursor:])
    new_raw = b"".join(pieces)
    span = (spans[todo[0]][0], spans[todo[-1]][1])
    in_place = len(new_raw) == len(raw)
    if not in_place:
        new_raw = _padded(new_raw.rstrip(b" "))
        span = (0, len(new_raw))
    edit = HeaderEdit(
        header.path, len(raw), header.identity, new_raw, tuple(header.names[i] for i in todo), span, in_place
    )
    if header.shape_spans is None or not in_place:
        _check(header, edit, want)
    return edit


def _locate_shapes(header: SafetensorsHeader, todo: list[int]) -> dict[int, tuple[int, int]]:
    """Find the shapes of the ``todo`` entries in a header of any layout (slow, but rare)."""
    wanted: dict[str | None, int] = {header.names[i]: i for i in todo}
    spans: dict[int, tuple[int, int]] = {}
    for match in _ENTRY.finditer(header.raw):
        index = wanted.get(_entry_name(match.group(1)))
        if index is None:
            continue
        shape = _SHAPE.search(header.raw, match.start(2), match.end(2))
        if shape is not None:
            spans[index] = shape.span(1)  # a name written twice: the reader keeps the last entry, so do we
    missing = [header.names[i] for i in todo if i not in spans]
    if missing:
        raise CheckpointError(header.path, "cannot locate this tensor's shape in the header text", tensor=missing[0])
    return spans


def _entry_name(quoted: bytes) -> str | None:
    try:
        return json.loads(b'"' + quoted + b'"') if b"\\" in quoted else quoted.decode("utf-8")
    except ValueError:
        return None


def _edited_inner(inner: bytes, to: Layout) -> bytes:
    if to == "scalar":
        return inner.replace(b"1", b" ", 1)
    if inner:
        return b"1" + inner[1:]
    return b"1"


def _padded(raw: bytes) -> bytes:
    """Pad a header with spaces to a multiple of 8 bytes, as the reference writer does."""
    return raw + b" " * (-len(raw) % 8)


def _check(header: SafetensorsHeader, edit: HeaderEdit, want: tuple[int, ...]) -> None:
    """The new header must say what the old one said, but for the changed tensors' shapes, which must be ``want``.

    Bytes change only inside the shape brackets of entries whose key is a
    changed tensor. Should such a match not be that tensor's entry (text in
    an ignored field, say), the documents differ and nothing is written.
    """
    try:
        old, new = json.loads(header.raw), json.loads(edit.new_raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(header.path, f"planned header edit does not parse ({exc}); nothing written") from None
    for name in edit.changed:
        if not isinstance(old.get(name), dict):
            raise CheckpointError(header.path, "entry is not a JSON object, so it cannot be edited", tensor=name)
        old[name]["shape"] = list(want)
    if new != old:
        changed = next((n for n in edit.changed if new.get(n) != old.get(n)), None)
        raise CheckpointError(header.path, "planned header edit would change the header wrongly", tensor=changed)
