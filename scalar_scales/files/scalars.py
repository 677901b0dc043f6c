"""The value of a one-element tensor, decoded from its bytes without torch."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

__all__ = ["decode_scalar", "decode_scalars"]

_DECODERS: dict[str, Any] = {
    "F32": struct.Struct("<f").unpack_from,
    "F64": struct.Struct("<d").unpack_from,
    "F16": struct.Struct("<e").unpack_from,
}


def decode_scalar(dtype: str, data: Any, offset: int) -> float | None:
    """The value of a one-element tensor of ``dtype`` at ``offset`` in ``data``; None for a dtype we do not read."""
    decode = _DECODERS.get(dtype)
    if decode is not None:
        return decode(data, offset)[0]
    if dtype == "BF16":
        return struct.unpack("<f", b"\0\0" + data[offset : offset + 2])[0]
    return None


def decode_scalars(dtypes: Sequence[str], data: Any, offsets: Sequence[int]) -> list[float | None]:
    """:func:`decode_scalar` of each one-element tensor; all of them at C speed where all are F32, as NVFP4's
    global scales are."""
    if dtypes.count("F32") == len(dtypes):
        return list(map(_FIRST, map(_DECODERS["F32"], repeat(data), offsets)))
    return list(map(decode_scalar, dtypes, repeat(data), offsets))


_FIRST = itemgetter(0)
