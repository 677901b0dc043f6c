"""The torch-free safetensors header reader: what it accepts and the one-line error for each defect."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from scalar_scales.errors import CheckpointError
from scalar_scales.files import read_header


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
        (struct.pack("<Q", 100_000_001), "header length 100000001 exceeds the 100000000-byte limit"),
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


def test_refuses_overlapping_data_offsets_naming_the_second_tensor(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0), "b": {**scale(2)}}, bytes(8))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == (
        f"{path}: b: data_offsets [2, 6] do not start where the tensors before end (4): "
        "tensors must tile the data section without gap or overlap"
    )


def test_refuses_a_gap_between_tensors(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0), "b": {**scale(8)}}, bytes(12))
    with pytest.raises(CheckpointError, match=r"b: data_offsets \[8, 12\] do not start where the tensors before end"):
        read_header(path)


def test_refuses_data_offsets_beyond_the_file(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0)}, bytes(2))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == (
        f"{path}: tensors cover 4 bytes but the data section holds 2: the file must end where the last tensor ends"
    )


def test_refuses_bytes_after_the_last_tensor(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0)}, bytes(5))
    with pytest.raises(CheckpointError, match=r"tensors cover 4 bytes but the data section holds 5"):
        read_header(path)


def test_refuses_a_byte_count_that_does_not_match_dtype_times_shape(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": scale(0, [2])}, bytes(4))
    with pytest.raises(CheckpointError) as error:
        read_header(path)
    assert str(error.value) == f"{path}: a: holds 4 bytes but F32 x [2] needs 8"


def test_refuses_an_unknown_dtype(tmp_path):
    path = write(tmp_path / "a.safetensors", {"a": {**scale(0), "dtype": "F33"}}, bytes(4))
    with pytest.raises(CheckpointError, match=r'a: unknown dtype "F33"$'):
        read_header(path)


def test_refuses_a_missing_file_with_a_one_line_error(tmp_path):
    with pytest.raises(CheckpointError, match=r"missing.safetensors: cannot read: No such file or directory$"):
        read_header(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_a_tensor_named_twice_keeps_its_last_entry_as_the_reference_reader_does(tmp_path, compact):
    first, last = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}', '{"dtype":"U8","shape":[4],"data_offsets":[0,4]}'
    raw = f'{{"a":{first},"a":{last}}}' if compact else f'{{"a": {first}, "a": {last}}}'
    header = read_header(write(tmp_path / "a.safetensors", None, bytes(4), raw_header=raw.encode()))
    assert header.names == ["a"]
    assert (header.tensors["a"].dtype, header.tensors["a"].shape) == ("U8", (4,))
