"""The values of one-element tensors, decoded from their bytes without torch, and read in few spans."""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, pairwise, repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scalar_scales.files.header import SafetensorsHeader

__all__ = ["decode_scalar", "read_scalars"]

_DECODERS: dict[str, Callable[[bytes, int], tuple[float]]] = {
    "F32": struct.Struct("<f").unpack_from,
    "F64": struct.Struct("<d").unpack_from,
    "F16": struct.Struct("<e").unpack_from,
}
_F32 = _DECODERS["F32"]
_SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2}
_FIRST = operator.itemgetter(0)


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
    header: SafetensorsHeader, indices: Sequence[int], read: Callable[[int, int], bytes], gap: int
) -> list[float | None]:
    """The value of each one-element tensor of ``header`` at ``indices`` (their data-section offsets do not
    overlap, the header being validated), read by ``read(begin, end)`` in spans merged where the bytes between two
    tensors are fewer than ``gap``; None for a tensor of a dtype this tool does not decode, or that does not hold
    exactly one value's bytes.

    The reference writer sorts tensors by dtype, so a shard's F32 scales lie
    side by side and are nearly always one span; a writer that scatters them
    among the weights costs one read per cluster, not one per scale. The
    spans are found, and F32 values decoded, on whole columns: a large MoE's
    shard has thousands of scales.
    """
    dtypes = list(map(header.dtypes.__getitem__, indices))
    begins = list(map(header.begins.__getitem__, indices))
    ends = list(map(header.ends.__getitem__, indices))
    count = len(dtypes)
    if (
        count
        and dtypes.count("F32") == count
        and begins[1:] == ends[:-1]
        and list(map(operator.sub, ends, begins)).count(4) == count
    ):  # one-value F32 tensors side by side, in order, as the reference writer puts a shard's global scales
        return list(struct.unpack(f"<{count}f", read(begins[0], ends[-1])))
    values: list[float | None] = [None] * len(dtypes)
    sizes = map(_SIZES.get, dtypes)
    order = sorted(
        compress(range(len(dtypes)), map(operator.eq, map(operator.sub, ends, begins), sizes)), key=begins.__getitem__
    )
    starts, stops = list(map(begins.__getitem__, order)), list(map(ends.__getitem__, order))
    cuts = [
        0,
        *compress(range(1, len(order)), map(operator.ge, map(operator.sub, starts[1:], stops), repeat(gap))),
        len(order),
    ]
    for first, last in pairwise(cuts):
        if first == last:
            continue
        span_begin = starts[first]
        data = read(span_begin, stops[last - 1])
        members = order[first:last]
        offsets = list(map(operator.sub, starts[first:last], repeat(span_begin)))
        decoded: Iterable[float | None]
        if list(map(dtypes.__getitem__, members)).count("F32") == len(members):  # NVFP4's global scales
            decoded = map(_FIRST, map(_F32, repeat(data), offsets))
        else:
            decoded = map(decode_scalar, map(dtypes.__getitem__, members), repeat(data), offsets)
        for k, value in zip(members, decoded, strict=True):
            values[k] = value
    return values
