"""The header editor: one byte per scale in compact headers, a checked plan for any other layout."""

from __future__ import annotations

import json
import struct

import pytest

from scalar_scales.errors import CheckpointError
from scalar_scales.files import plan_header_edit, read_header

ENTRIES = {
    "a.weight_global_scale": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    "a.weight_packed": {"dtype": "U8", "shape": [2, 2], "data_offsets": [4, 8]},
    "b.input_global_scale": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
}


def write(tmp_path, entries: dict, *, compact: bool = True):
    text = json.dumps({"__metadata__": {"format": "pt"}, **entries}, separators=(",", ":") if compact else None)
    raw = text.encode() + b" " * (-len(text) % 8)
    path = tmp_path / "x.safetensors"
    data_size = max(entry["data_offsets"][1] for entry in entries.values())
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data_size))
    return read_header(path)


def scales(header) -> list[int]:
    return [i for i, n in enumerate(header.names) if n.endswith("_global_scale")]


def test_compact_headers_record_where_each_shape_is(tmp_path):
    header = write(tmp_path, ENTRIES)
    assert header.shape_spans is not None
    assert [header.raw[b - 1 : e + 1] for b, e in header.shape_spans] == [b"[1]", b"[2,2]", b"[1]"]


def test_a_local_header_keeps_none_of_its_bytes_until_an_edit_reads_them_again(tmp_path):
    header = write(tmp_path, ENTRIES)
    assert header.kept is None
    assert header.raw == header.path.read_bytes()[8 : header.data_start]


def test_an_edit_of_a_file_changed_since_it_was_read_is_refused(tmp_path):
    header = write(tmp_path, ENTRIES)
    with header.path.open("ab") as f:
        f.write(bytes(8))
    with pytest.raises(CheckpointError, match="changed since this run read it; not edited"):
        plan_header_edit(header, scales(header), "scalar")


def test_to_scalar_turns_each_1_into_a_space(tmp_path):
    header = write(tmp_path, ENTRIES)
    edit = plan_header_edit(header, scales(header), "scalar")
    assert edit is not None and edit.in_place
    assert edit.new_raw == header.raw.replace(b'"shape":[1]', b'"shape":[ ]')
    assert edit.changed == ("a.weight_global_scale", "b.input_global_scale")
    first, last = edit.span
    assert header.raw[:first] == edit.new_raw[:first] and header.raw[last:] == edit.new_raw[last:]


def test_the_edited_header_reads_as_0d(tmp_path):
    header = write(tmp_path, ENTRIES)
    edit = plan_header_edit(header, scales(header), "scalar")
    path = header.path
    path.write_bytes(struct.pack("<Q", len(edit.new_raw)) + edit.new_raw + bytes(12))
    assert [read_header(path).shapes[i] for i in scales(header)] == [(), ()]


def test_nothing_to_do_plans_no_edit(tmp_path):
    header = write(tmp_path, ENTRIES)
    assert plan_header_edit(header, scales(header), "legacy") is None


def test_to_legacy_without_a_spare_byte_is_not_in_place_and_pads_to_8(tmp_path):
    """Even where the old padding would absorb the longer content, bytes shift: not an in-place edit."""
    entries = {n: s | {"shape": []} if n.endswith("_global_scale") else s for n, s in ENTRIES.items()}
    header = write(tmp_path, entries)
    edit = plan_header_edit(header, scales(header), "legacy")
    assert edit is not None and not edit.in_place
    assert len(edit.new_raw) % 8 == 0
    assert json.loads(edit.new_raw)["b.input_global_scale"]["shape"] == [1]


def test_any_other_layout_is_edited_in_place_and_checked(tmp_path):
    header = write(tmp_path, ENTRIES, compact=False)
    assert header.shape_spans is None
    edit = plan_header_edit(header, scales(header), "scalar")
    assert edit is not None and edit.in_place
    document = json.loads(edit.new_raw)
    assert [document[n]["shape"] for n in ("a.weight_global_scale", "b.input_global_scale")] == [[], []]
    assert document["a.weight_packed"]["shape"] == [2, 2]


def test_names_with_escapes_are_edited_through_the_checked_path(tmp_path):
    entries = {'q"uote.weight_global_scale': ENTRIES["a.weight_global_scale"]}
    header = write(tmp_path, entries)
    assert header.shape_spans is None
    edit = plan_header_edit(header, [0], "scalar")
    assert edit is not None
    assert json.loads(edit.new_raw)['q"uote.weight_global_scale']["shape"] == []


def write_raw(tmp_path, text: str, data_size: int):
    raw = text.encode() + b" " * (-len(text) % 8)
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data_size))
    return read_header(path)


def test_a_tensor_named_twice_is_edited_in_its_last_entry_the_one_readers_keep(tmp_path):
    first = '{"dtype":"U8","shape":[4],"data_offsets":[0,4]}'
    last = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    header = write_raw(tmp_path, f'{{"a.weight_global_scale":{first},"a.weight_global_scale":{last}}}', 4)
    edit = plan_header_edit(header, [0], "scalar")
    assert edit is not None
    edited = last.replace('"shape":[1]', '"shape":[ ]')
    assert edit.new_raw.decode().rstrip() == f'{{"a.weight_global_scale":{first},"a.weight_global_scale":{edited}}}'


def test_an_entry_written_as_an_array_is_refused_for_editing(tmp_path):
    header = write_raw(tmp_path, '{"a.weight_global_scale":["F32",[1],[0,4]]}', 4)
    with pytest.raises(CheckpointError, match=r"a.weight_global_scale: cannot locate this tensor's shape"):
        plan_header_edit(header, [0], "scalar")


def test_shapes_are_located_in_a_compact_header_with_colons_in_its_strings(tmp_path):
    entries = {
        "a:b.weight_global_scale": ENTRIES["a.weight_global_scale"],
        "a.weight_packed": ENTRIES["a.weight_packed"],
    }
    header = write_raw(tmp_path, json.dumps({"__metadata__": {"at": "12:00"}, **entries}, separators=(",", ":")), 8)
    assert header.shape_spans is not None
    edit = plan_header_edit(header, [0], "scalar")
    assert edit is not None and edit.in_place
    assert edit.new_raw == header.raw.replace(b'"shape":[1]', b'"shape":[ ]')


def test_a_shape_written_inside_a_string_is_not_taken_for_an_entrys(tmp_path):
    scale = '"a.weight_global_scale":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    header = write_raw(tmp_path, '{"__metadata__":{"note":"\\"shape\\":[1]"},' + scale + "}", 4)
    assert header.shape_spans is None
    edit = plan_header_edit(header, [0], "scalar")
    assert edit is not None and edit.in_place
    assert json.loads(edit.new_raw) == {
        "__metadata__": {"note": '"shape":[1]'},
        "a.weight_global_scale": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
    }
