"""Read and validate a safetensors header without torch, exactly as strictly as the reference reader.

The format is an 8-byte little-endian header length, a JSON header, then raw
tensor bytes. We accept what safetensors' own reader (the ``safetensors``
package, Rust) accepts and refuse what it refuses, and say which rule failed:

- the file holds at least the 8-byte length; the header is at most
  100,000,000 bytes and lies inside the file;
- the header is UTF-8 and strict JSON (no NaN, no lone surrogates, no raw
  control characters in strings, nesting at most 127 deep), one object with
  only JSON whitespace around it;
- ``__metadata__`` appears at most once and is null or an object of
  strings; any other key is a tensor whose entry is an object (or a
  3-element array) with exactly one ``dtype``, ``shape`` and
  ``data_offsets``; other fields are ignored. A tensor named twice keeps its
  last entry, and every entry must be valid;
- ``dtype`` is one the reference knows; shape dimensions and offsets are
  integers in [0, 2^64);
- sorted by offsets, the tensors tile the data section from 0 to its last
  byte with no gap and no overlap, and each holds exactly the bytes its
  dtype and shape need (a whole number of bytes, computed without
  overflowing 64 bits).

Each refusal raises :class:`CheckpointError` naming the file, the tensor and
the rule. ``tests/base/files/test_reference_reader.py`` checks the verdict and the
tensor table against the ``safetensors`` package on generated and mutated
headers.

Only the header is read, never the data. A large MoE has hundreds of
thousands of entries, so headers in the reference writer's compact layout
are read by one regular expression whose matches, each led by its comma,
must tile the header exactly; they are then validated column-wise. Any
other layout is read with ``json`` and the rules above. Both give the same
result; the fast path also records where each entry's shape is written,
which is what an in-place edit needs.
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
from functools import cached_property
from itertools import accumulate, compress, repeat
from pathlib import Path
from typing import Any, NamedTuple

from scalar_scales.errors import CheckpointError

__all__ = [
    "FileIdentity",
    "SafetensorsHeader",
    "TensorEntry",
    "file_identity",
    "DTYPE_BITS",
    "MAX_HEADER_BYTES",
    "ending_with",
    "header_length_of",
    "parse_header",
    "read_header",
]

MAX_HEADER_BYTES = 100_000_000
"""The reference reader refuses larger headers; so do we."""

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
"""Every dtype the reference reader (safetensors 0.8) knows, with its size in bits."""

_USIZE_END = 1 << 64
_MAX_DEPTH = 127
"""The deepest nesting of arrays and objects serde_json accepts (its recursion limit is 128)."""
_METADATA_KEY = "__metadata__"
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")

_INT = r"(?:0|[1-9][0-9]*)"
_NAME = r'[^"\\\x00-\x1f]*'
"""A JSON string's content with no escape and no control character (which JSON forbids raw)."""
_CANONICAL_ENTRY = re.compile(
    rf',"([^"]*)":\{{"dtype":"([A-Z0-9_]+)","shape":\[( ?|{_INT}(?:,{_INT})*)\],'
    rf'"data_offsets":\[({_INT}),({_INT})\]\}}'
)
"""A tensor's entry in the compact layout. Its name is matched up to the next quote, and only then, all names at
once, checked for escapes and control characters (:func:`_parse_canonical`): a class that leaves them out
makes the match half as slow again."""
_CONTROL_CHARACTERS = bytes(range(0x20))
_ENTRY_FRAME = len(',"":{"dtype":"","shape":[],"data_offsets":[,]}')
_SHAPE_AFTER_NAME_AND_DTYPE = len('"":{"dtype":"","shape":[')
_METADATA = re.compile(rf'\{{"__metadata__":(\{{(?:"{_NAME}":"{_NAME}"(?:,"{_NAME}":"{_NAME}")*)?\}})')


class TensorEntry(NamedTuple):
    """One tensor as the header describes it; offsets are relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header, held column-wise: entry ``i`` is ``names[i]``, ``dtypes[i]``, ...

    ``shape_spans``, for headers in the compact layout, gives for each entry
    the byte range inside ``raw`` between the brackets of its shape; None for
    any other layout. It is worked out only when an edit asks for it.
    ``path`` is a local :class:`Path`, or the ``hf://`` address (a string) of
    a remote file read by range requests. ``identity``, for a local file, is
    the one that was read (:func:`file_identity`), so that an edit can tell it
    still has it.
    """

    path: Path | str
    raw: bytes
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    compact: _CompactLayout | None
    identity: FileIdentity | None = None

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
        lengths = map(sum, zip(names, dtypes, shapes, begins, ends, repeat(_ENTRY_FRAME), strict=False))
        starts = accumulate(lengths, initial=self.start)
        shape_begins = list(map(sum, zip(starts, names, dtypes, repeat(_SHAPE_AFTER_NAME_AND_DTYPE), strict=False)))
        return list(zip(shape_begins, map(operator.add, shape_begins, shapes), strict=True))


class _Columns(NamedTuple):
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    compact: _CompactLayout | None


def ending_with(names: list[str], suffix: str | tuple[str, ...]) -> list[int]:
    """The indices of the names that end with ``suffix`` (or one of several), found at C speed: a large MoE's
    shard has thousands of tensors."""
    return list(compress(range(len(names)), map(str.endswith, names, repeat(suffix))))


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Read and fully validate the header of the safetensors file at ``path``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            identity = file_identity(os.fstat(f.fileno()))
            header_length = header_length_of(path, f.read(8), identity.size)
            raw = f.read(header_length)
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    return parse_header(path, raw, identity.size, identity)


class FileIdentity(NamedTuple):
    """Which file, in which state: the same on reading and on editing means no one changed it in between."""

    device: int
    inode: int
    size: int
    modified_ns: int


def file_identity(status: os.stat_result) -> FileIdentity:
    return FileIdentity(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def header_length_of(path: str | os.PathLike[str], prefix: bytes, file_size: int) -> int:
    """The header length a file's first 8 bytes declare, checked against the limit and the file's size."""
    if len(prefix) < 8:
        raise CheckpointError(path, f"truncated: {file_size} bytes, too short for the 8-byte header length")
    (header_length,) = struct.unpack("<Q", prefix)
    if header_length > MAX_HEADER_BYTES:
        raise CheckpointError(path, f"header length {header_length} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + header_length > file_size:
        raise CheckpointError(path, f"header length {header_length} runs past the end of the file ({file_size} bytes)")
    return header_length


def parse_header(
    path: Path | str, raw: bytes, file_size: int, identity: FileIdentity | None = None
) -> SafetensorsHeader:
    """Validate the header ``raw`` of a ``file_size``-byte file: what :func:`read_header` does once it has the bytes.

    ``path`` names the file in errors: a local path, or the address of a
    remote file whose bytes came by range requests.
    """
    with _collector_paused():
        columns = _parse_canonical(raw) or _parse_json(path, raw)
    _validate(path, columns, data_size=file_size - 8 - len(raw))
    return SafetensorsHeader(
        path=path,
        raw=raw,
        names=columns.names,
        dtypes=columns.dtypes,
        shapes=columns.shapes,
        begins=columns.begins,
        ends=columns.ends,
        metadata=columns.metadata,
        compact=columns.compact,
        identity=identity,
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
    """Columns of a header in the reference writer's compact layout, or None for any other layout.

    ASCII only, no escapes, no control characters, no name twice, no tensor
    named like the metadata: anything else takes the general path, which
    knows those rules.
    """
    if not raw.isascii():
        return None
    text = raw.decode("ascii").rstrip(" ")
    if not (text.startswith("{") and text.endswith("}")) or "\\" in text:
        return None  # no escape anywhere
    metadata = None
    if text.startswith('{"__metadata__":'):
        match = _METADATA.match(text)
        if match is None:
            return None
        metadata, start = json.loads(match.group(1)), match.end()
        body = text[start:-1]
    else:
        start, body = 0, "," + text[1:-1]
    if body in ("", ","):
        empty = _CompactLayout(start + 1, ([], [], [], [], []))
        return _Columns([], [], [], [], [], metadata, empty) if body == "" or metadata is None else None
    entries = _CANONICAL_ENTRY.findall(body)
    if not entries:
        return None
    names, dtypes, shape_texts, begin_texts, end_texts = texts = tuple(map(list, zip(*entries, strict=True)))
    del entries
    joined = list(map("".join, texts))
    if sum(map(len, joined)) + len(names) * _ENTRY_FRAME != len(body):
        return None  # the matches do not tile the body: something else is in there
    if len(joined[0].encode("ascii").translate(None, _CONTROL_CHARACTERS)) != len(joined[0]):
        return None  # a name holds a control character
    if len(set(names)) != len(names) or _METADATA_KEY in names:
        return None
    parsed_shapes = {t: tuple(int(d) for d in t.split(",")) if t.strip() else () for t in set(shape_texts)}
    ends = list(map(int, end_texts))
    if begin_texts[0] == "0" and begin_texts[1:] == end_texts[:-1]:  # written in offset order, as usual
        begins = [0, *ends[:-1]]
    else:
        begins = list(map(int, begin_texts))
    return _Columns(
        names=names,
        dtypes=dtypes,
        shapes=list(map(parsed_shapes.__getitem__, shape_texts)),
        begins=begins,
        ends=ends,
        metadata=metadata,
        compact=_CompactLayout(start + 1, texts),
    )


class _Object(list):
    """A JSON object as its (key, value) pairs, in order and with repeats: the rules differ by where it is."""


_NOT_A_SIZE = object()
"""What a negative JSON integer parses to: never a valid size or offset, and ``-0`` is no exception."""


def _parse_json(path: Path | str, raw: bytes) -> _Columns:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "header is not valid UTF-8") from None
    try:
        document = json.loads(
            text,
            object_pairs_hook=_Object,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_size_or_not,
        )
    except RecursionError:
        raise CheckpointError(path, f"header is not valid JSON (nested deeper than {_MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise CheckpointError(path, f"header is not valid JSON ({exc})") from None
    problem = _strict_json_problem(document)
    if problem:
        raise CheckpointError(path, f"header is not valid JSON ({problem})")
    if not isinstance(document, _Object):
        kind = "null" if document is None else type(document).__name__
        raise CheckpointError(path, f"header is a JSON {kind}, not an object")
    metadata: dict[str, str] | None = None
    seen_metadata = False
    tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    for name, spec in document:
        if name == _METADATA_KEY:
            if seen_metadata:
                raise CheckpointError(path, f"{_METADATA_KEY} appears more than once")
            seen_metadata = True
            metadata = _metadata(path, spec)
        else:
            tensors[name] = _entry_fields(path, name, spec)
    columns = tuple(map(list, zip(*tensors.values(), strict=True))) or ([], [], [], [])
    dtypes, shapes, begins, ends = columns
    return _Columns(list(tensors), dtypes, shapes, begins, ends, metadata, compact=None)


def _refuse_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} out of range")
    return value


def _size_or_not(text: str) -> Any:
    """An integer as the reference reads one: too long for a 64-bit float is out of range, even where ignored."""
    if len(text) > 300 and math.isinf(float(text)):
        raise ValueError(f"number {text[:12]}... out of range")
    return _NOT_A_SIZE if text.startswith("-") else int(text)


def _strict_json_problem(value: Any, depth: int = 0) -> str | None:
    """What ``json`` accepts and strict JSON does not: nesting past serde_json's limit, lone surrogates."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone surrogate"
        return None
    if isinstance(value, list):
        if depth + 1 > _MAX_DEPTH:
            return f"nested deeper than {_MAX_DEPTH} levels"
        items = (part for pair in value for part in pair) if isinstance(value, _Object) else value
        return next((p for p in (_strict_json_problem(item, depth + 1) for item in items) if p), None)
    return None


def _metadata(path: Path | str, spec: object) -> dict[str, str] | None:
    if spec is None:
        return None
    if not isinstance(spec, _Object) or not all(isinstance(value, str) for _, value in spec):
        raise CheckpointError(path, f"{_METADATA_KEY} must be null or map strings to strings")
    return dict(spec)


def _entry_fields(path: Path | str, name: str, spec: object) -> tuple[str, tuple[int, ...], int, int]:
    """One tensor's dtype, shape and offsets, read as the reference's ``TensorInfo`` is."""
    if isinstance(spec, _Object):
        fields: dict[str, object] = {}
        for key, value in spec:
            if key in _ENTRY_FIELDS:
                if key in fields:
                    raise CheckpointError(path, f"entry has {key} twice", tensor=name)
                fields[key] = value
        missing = [key for key in _ENTRY_FIELDS if key not in fields]
        if missing:
            raise CheckpointError(path, f"entry has no {missing[0]}", tensor=name)
        dtype, shape, offsets = (fields[key] for key in _ENTRY_FIELDS)
    elif type(spec) is list and len(spec) == 3:
        dtype, shape, offsets = spec
    else:
        raise CheckpointError(path, "entry is not an object of dtype, shape and data_offsets", tensor=name)
    if isinstance(dtype, _Object) and len(dtype) == 1 and dtype[0][1] is None:
        dtype = dtype[0][0]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise CheckpointError(path, f"unknown dtype {_shown(dtype)}", tensor=name)
    if not _is_size_list(shape):
        raise CheckpointError(path, f"shape {_shown(shape)} is not a list of integers in [0, 2^64)", tensor=name)
    if not _is_size_list(offsets) or len(offsets) != 2:
        problem = f"data_offsets {_shown(offsets)} is not a pair of integers in [0, 2^64)"
        raise CheckpointError(path, problem, tensor=name)
    return dtype, tuple(shape), offsets[0], offsets[1]


def _shown(value: object) -> str:
    """A parsed JSON value, shortly, as it was written."""
    if value is _NOT_A_SIZE:
        return "(a negative number)"
    if isinstance(value, _Object):
        value = dict(value)
    text = json.dumps(value, default=lambda _: "-")
    return text if len(text) <= 60 else text[:57] + "..."


def _is_size_list(value: object) -> bool:
    return type(value) is list and all(type(v) is int and v < _USIZE_END for v in value)


def _element_count(shape: tuple[int, ...]) -> int | None:
    """The number of elements, or None where the reference's checked 64-bit product overflows on the way."""
    count = 1
    for dimension in shape:
        count *= dimension
        if count >= _USIZE_END:
            return None
    return count


def _bit_count(elements: int | None, bits: int) -> int | None:
    """The tensor's size in bits, or None where the reference's 64-bit arithmetic overflows."""
    if elements is None or elements * bits >= _USIZE_END:
        return None
    return elements * bits


def _byte_count(sized: tuple[tuple[int, ...], str]) -> int | None:
    """A tensor's size in bytes, from its shape and dtype; None where it is no whole number of bytes or the
    reference's 64-bit arithmetic overflows."""
    bits = _bit_count(_element_count(sized[0]), DTYPE_BITS[sized[1]])
    return None if bits is None or bits % 8 else bits // 8


def _validate(path: Path | str, columns: _Columns, data_size: int) -> None:
    """The reference's checks, over whole columns at C speed; a failure is then located and named."""
    names, dtypes, shapes, begins, ends = columns[:5]
    if not DTYPE_BITS.keys() >= set(dtypes):
        i = next(i for i, dtype in enumerate(dtypes) if dtype not in DTYPE_BITS)
        raise CheckpointError(path, f"unknown dtype {json.dumps(dtypes[i])}", tensor=names[i])
    if max(begins, default=0) >= _USIZE_END or max(ends, default=0) >= _USIZE_END:
        i = next(i for i in range(len(names)) if max(begins[i], ends[i]) >= _USIZE_END)
        raise CheckpointError(path, f"data_offsets [{begins[i]}, {ends[i]}] exceed 2^64", tensor=names[i])
    if begins[:1] in ([], [0]) and begins[1:] == ends[:-1]:
        order, sorted_begins, sorted_ends = range(len(names)), begins, ends  # written in offset order, as usual
    else:
        order = sorted(range(len(names)), key=lambda i: (begins[i], ends[i]))
        sorted_begins = list(map(begins.__getitem__, order))
        sorted_ends = list(map(ends.__getitem__, order))
    if (
        sorted_begins[:1] not in ([], [0])
        or sorted_begins[1:] != sorted_ends[:-1]
        or not all(map(operator.le, sorted_begins, sorted_ends))
    ):
        k = next(
            k
            for k in range(len(order))
            if sorted_begins[k] != (sorted_ends[k - 1] if k else 0) or sorted_ends[k] < sorted_begins[k]
        )
        expected = sorted_ends[k - 1] if k else 0
        i = order[k]
        raise CheckpointError(
            path,
            f"data_offsets [{begins[i]}, {ends[i]}] do not start where the tensors before end ({expected}): "
            "tensors must tile the data section without gap or overlap",
            tensor=names[i],
        )
    sized = list(zip(shapes, dtypes, strict=True))
    byte_counts = {pair: _byte_count(pair) for pair in set(sized)}
    needed_bytes = list(map(byte_counts.__getitem__, sized))
    held_bytes = list(map(operator.sub, ends, begins))
    if needed_bytes != held_bytes:
        i = next(i for i in range(len(names)) if needed_bytes[i] != held_bytes[i])
        needed = _bit_count(_element_count(shapes[i]), DTYPE_BITS[dtypes[i]])
        if needed is None:
            problem = f"{dtypes[i]} x {list(shapes[i])} overflows a 64-bit byte count"
        elif needed % 8:
            problem = f"{dtypes[i]} x {list(shapes[i])} is {needed} bits, not a whole number of bytes"
        else:
            problem = f"holds {ends[i] - begins[i]} bytes but {dtypes[i]} x {list(shapes[i])} needs {needed // 8}"
        raise CheckpointError(path, problem, tensor=names[i])
    covered = sorted_ends[-1] if sorted_ends else 0
    if covered != data_size:
        raise CheckpointError(
            path,
            f"tensors cover {covered} bytes but the data section holds {data_size}: "
            "the file must end where the last tensor ends",
        )
