"""JSON text exactly as ``json.dumps(value, indent=2, allow_nan=False)`` writes it, written in pieces, at the
speed a large check's documents need.

A legacy DeepSeek-V4-Flash-shaped checkpoint has 66,048 findings: 45 MB of
JSON, 35 MB of SARIF. The standard library indents in Python, a generator
per value, which took longer than the whole check (``benchmarks/formats.py``).
So a long list of records of one shape is given as :class:`Records`: each
record is text already, filled into a template that ``json.dumps`` made once
from the record's shape (:class:`Template`), with each string escaped by
the standard library's own escaping (:data:`text`, in C); the lists are
written a batch of records at a time, so no document is ever whole in
memory. The rest of the document is ``json.dumps``' own. A test holds the
text to ``json.dumps`` of the document parsed back
(tests/base/doctor/test_output_formats.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from json.encoder import encode_basestring_ascii
from typing import Any, Protocol

__all__ = ["SLOT", "Records", "Template", "Writer", "in_a_list", "listed", "nested", "scalar", "text", "write"]

SLOT = "\0slot\0"
"""In a shape given to :class:`Template`, what each record fills in: a whole value, filled with its JSON text
(:data:`text`, :func:`scalar`, :func:`nested`); or a part of a string (``f"{SLOT}: {SLOT}"``), filled with the
characters JSON text escapes it to, without the quotes."""

text: Callable[[str], str] = encode_basestring_ascii
"""A string as JSON text, as ``json.dumps`` writes it: quoted, every control character and every character outside
ASCII escaped."""

_SLOT_TEXT = encode_basestring_ascii(SLOT)
_RECORDS = re.compile(r'"\\u0000records (\d+)\\u0000"')
_BATCH = 2048
"""How many records are written at a time: few writes, and no document whole in memory."""


class Writer(Protocol):
    """Where a format writes: a text stream (standard output, which encodes it)."""

    def write(self, text: str, /) -> object: ...


class Records:
    """A list in a document given to :func:`write`, ``depth`` lists or objects down (1 for a value of the
    document's own keys), whose items are JSON text already, each as ``json.dumps`` writes it one level further
    down (a :class:`Template` of ``depth + 1``). They are read only as they are written, ``batch`` at a time:
    fewer for large items (a SARIF result of 1,000 locations is most of a megabyte)."""

    def __init__(self, items: Iterable[str], depth: int, batch: int = _BATCH) -> None:
        self.items, self.depth, self.batch = items, depth, batch


def in_a_list(document: Any) -> Any:
    """``document`` as an item of a list given to :func:`write`: each :class:`Records` in it one level further
    down, its items' text indented one level more, as ``json.dumps`` would write them there."""
    if isinstance(document, Records):
        return Records(
            map(str.replace, document.items, repeat("\n"), repeat("\n  ")), document.depth + 1, document.batch
        )
    if isinstance(document, dict):
        return {key: in_a_list(value) for key, value in document.items()}
    if isinstance(document, list):
        return list(map(in_a_list, document))
    return document


def scalar(value: str | float | bool | None) -> str:
    """A string, number, boolean or null as JSON text, as ``json.dumps(value, allow_nan=False)`` writes it."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    return json.dumps(value, allow_nan=False)


def nested(value: Any, depth: int) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` writes it ``depth`` lists or objects down."""
    return json.dumps(value, indent=2, allow_nan=False).replace("\n", "\n" + "  " * depth)


def listed(items: list[str], depth: int) -> str:
    """The list of ``items`` as ``json.dumps(..., indent=2)`` writes it ``depth`` lists or objects down, each item
    JSON text already, as it is written one level further down (a :class:`Template` of ``depth + 1``)."""
    if not items:
        return "[]"
    inner = "\n" + "  " * (depth + 1)
    return "[" + inner + ("," + inner).join(items) + "\n" + "  " * depth + "]"


class Template:
    """A record's JSON text, as ``json.dumps(shape, indent=2)`` writes it ``depth`` lists or objects down, but for
    each :data:`SLOT` in ``shape``, which :meth:`fill` fills in."""

    __slots__ = ("_parts", "_size")

    def __init__(self, shape: Any, depth: int) -> None:
        # JSON text holds no NUL (json.dumps escapes it), so a NUL marks where each slot was
        marked = nested(shape, depth).replace(_SLOT_TEXT, "\0").replace(_SLOT_TEXT[1:-1], "\0")
        self._parts = marked.split("\0")
        self._size = 2 * len(self._parts) - 1

    def fill(self, *values: str) -> str:
        """The record's text, each slot, in order, filled with the value for it (its JSON text); a value too many
        or too few is a ValueError."""
        text = [""] * self._size
        text[::2] = self._parts
        text[1::2] = values
        return "".join(text)


def write(out: Writer, document: Any) -> None:
    """Write ``document`` and a newline as ``json.dumps(document, indent=2, allow_nan=False)`` and ``print``
    would, each :class:`Records` in it as the list of its items."""
    lists: list[Records] = []

    def placeholder(value: object) -> str:
        if not isinstance(value, Records):
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        lists.append(value)
        return f"\0records {len(lists) - 1}\0"

    pieces = _RECORDS.split(json.dumps(document, indent=2, allow_nan=False, default=placeholder))
    out.write(pieces[0])
    for i in range(1, len(pieces), 2):
        records = lists[int(pieces[i])]
        line = pieces[i - 1].rpartition("\n")[2]  # the list's line: after its key, or alone in a list
        if len(line) - len(line.lstrip(" ")) != 2 * records.depth:
            raise ValueError(f"records said to be at depth {records.depth} are at {line!r}")
        _write_list(out, records.items, "  " * records.depth, records.batch)
        out.write(pieces[i + 1])
    out.write("\n")


def _write_list(out: Writer, items: Iterable[str], outer: str, size: int) -> None:
    """The list of ``items`` whose line starts with ``outer``: its items one level further in, ``size`` at a
    time."""
    between = ",\n" + outer + "  "
    batches = _batches(iter(items), size)
    first = next(batches, None)
    if first is None:
        out.write("[]")
        return
    out.write("[\n" + outer + "  " + between.join(first))
    for batch in batches:
        out.write(between + between.join(batch))
    out.write("\n" + outer + "]")


def _batches(items: Iterator[str], size: int) -> Iterator[list[str]]:
    while batch := [item for _, item in zip(range(size), items, strict=False)]:
        yield batch
