"""Read and validate a safetensors header without torch.

The format is an 8-byte little-endian header length, a JSON object, then raw
tensor bytes. We treat every file as hostile, like the reference reader: the
header size is bounded, every offset is checked against the file, byte ranges
may not overlap, and each byte count must match dtype x shape. Each check
raises :class:`CheckpointError` naming the file, the tensor and the problem.

Only the header is read, never the data, which is what keeps `check` fast.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
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


class CheckpointError(Exception):
    """A checkpoint file we refuse to read or change.

    The message is one line, ``<file>: [<tensor>: ]<problem>``, fit to show a
    user as it is.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, tensor: str | None = None):
        self.path = str(path)
        self.problem = problem
        self.tensor = tensor
        where = f"{self.path}: {tensor}: " if tensor else f"{self.path}: "
        super().__init__(where + problem)


class TensorEntry(NamedTuple):
    """One tensor as the header describes it; offsets are relative to the data section.

    A named tuple because a header can hold hundreds of thousands of them.
    """

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
    """A validated header: where the data starts and what each tensor is."""

    path: Path
    header_length: int
    raw: bytes
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str] | None

    @property
    def data_start(self) -> int:
        return 8 + self.header_length


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
    return _parse(path, raw, file_size)


def _parse(path: Path, raw: bytes, file_size: int) -> SafetensorsHeader:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CheckpointError(path, f"header is a JSON {type(document).__name__}, not an object")

    metadata = document.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise CheckpointError(path, "__metadata__ must map strings to strings")

    data_size = file_size - 8 - len(raw)
    tensors = {}
    for name, spec in document.items():
        entry = _fast_entry(name, spec, data_size)
        tensors[name] = entry if entry is not None else _diagnose(path, name, spec, data_size)
    _check_no_overlap(path, tensors)
    return SafetensorsHeader(path=path, header_length=len(raw), raw=raw, tensors=tensors, metadata=metadata)


def _fast_entry(name: str, spec: object, data_size: int) -> TensorEntry | None:
    """The entry if every check passes, else None (``_diagnose`` then says which failed).

    Headers can hold hundreds of thousands of entries, so this path does only
    the work of the checks themselves.
    """
    if type(spec) is not dict:
        return None
    shape, offsets, bits = spec.get("shape"), spec.get("data_offsets"), _DTYPE_BITS.get(spec.get("dtype"))
    if bits is None or type(shape) is not list or type(offsets) is not list or len(offsets) != 2:
        return None
    numel = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            return None
        numel *= dim
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= data_size:
        return None
    if numel * bits != (end - begin) * 8:
        return None
    return TensorEntry(name, spec["dtype"], tuple(shape), begin, end)


def _diagnose(path: Path, name: str, spec: object, data_size: int) -> TensorEntry:
    """Raise the error that names what is wrong with one header entry."""
    if not isinstance(spec, dict):
        raise CheckpointError(path, "entry is not an object", tensor=name)
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in _DTYPE_BITS:
        raise CheckpointError(path, f"unknown dtype {dtype!r}", tensor=name)
    if not _is_int_list(shape) or any(d < 0 for d in shape):
        raise CheckpointError(path, f"shape {shape!r} is not a list of non-negative integers", tensor=name)
    if not _is_int_list(offsets) or len(offsets) != 2:
        raise CheckpointError(path, f"data_offsets {offsets!r} is not a pair of integers", tensor=name)
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise CheckpointError(
            path, f"data_offsets [{begin}, {end}] out of range (data section is {data_size} bytes)", tensor=name
        )
    bits = math.prod(shape) * _DTYPE_BITS[dtype]
    raise CheckpointError(
        path, f"holds {end - begin} bytes but {dtype} x {list(shape)} needs {bits / 8:g}", tensor=name
    )


def _is_int_list(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _check_no_overlap(path: Path, tensors: dict[str, TensorEntry]) -> None:
    previous: TensorEntry | None = None
    for entry in sorted(tensors.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin == entry.end:
            continue
        if previous is not None and entry.begin < previous.end:
            raise CheckpointError(
                path,
                f"data_offsets [{entry.begin}, {entry.end}] overlap {previous.name} [{previous.begin}, {previous.end}]",
                tensor=entry.name,
            )
        previous = entry
