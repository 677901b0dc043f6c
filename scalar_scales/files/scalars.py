"""The values of one-element tensors, decoded from their bytes without torch, and read in few spans."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import repeat

__all__ = ["decode_scalar", "read_scalars"]

_DECODERS: dict[str, Callable[[bytes, int], tuple[float]]] = {
    "F32": struct.Struct("<f").unpack_from,
    "F64": struct.Struct("<d").unpack_from,
    "F16": struct.Struct("<e").unpack_from,
}
_F32 = _DECODERS["F32"]
_SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2}


def decode_scalar(dtype: str, data: bytes, offset: int) -> float | None:
    """The value of a one-element tensor of ``dtype`` at ``offset`` in ``data``; None for a dtype we do not read."""
    decode = _DECODERS.get(dtype)
    if decode is not None:
        return decode(data, offset)[0]
    if dtype == "BF16":
        value: float = struct.unpack("<f", b"\0\0" + data[offset : offset + 2])[0]
        return value
    return None


def read_scalars(
    dtypes: Sequence[str], begins: Sequence[int], ends: Sequence[int], read: Callable[[int, int], bytes], gap: int
) -> list[float | None]:
    """The value of each one-element tensor (``dtypes``, data-section offsets ``begins``..``ends``), read by
    ``read(begin, end)`` in spans merged where the bytes between two tensors are fewer than ``gap``; None for a
    tensor of a dtype this tool does not decode, or that does not hold exactly one value's bytes.

    The reference writer sorts tensors by dtype, so a shard's F32 scales lie
    side by side and are nearly always one span; a writer that scatters them
    among the weights costs one read per cluster, not one per scale.
    """
    values: list[float | None] = [None] * len(dtypes)
    sized = (k for k, dtype in enumerate(dtypes) if ends[k] - begins[k] == _SIZES.get(dtype))
    order = sorted(sized, key=begins.__getitem__)
    start = 0
    while start < len(order):
        stop, span_end = start + 1, ends[order[start]]
        while stop < len(order) and begins[order[stop]] - span_end < gap:
            span_end = max(span_end, ends[order[stop]])
            stop += 1
        span_begin = begins[order[start]]
        data = read(span_begin, span_end)
        members = order[start:stop]
        offsets = [begins[k] - span_begin for k in members]
        kinds = {dtypes[k] for k in members}
        if kinds == {"F32"}:  # NVFP4's global scales: decoded at C speed
            decoded: list[float | None] = [value for (value,) in map(_F32, repeat(data), offsets)]
        else:
            decoded = [decode_scalar(dtypes[k], data, offset) for k, offset in zip(members, offsets, strict=True)]
        for k, value in zip(members, decoded, strict=True):
            values[k] = value
        start = stop
    return values
