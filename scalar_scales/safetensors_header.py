"""Read and validate a safetensors header without torch.

The format is an 8-byte little-endian header length, a JSON object, then raw
tensor bytes. We treat every file as hostile, like the reference reader: the
header size is bounded, every offset is checked against the file, byte ranges
may not overlap, names may not repeat, and each byte count must match
dtype x shape. Each check raises :class:`CheckpointError` naming the file,
the tensor and the problem.

Only the header is read, never the data. A large MoE has hundreds of
thousands of entries, so headers in the reference writer's compact layout
are read by one regular expression whose matches must tile the header
exactly, and validated column-wise. Any other layout is read with ``json``.
Both give the same result; the fast path also records where each entry's
shape is written, which is what an in-place edit needs.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import accumulate, compress, repeat
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "CheckpointError",
    "SafetensorsHeader",
    "TensorEntry",
    "MAX_HEADER_BYTES",
    "read_header",
]

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""The reference reader refuses larger headers; so do we."""

_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

_INT = r"(?:0|[1-9][0-9]*)"
_CANONICAL_ENTRY = re.compile(
    rf'"([^"\\]*)":\{{"dtype":"([A-Z0-9_]+)","shape":\[( ?|{_INT}(?:,{_INT})*)\],'
    rf'"data_offsets":\[({_INT}),({_INT})\]\}}'
)
_ENTRY_FRAME = len('"":{"dtype":"","shape":[],"data_offsets":[,]}')
_SHAPE_AFTER_NAME_AND_DTYPE = len('"":{"dtype":"","shape":[')
_METADATA = re.compile(r'\{"__metadata__":(\{(?:"[^"\\]*":"[^"\\]*"(?:,"[^"\\]*":"[^"\\]*")*)?\})')


class CheckpointError(Exception):
    """A checkpoint file we refuse to read or change.

    The message is one line, ``<file>: [<tensor>: ]<problem>``, fit to show a
    user as it is.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, tensor: str | None = None):
        self.path = str(path)
        self.problem = problem
        self.tensor = tensor
        where = f"{_printable(self.path)}: {_printable(tensor)}: " if tensor else f"{_printable(self.path)}: "
        super().__init__(where + problem)

    def __reduce__(self) -> tuple[type, tuple[str, str, str | None]]:
        """Rebuild from the three fields: shards are read in worker processes, and errors travel back."""
        return (type(self), (self.path, self.problem, self.tensor))


def _printable(text: str) -> str:
    """``text`` as it is, or JSON-quoted when it holds control characters: errors stay on one line."""
    return text if text.isprintable() else json.dumps(text)


class TensorEntry(NamedTuple):
    """One tensor as the header describes it; offsets are relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header, held column-wise: entry ``i`` is ``names[i]``, ``dtypes[i]``, ...

    ``shape_spans``, for headers in the compact layout, gives for each entry
    the byte range inside ``raw`` between the brackets of its shape; None for
    any other layout. It is worked out only when an edit asks for it.
    """

    path: Path
    raw: bytes
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    compact: _CompactLayout | None

    @property
    def header_length(self) -> int:
        return len(self.raw)

    @property
    def data_start(self) -> int:
        return 8 + len(self.raw)

    @cached_property
    def shape_spans(self) -> list[tuple[int, int]] | None:
        return None if self.compact is None else self.compact.shape_spans()

    @cached_property
    def tensors(self) -> dict[str, TensorEntry]:
        return {
            name: TensorEntry(name, dtype, shape, begin, end)
            for name, dtype, shape, begin, end in zip(
                self.names, self.dtypes, self.shapes, self.begins, self.ends, strict=True
            )
        }


class _CompactLayout(NamedTuple):
    """Where the entries of a compact header sit: where the first starts, and each entry's texts.

    Kept as columns of strings rather than one tuple per entry: strings are
    not tracked by the garbage collector, tuples are.
    """

    start: int
    texts: tuple[list[str], list[str], list[str], list[str], list[str]]

    def shape_spans(self) -> list[tuple[int, int]]:
        names, dtypes, shapes, begins, ends = (list(map(len, column)) for column in self.texts)
        lengths = map(sum, zip(names, dtypes, shapes, begins, ends, repeat(_ENTRY_FRAME + 1), strict=False))
        starts = accumulate(lengths, initial=self.start)
        shape_begins = list(map(sum, zip(starts, names, dtypes, repeat(_SHAPE_AFTER_NAME_AND_DTYPE), strict=False)))
        return list(zip(shape_begins, map(operator.add, shape_begins, shapes), strict=True))


class _Columns(NamedTuple):
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: object
    compact: _CompactLayout | None


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Read and fully validate the header of the safetensors file at ``path``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(path, f"truncated: {file_size} bytes, too short for the 8-byte header length")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > MAX_HEADER_BYTES:
                raise CheckpointError(path, f"header length {header_length} exceeds the {MAX_HEADER_BYTES}-byte limit")
            if 8 + header_length > file_size:
                raise CheckpointError(
                    path, f"header length {header_length} runs past the end of the file ({file_size} bytes)"
                )
            raw = f.read(header_length)
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    with _collector_paused():
        columns = _parse_canonical(raw) or _parse_json(path, raw)
    metadata = columns.metadata
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise CheckpointError(path, "__metadata__ must map strings to strings")
    _validate(path, columns, data_size=file_size - 8 - len(raw))
    return SafetensorsHeader(
        path=path,
        raw=raw,
        names=columns.names,
        dtypes=columns.dtypes,
        shapes=columns.shapes,
        begins=columns.begins,
        ends=columns.ends,
        metadata=metadata,  # type: ignore[arg-type]
        compact=columns.compact,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a header is parsed.

    Parsing builds many small tuples and strings, none in a cycle; the
    collections they would trigger cost about a third of the parse time on a
    V4-Flash-sized checkpoint.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_canonical(raw: bytes) -> _Columns | None:
    """Columns of a header in the reference writer's compact ASCII layout, or None for any other layout."""
    if not raw.isascii():
        return None
    text = raw.decode("ascii").rstrip(" ")
    if not (text.startswith("{") and text.endswith("}")) or "\\" in text:
        return None
    start, metadata = 1, None
    if text.startswith('{"__metadata__":'):
        match = _METADATA.match(text)
        if match is None:
            return None
        metadata, start = json.loads(match.group(1)), match.end()
        if text[start] == ",":
            start += 1
    body_end = len(text) - 1
    entries = _CANONICAL_ENTRY.findall(text, start, body_end)
    if not entries:
        empty = _CompactLayout(start, ([], [], [], [], []))
        return _Columns([], [], [], [], [], metadata, empty) if start == body_end else None
    names, dtypes, shape_texts, begin_texts, end_texts = texts = tuple(map(list, zip(*entries, strict=True)))
    del entries
    matched = sum(sum(map(len, column)) for column in (names, dtypes, shape_texts, begin_texts, end_texts))
    if matched + len(names) * (_ENTRY_FRAME + 1) - 1 != body_end - start:
        return None  # the matches do not tile the body: something else is in there
    parsed_shapes = {t: tuple(int(d) for d in t.split(",")) if t.strip() else () for t in set(shape_texts)}
    return _Columns(
        names=names,
        dtypes=dtypes,
        shapes=list(map(parsed_shapes.__getitem__, shape_texts)),
        begins=list(map(int, begin_texts)),
        ends=list(map(int, end_texts)),
        metadata=metadata,
        compact=_CompactLayout(start, texts),
    )


def _parse_json(path: Path, raw: bytes) -> _Columns:
    try:
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=partial(_unique_keys, path))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CheckpointError(path, f"header is a JSON {type(document).__name__}, not an object")
    metadata = document.pop("__metadata__", None)
    names, dtypes, shapes, begins, ends = [], [], [], [], []
    for name, spec in document.items():
        dtype, shape, begin, end = _entry_fields(path, name, spec)
        names.append(name)
        dtypes.append(dtype)
        shapes.append(shape)
        begins.append(begin)
        ends.append(end)
    return _Columns(names, dtypes, shapes, begins, ends, metadata, compact=None)


def _unique_keys(path: Path, pairs: list[tuple[str, object]]) -> dict[str, object]:
    """Build a JSON object, refusing a repeated key (``json`` would silently keep the last)."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise CheckpointError(path, "appears more than once in the header", tensor=repeated)
    return document


def _entry_fields(path: Path, name: str, spec: object) -> tuple[str, tuple[int, ...], int, int]:
    if not isinstance(spec, dict):
        raise CheckpointError(path, "entry is not an object", tensor=name)
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _DTYPE_BITS:
        raise CheckpointError(path, f"unknown dtype {dtype!r}", tensor=name)
    if not _is_int_list(shape) or any(d < 0 for d in shape):
        raise CheckpointError(path, f"shape {shape!r} is not a list of non-negative integers", tensor=name)
    if not _is_int_list(offsets) or len(offsets) != 2:
        raise CheckpointError(path, f"data_offsets {offsets!r} is not a pair of integers", tensor=name)
    return dtype, tuple(shape), offsets[0], offsets[1]


def _is_int_list(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _validate(path: Path, columns: _Columns, data_size: int) -> None:
    """Every check at C speed over whole columns; a failure is then located and named."""
    names, dtypes, shapes, begins, ends = columns[:5]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        duplicate = next(n for n in names if n in seen or seen.add(n))  # type: ignore[func-returns-value]
        raise CheckpointError(path, "appears more than once in the header", tensor=duplicate)
    bits = list(map(_DTYPE_BITS.get, dtypes))
    if None in bits:
        i = bits.index(None)
        raise CheckpointError(path, f"unknown dtype {dtypes[i]!r}", tensor=names[i])
    if not (all(map(operator.le, begins, ends)) and min(begins, default=0) >= 0 and max(ends, default=0) <= data_size):
        i = next(i for i in range(len(names)) if not 0 <= begins[i] <= ends[i] <= data_size)
        raise CheckpointError(
            path,
            f"data_offsets [{begins[i]}, {ends[i]}] out of range (data section is {data_size} bytes)",
            tensor=names[i],
        )
    needed_bits = list(map(operator.mul, map(math.prod, shapes), bits))
    held_bits = list(map(operator.mul, map(operator.sub, ends, begins), repeat(8)))
    if needed_bits != held_bits:
        i = next(i for i in range(len(names)) if needed_bits[i] != held_bits[i])
        raise CheckpointError(
            path,
            f"holds {ends[i] - begins[i]} bytes but {dtypes[i]} x {list(shapes[i])} needs {needed_bits[i] / 8:g}",
            tensor=names[i],
        )
    occupied = sorted(compress(range(len(names)), map(operator.ne, begins, ends)), key=begins.__getitem__)
    sorted_begins = list(map(begins.__getitem__, occupied))
    sorted_ends = list(map(ends.__getitem__, occupied))
    if not all(map(operator.le, sorted_ends[:-1], sorted_begins[1:])):
        k = next(k for k in range(1, len(occupied)) if sorted_begins[k] < sorted_ends[k - 1])
        previous, current = occupied[k - 1], occupied[k]
        raise CheckpointError(
            path,
            f"data_offsets [{begins[current]}, {ends[current]}] overlap {names[previous]} "
            f"[{begins[previous]}, {ends[previous]}]",
            tensor=names[current],
        )
