"""Read and validate a safetensors header without torch, exactly as strictly as the reference reader.

The format is an 8-byte little-endian header length, a JSON header, then raw
tensor bytes. We accept what safetensors' own reader (the ``safetensors``
package, Rust, with serde_json) accepts and refuse what it refuses, and say
which rule failed:

- the file holds at least the 8-byte length; the header is at most
  100,000,000 bytes and lies inside the file;
- the header is UTF-8 and strict JSON (no NaN, no number out of a 64-bit
  float's range, even where ignored; no lone surrogates, no raw control
  characters in strings; nesting at most 127 deep), one object with only
  JSON whitespace around it;
- ``__metadata__`` appears at most once and is null or an object of
  strings; any other key is a tensor whose entry is an object (or a
  3-element array) with exactly one ``dtype``, ``shape`` and
  ``data_offsets``; other fields are ignored. A tensor named twice keeps its
  last entry, and every entry must be valid;
- ``dtype`` is one the reference knows; shape dimensions and offsets are
  integers in [0, 2^64) (``-0`` is not one: serde_json reads it as a float);
- sorted by offsets, the tensors tile the data section from 0 to its last
  byte with no gap and no overlap, and each holds exactly the bytes its
  dtype and shape need (a whole number of bytes, computed without
  overflowing 64 bits).

Each refusal raises :class:`CheckpointError` naming the file, the tensor and
the rule. ``tests/base/files/test_reference_reader.py`` checks the verdict and the
tensor table against the ``safetensors`` package on generated and mutated
headers.

Only the header is read, never the data, but a large MoE's shard has
hundreds of thousands of entries, and writers space their JSON as they like.
So there is one parser, ``json.loads``, run once with no hook (C speed,
whatever the spacing), and the rules are checked on whole columns (``map``,
``set``, ``min``, list comparison), never entry by entry in Python. That is
the plain route. ``json`` lets through more than serde_json, and the plain
route vouches for a header only where it can prove that none of it is there:

- a key given twice: ``json`` keeps its last value silently. Each key of an
  object is followed by one colon in the raw header, and any other colon is
  inside a string. The plain route knows every object of its headers (the
  header, the entries, the metadata), so when the raw header holds no more
  colons than their keys and the known strings account for, no key was
  given twice. (A ``\\u`` escape can write a colon the raw bytes do not
  show: then the strings' colons are not counted, which can only turn a
  header away.)
- ``-0``, which ``json`` reads as 0 and serde_json as a float: found by a
  byte search (for ``-``, as fast as ``memchr``; then a regular expression).
- lone surrogates, which ``json`` decodes from ``\\u`` escapes: looked for
  in the strings only where the raw header holds a surrogate escape.
- NaN, floats, integers too long for a float or for Python's ``int``,
  nesting of any depth, ignored fields: a plain header is one whose entries
  are objects of exactly the three fields, with a known dtype, and
  dimensions and offsets that are integers, and whose metadata maps strings
  to strings. Such a header has room for none of them.

Whether those integers lie in [0, 2^64) is left to the checks of offsets
and sizes that every header goes through (:func:`_validate`): where they
pass, the offsets tile the data section and every element count was
computed, as the reference does, in [0, 2^64), so every number is in range;
where they fail on a header with a number out of range, the careful route
reads it again to name the rule it breaks.

Any header the plain route does not vouch for (an ignored field, a name
given twice, an entry written as an array, a quirk above, invalid JSON)
takes the careful route: ``json.loads`` again, with hooks that keep every
key and see every number, then the rules entry by entry. It is linear too,
but several times slower, and real headers rarely need it.

An in-place edit needs to know where each entry's shape is written.
:attr:`SafetensorsHeader.shape_spans` finds every ``"shape":[...]`` by one
scan of the raw header, and trusts what it finds only where that proves it:
the header was read on the plain route (each key once, each entry an object
of exactly the three fields, in the order written), it holds no backslash
(so every quote delimits a string, and ``"shape":[`` can only be a ``shape``
key and its array of integers) and it holds as many of them as entries.
That is the reference writer's compact layout, among others; any other
layout is left to the editor's checked path.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import re
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, compress, repeat
from pathlib import Path
from typing import Literal, NamedTuple, NoReturn, TypeGuard

from scalar_scales.errors import CheckpointError

__all__ = [
    "DTYPE_BITS",
    "LFS_POINTER_START",
    "MAX_HEADER_BYTES",
    "FileIdentity",
    "Layout",
    "SafetensorsHeader",
    "TensorEntry",
    "ending_with",
    "file_identity",
    "header_length_of",
    "parse_header",
    "read_header",
    "stems",
]

MAX_HEADER_BYTES = 100_000_000
"""The reference reader refuses larger headers; so do we."""

LFS_POINTER_START = b"version "
"""The first 8 bytes of a Git LFS pointer (``version https://git-lfs.github.com/spec/v1``, then the oid and the
size): what a clone holds for a shard until ``git lfs pull``. Read as a header length they are
2,336,927,755,350,992,246, over :data:`MAX_HEADER_BYTES`, so no safetensors file starts so, and naming the
pointer only changes what a file already refused is called."""

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
_DTYPE, _SHAPE, _OFFSETS = map(operator.itemgetter, _ENTRY_FIELDS)
_KNOWN_DTYPES = {dtype: dtype for dtype in DTYPE_BITS}
_NEGATIVE_ZERO = re.compile(rb"[\[,:][ \t\n\r]*-0(?![0-9.eE])")
"""``-0`` as a JSON number (or, rarely, as text in a string: that only sends a header the careful way)."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SHAPE_KEY = re.compile(rb'"shape":\[([^\]]*)\]')


Layout = Literal["scalar", "legacy"]
"""How a checkpoint writes its per-tensor scales: 0-D (``scalar``) or (1,) (``legacy``)."""


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

    ``length`` is the header's length in bytes, as its first 8 declare.
    ``shape_spans`` gives for each entry the byte range inside ``raw``
    between the brackets of its shape, where the header proves it (see the
    module's docstring: a plain header with every shape written
    ``"shape":[``); None otherwise. It is worked out only when an edit asks
    for it. ``plain`` says the header was read on the plain route. ``path``
    is a local :class:`Path`, or the ``hf://`` address (a string) of a
    remote file read by range requests. ``identity``, for a local file, is
    the one that was read (:func:`file_identity`), so that an edit can tell
    it still has it. ``kept`` holds the header's bytes where they cannot be
    read again (a remote file, git's staging area); see :attr:`raw`.
    """

    path: Path | str
    length: int
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    plain: bool = False
    identity: FileIdentity | None = None
    kept: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def data_start(self) -> int:
        return 8 + self.length

    @cached_property
    def raw(self) -> bytes:
        """The header's bytes, which only an edit needs: those kept, or else read again from the local file, which
        must still be the one read. A check never edits, and a large MoE's headers, kept, took it 4,000 page
        faults of new memory (benchmarks/check.md)."""
        if self.kept is not None:
            return self.kept
        assert isinstance(self.path, Path), "a header of a remote file keeps its bytes"
        try:
            with open(self.path, "rb") as f:
                unchanged = file_identity(os.fstat(f.fileno())) == self.identity
                f.seek(8)
                raw = f.read(self.length)
        except OSError as exc:
            raise CheckpointError(self.path, f"cannot read: {exc.strerror or exc}") from None
        if not unchanged or len(raw) != self.length:
            raise CheckpointError(self.path, "changed since this run read it; not edited")
        return raw

    @cached_property
    def shape_spans(self) -> list[tuple[int, int]] | None:
        return _shape_spans(self.raw, len(self.names)) if self.plain else None

    @cached_property
    def tensors(self) -> dict[str, TensorEntry]:
        return {
            name: TensorEntry(name, dtype, shape, begin, end)
            for name, dtype, shape, begin, end in zip(
                self.names, self.dtypes, self.shapes, self.begins, self.ends, strict=True
            )
        }


def _shape_spans(raw: bytes, count: int) -> list[tuple[int, int]] | None:
    """Where each of the ``count`` entries of a plain header writes its shape, or None where that is not proved."""
    if b"\\" in raw:
        return None
    spans = list(map(re.Match.span, _SHAPE_KEY.finditer(raw), repeat(1)))
    return spans if len(spans) == count else None


class _Columns(NamedTuple):
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    plain: bool


def ending_with(names: list[str], suffix: str | tuple[str, ...]) -> list[int]:
    """The indices of the names that end with ``suffix`` (or one of several), found at C speed: a large MoE's
    shard has thousands of tensors."""
    one = suffix[0] if isinstance(suffix, tuple) and len(suffix) == 1 else suffix
    if isinstance(one, str) and one:
        return stems(names, one)[0]
    return list(compress(range(len(names)), map(str.endswith, names, repeat(suffix))))


def stems(names: list[str], suffix: str) -> tuple[list[int], list[str]]:
    """The indices of the names that end with ``suffix`` (not empty), and each one's name without it.

    ``str.removesuffix`` takes its one argument as a fast call, where
    ``str.endswith`` parses its optional ones on every call: over a large
    MoE's 132,096 names, the passes here take 0.7 to 0.8 of the time of one
    ``endswith`` pass, and give the stems (a module's name) besides.
    """
    cut = list(map(str.removesuffix, names, repeat(suffix)))
    at = list(compress(range(len(names)), map(operator.ne, cut, names)))
    return at, list(map(cut.__getitem__, at))


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
    """The header length a file's first 8 bytes declare, checked against the limit and the file's size; a Git
    LFS pointer is refused as one, since "header length 2336927755350992246" would not tell the user to pull."""
    if len(prefix) < 8:
        raise CheckpointError(path, f"truncated: {file_size} bytes, too short for the 8-byte header length")
    if prefix[:8] == LFS_POINTER_START:
        raise CheckpointError(path, "a Git LFS pointer, not the file: run git lfs pull")
    header_length: int = struct.unpack("<Q", prefix)[0]
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
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "header is not valid UTF-8") from None
    data_size = file_size - 8 - len(raw)
    with _collector_paused():
        columns = _read_plain(raw, text)
        if columns is not None:
            try:
                _validate(path, columns, data_size)
            except CheckpointError:
                if _sizes_in_range(columns):
                    raise
                columns = None  # a number out of range: the careful route names the rule it breaks
        if columns is None:
            columns = _read_carefully(path, raw, text)
            _validate(path, columns, data_size)
    return SafetensorsHeader(
        path=path,
        length=len(raw),
        names=columns.names,
        dtypes=columns.dtypes,
        shapes=columns.shapes,
        begins=columns.begins,
        ends=columns.ends,
        metadata=columns.metadata,
        plain=columns.plain,
        identity=identity,
        kept=None if identity is not None and isinstance(path, Path) else raw,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a header is parsed.

    Parsing builds many small objects, none in a cycle; the collections
    they would trigger cost about a third of the parse time on a
    V4-Flash-sized checkpoint.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_plain(raw: bytes, text: str) -> _Columns | None:
    """The columns of a header within the plain route's bounds (module docstring), or None for the careful route.

    Every step runs over whole columns. None says only that this route
    cannot vouch for the header, never that the header is wrong. Dimensions
    and offsets are integers, not yet known to be in [0, 2^64).
    """
    if b"-" in raw and _NEGATIVE_ZERO.search(raw):  # one byte, searched as fast as memchr; two are not
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(document) is not dict:
        return None
    keys = len(document)
    metadata = document.pop(_METADATA_KEY, None)
    if metadata is not None and (type(metadata) is not dict or not {str} >= set(map(type, metadata.values()))):
        return None
    names, specs = list(document), list(document.values())
    del document
    try:
        dtypes = list(map(_KNOWN_DTYPES.__getitem__, map(_DTYPE, specs)))
        shapes, offsets = list(map(_SHAPE, specs)), list(map(_OFFSETS, specs))
        pairs = {2} >= set(map(len, offsets))
    except (KeyError, TypeError):  # not an object of the three fields, an unknown dtype, offsets of no length
        return None
    del specs
    if not pairs or not {list} >= set(map(type, shapes)):
        return None  # offsets of two that are no list fail below: their items are no integers
    begins: list[int] = []
    ends: list[int] = []
    if offsets:
        begins, ends = map(list, zip(*offsets, strict=True))  # the two columns in one call, at C speed
    del offsets
    if not {int} >= set(map(type, chain(begins, ends, chain.from_iterable(shapes)))):
        return None
    escapes = b"\\" in raw and b"\\u" in raw
    if escapes and _SURROGATE_ESCAPE.search(raw) and not _encodable("".join(_strings(names, metadata))):
        return None
    colons = raw.count(b":")
    keys += len(_ENTRY_FIELDS) * len(names) + len(metadata or ())
    if colons != keys and (escapes or colons != keys + "".join(_strings(names, metadata)).count(":")):
        return None  # a key given twice, or a colon in a string the count cannot see
    return _Columns(names, dtypes, _shared(list(map(tuple, shapes))), begins, ends, metadata, plain=True)


def _shared(shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``shapes``, each equal shape one object: a header's many tensors have few shapes, and every later lookup of
    a shape (here, and in the rules) then compares it as the same object."""
    distinct: dict[tuple[int, ...], tuple[int, ...]] = {}
    return list(map(distinct.setdefault, shapes, shapes))


def _strings(names: list[str], metadata: dict[str, str] | None) -> Iterator[str]:
    return chain(names, metadata or (), (metadata or {}).values())


def _sizes_in_range(columns: _Columns) -> bool:
    numbers = list(chain(columns.begins, columns.ends, chain.from_iterable(columns.shapes)))
    return not numbers or 0 <= min(numbers) <= max(numbers) < _USIZE_END


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Object(list[tuple[str, object]]):
    """A JSON object as its (key, value) pairs, in order and with repeats: the rules differ by where it is."""


_NOT_A_SIZE = object()
"""What a negative JSON integer parses to: never a valid size or offset, and ``-0`` is no exception."""


def _read_carefully(path: Path | str, raw: bytes, text: str) -> _Columns:
    """The columns of any header, entry by entry, keeping every key and seeing every number; or the refusal.

    Only the parts no rule reads (ignored fields) are walked for depth and lone surrogates; the names and the
    metadata are looked at for lone surrogates where the raw header holds a surrogate escape. Every other part
    is checked to be a string, or integers, of a known shape: no room for either.
    """
    try:
        document: object = json.loads(
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
    if b"\\" in raw and _SURROGATE_ESCAPE.search(raw) and not _encodable("".join(_names_and_metadata(document))):
        raise CheckpointError(path, "header is not valid JSON (a string holds a lone surrogate)")
    columns = tuple(map(list, zip(*tensors.values(), strict=True))) or ([], [], [], [])
    dtypes, shapes, begins, ends = columns
    return _Columns(list(tensors), dtypes, shapes, begins, ends, metadata, plain=False)


def _names_and_metadata(document: _Object) -> Iterator[str]:
    """Every tensor name, and every string of the metadata, as written: repeats included."""
    for name, spec in document:
        yield name
        if name == _METADATA_KEY and isinstance(spec, _Object):
            yield from (text for pair in spec for text in pair if isinstance(text, str))


def _refuse_constant(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} out of range")
    return value


def _size_or_not(text: str) -> object:
    """An integer as the reference reads one: too long for a 64-bit float is out of range, even where ignored."""
    if len(text) > 300 and math.isinf(float(text)):
        raise ValueError(f"number {text[:12]}... out of range")
    return _NOT_A_SIZE if text.startswith("-") else int(text)


def _strict_json_problem(value: object, depth: int = 0) -> str | None:
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
    return {key: value for key, value in spec if isinstance(value, str)}


def _entry_fields(path: Path | str, name: str, spec: object) -> tuple[str, tuple[int, ...], int, int]:
    """One tensor's dtype, shape and offsets, read as the reference's ``TensorInfo`` is."""
    if isinstance(spec, _Object):
        fields: dict[str, object] = {}
        for key, value in spec:
            if key in _ENTRY_FIELDS:
                if key in fields:
                    raise CheckpointError(path, f"entry has {key} twice", tensor=name)
                fields[key] = value
            else:
                problem = _strict_json_problem(key) or _strict_json_problem(value, depth=2)
                if problem:
                    raise CheckpointError(path, f"header is not valid JSON ({problem})", tensor=name)
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


def _is_size_list(value: object) -> TypeGuard[list[int]]:
    return type(value) is list and all(type(v) is int and v < _USIZE_END for v in value)


def _element_count(shape: tuple[int, ...]) -> int | None:
    """The number of elements, or None where the reference's checked 64-bit product overflows on the way (or,
    on the plain route, a dimension is negative)."""
    count = 1
    for dimension in shape:
        count *= dimension
        if not 0 <= count < _USIZE_END:
            return None
    return count


def _bit_count(elements: int | None, bits: int) -> int | None:
    """The tensor's size in bits, or None where the reference's 64-bit arithmetic overflows."""
    if elements is None or elements * bits >= _USIZE_END:
        return None
    return elements * bits


def _byte_count(elements: int | None, bits: int) -> int | None:
    """The bytes a tensor of ``elements`` elements of ``bits`` bits needs, as the reference counts them in 64 bits;
    None where that overflows, or is no whole number of bytes."""
    needed = _bit_count(elements, bits)
    return None if needed is None or needed % 8 else needed // 8


def _validate(path: Path | str, columns: _Columns, data_size: int) -> None:
    """The reference's checks on offsets and sizes, over whole columns at C speed; a failure is then located and
    named. Both routes give known dtypes, and offsets and dimensions that are integers."""
    names, dtypes, shapes, begins, ends = columns[:5]
    order: Sequence[int]
    if begins[:1] in ([], [0]) and begins[1:] == ends[:-1]:
        order, sorted_begins, sorted_ends = range(len(names)), begins, ends  # written in offset order, as usual
    else:
        order = sorted(range(len(names)), key=lambda i: (begins[i], ends[i]))
        sorted_begins = list(map(begins.__getitem__, order))
        sorted_ends = list(map(ends.__getitem__, order))
        if sorted_begins[:1] not in ([], [0]) or sorted_begins[1:] != sorted_ends[:-1]:
            _refuse_tiling(path, columns, order, sorted_begins, sorted_ends)
    covered = sorted_ends[-1] if sorted_ends else 0  # so every offset is in [0, covered]
    distinct_shapes, distinct_dtypes = set(shapes), set(dtypes)
    if len(distinct_shapes) * len(distinct_dtypes) <= len(names):  # every pair of a few shapes and a few dtypes
        kinds = {(shape, dtype) for shape in distinct_shapes for dtype in distinct_dtypes}
    else:
        kinds = set(zip(shapes, dtypes, strict=True))
    elements = {shape: _element_count(shape) for shape in distinct_shapes}
    needs = {(shape, dtype): _byte_count(elements[shape], DTYPE_BITS[dtype]) for shape, dtype in kinds}
    held = list(map(operator.sub, ends, begins))
    if list(map(needs.__getitem__, zip(shapes, dtypes, strict=True))) != held:
        # A tensor that ends before it begins breaks the tiling, and holds no byte count a tensor can need: it is
        # found here, where the sizes differ, and refused as the tiling's break, which it is.
        if not all(map(operator.le, sorted_begins, sorted_ends)):
            _refuse_tiling(path, columns, order, sorted_begins, sorted_ends)
        i = next(i for i in range(len(names)) if needs[shapes[i], dtypes[i]] != held[i])
        needed = _bit_count(elements[shapes[i]], DTYPE_BITS[dtypes[i]])
        if needed is None:
            problem = f"{dtypes[i]} x {list(shapes[i])} overflows a 64-bit byte count"
        elif needed % 8:
            problem = f"{dtypes[i]} x {list(shapes[i])} is {needed} bits, not a whole number of bytes"
        else:
            problem = f"holds {ends[i] - begins[i]} bytes but {dtypes[i]} x {list(shapes[i])} needs {needed // 8}"
        raise CheckpointError(path, problem, tensor=names[i])
    if covered != data_size:
        raise CheckpointError(
            path,
            f"tensors cover {covered} bytes but the data section holds {data_size}: "
            "the file must end where the last tensor ends",
        )


def _refuse_tiling(
    path: Path | str, columns: _Columns, order: Sequence[int], sorted_begins: list[int], sorted_ends: list[int]
) -> NoReturn:
    """Name the first tensor, in offset order, that does not start where the ones before it end, or that ends
    before it starts."""
    names, begins, ends = columns.names, columns.begins, columns.ends
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
