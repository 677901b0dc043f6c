"""The torch-free safetensors header reader: what it accepts and the one-line error for each defect."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from scalar_scales.safetensors_header import CheckpointError, read_header


def write(path: Path, header: object, data: bytes = b"", *, raw_header: bytes | None = None) -> Path:
    encoded = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


def scale(begin: int, shape: list[int] | None = None) -> dict:
    return {"dtype": "F32", "shape": [1] if shape is None else shape, "data_offsets": [begin, begin + 4]}


def test_reads_shapes_dtypes_and_offsets(tmp_path):
    header = read_header(write(tmp_path / "a.safetensors", {"a": scale(0), "b": scale(4, [])}, bytes(8)))
    assert header.tensors["a"].shape == (1,)
    assert header.tensors["b"].shape == ()
    assert (header.tensors["b"].begin, header.tensors["b"].end) == (4, 8)


def test_reads_a_padded_space_as_shape_scalar(tmp_path):
    raw = b'{"s":{"dtype":"F32","shape":[ ],"data_offsets":[0,4]}}'
    header = read_header(write(tmp_path / "a.safetensors", None, bytes(4), raw_header=raw))
    assert header.tensors["s"].shape == ()


def test_keeps_metadata(tmp_path):
    header = read_header(write(tmp_path / "a.safetensors", {"__metadata__": {"format": "pt"}}))
    assert header.metadata == {"format": "pt"}
    assert header.tensors == {}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x01\x02", "truncated: 2 bytes, too short for the 8-byte header length"),
        (struct.pack("<Q", 64) + b"{}", "header length 64 runs past the end of the file (10 bytes)"),
        (struct.pack("<Q", 200 * 1024 * 1024), "header length 209715200 exceeds the 104857600-byte limit"),
    ],
)
def test_refuses_a_file_too_short_for_its_header(tmp_path, content, problem):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: {problem}"


def test_refuses_a_header_that_is_not_json(tmp_path):
    path = write(tmp_path / "a.safetensors", None, raw_header=b"{not json")
    with pytest.raises(CheckpointError, match=r"a.safetensors: header is not valid JSON"):
        read_header(path)


def test_refuses_a_header_that_is_not_an_object(tmp_path):
    path = write(tmp_path / "a.safetensors", [1, 2])
    with pytest.raises(CheckpointError, match=r"header is a JSON list, not an object$"):
        read_header(path)


def test_refuses_overlapping_data_offsets_naming_both_tensors(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0), "b": {**scale(2)}}, bytes(8))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: b: data_offsets [2, 6] overlap a [0, 4]"


def test_refuses_data_offsets_beyond_the_file(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(4)}, bytes(4))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: a: data_offsets [4, 8] out of range (data section is 4 bytes)"


def test_refuses_a_byte_count_that_does_not_match_dtype_times_shape(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0, [2])}, bytes(4))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: a: holds 4 bytes but F32 x [2] needs 8"


def test_refuses_an_unknown_dtype(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": {**scale(0), "dtype": "F33"}}, bytes(4))
    with pytest.raises(CheckpointError, match=r"a: unknown dtype 'F33'$"):
        read_header(path)


def test_refuses_a_missing_file_with_a_one_line_error(tmp_path):
    with pytest.raises(CheckpointError, match=r"missing.safetensors: cannot read: No such file or directory$"):
        read_header(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_refuses_a_tensor_named_twice(tmp_path, compact):
    entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    raw = f'{{"a":{entry},"a":{entry}}}' if compact else f'{{"a": {entry}, "a": {entry}}}'
    path = write(tmp_path / "a.safetensors", None, bytes(4), raw_header=raw.encode())
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: a: appears more than once in the header"
