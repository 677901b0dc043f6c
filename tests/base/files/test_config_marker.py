"""The marker edit in config.json's text: only the marker changes, and removing it gives back the original."""

from __future__ import annotations

import json

import pytest

from scalar_scales.errors import CheckpointError
from scalar_scales.files import with_format_version

LAYOUTS = {
    "compressed-tensors (indent 2, sorted)": json.dumps(
        {"architectures": ["X"], "quantization_config": {"format": "nvfp4-pack-quantized", "version": "0.19.0"}},
        indent=2,
        sort_keys=True,
    ),
    "compact": '{"quantization_config":{"format":"nvfp4-pack-quantized"},"z":1}',
    "tabs and CRLF, no final newline": '{\r\n\t"quantization_config": {\r\n\t\t"format": "x"\r\n\t}\r\n}',
    "an empty quantization_config": '{"quantization_config": {}}',
    "spaces inside": '{ "quantization_config" : { "format" : "x" } }\n',
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_adding_then_removing_the_marker_gives_back_the_same_text(layout):
    text = LAYOUTS[layout]
    marked = with_format_version(text, 2)
    assert json.loads(marked)["quantization_config"]["format_version"] == 2
    assert json.loads(marked) | {"quantization_config": None} == json.loads(text) | {"quantization_config": None}
    assert with_format_version(marked, None) == text


def test_the_added_marker_is_spaced_like_the_member_before_it():
    text = '{\n  "quantization_config": {\n    "format": "x"\n  }\n}'
    expected = '{\n  "quantization_config": {\n    "format": "x",\n    "format_version": 2\n  }\n}'
    assert with_format_version(text, 2) == expected


def test_an_existing_marker_is_changed_in_place():
    text = '{"quantization_config": {"format_version": 1, "format": "x"}}'
    assert with_format_version(text, 2) == '{"quantization_config": {"format_version": 2, "format": "x"}}'


def test_removing_a_first_marker_keeps_the_next_member_s_spacing():
    text = '{"quantization_config": {"format_version": 2, "format": "x"}}'
    assert with_format_version(text, None) == '{"quantization_config": {"format": "x"}}'


def test_a_config_without_the_marker_is_left_as_it_is_for_legacy():
    text = '{"quantization_config": {"format": "x"}}'
    assert with_format_version(text, None) is text


def test_a_marker_written_twice_is_refused():
    with pytest.raises(CheckpointError, match="format_version appears more than once"):
        with_format_version('{"quantization_config": {"format_version": 2, "format_version": 1}}', 2)
