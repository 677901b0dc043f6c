"""Arbitrary bytes produce a result or the tool's own error, never another exception."""

from __future__ import annotations

import json
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalar_scales.safetensors_header import CheckpointError, read_header

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def read(tmp_path, content: bytes) -> None:
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(content)
    try:
        read_header(path)
    except CheckpointError as error:
        assert "\n" not in str(error)
        assert str(error).startswith(f"{path}: ")


@SETTINGS
@given(content=st.binary(max_size=300))
def test_arbitrary_files(tmp_path, content):
    read(tmp_path, content)


@SETTINGS
@given(header=st.binary(max_size=300), data=st.binary(max_size=64))
def test_arbitrary_header_bytes_with_a_correct_length(tmp_path, header, data):
    read(tmp_path, struct.pack("<Q", len(header)) + header + data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
entries = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from(["F32", "U8", "BF16", "F4", "X"]) | json_values,
        "shape": st.lists(st.integers(-2, 5), max_size=3) | json_values,
        "data_offsets": st.lists(st.integers(-4, 40), min_size=2, max_size=2) | json_values,
    },
)


@SETTINGS
@given(
    document=st.dictionaries(st.text(max_size=12), entries | json_values, max_size=6),
    data=st.binary(max_size=48),
    compact=st.booleans(),
)
def test_arbitrary_json_headers(tmp_path, document, data, compact):
    encoded = json.dumps(document, separators=(",", ":") if compact else None).encode()
    encoded += b" " * (-len(encoded) % 8)
    read(tmp_path, struct.pack("<Q", len(encoded)) + encoded + data)
