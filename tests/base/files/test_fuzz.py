"""Arbitrary bytes produce a result or the tool's own error, never another exception."""

from __future__ import annotations

import json
import math
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalar_scales.errors import CheckpointError
from scalar_scales.files import read_header

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


MODULES = [f"model.layers.0.{m}" for m in ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "self_attn.q_proj")]
LEAVES = ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", "weight")
tensors = st.dictionaries(
    st.tuples(st.sampled_from(MODULES), st.sampled_from(LEAVES)).map(".".join),
    st.tuples(
        st.sampled_from(["U8", "I8", "F8_E4M3", "F8_E5M2", "F32", "F16", "BF16", "F64"]),
        st.lists(st.integers(0, 4), max_size=3),
        st.floats(width=32),
    ),
    max_size=10,
)
groups = st.dictionaries(
    st.text(max_size=4),
    st.fixed_dictionaries(
        {},
        optional={
            "targets": st.lists(st.sampled_from(["Linear", "re:.*q_proj", "re:[", "re:.*experts.*"])) | json_values,
            "weights": st.fixed_dictionaries({}, optional={"group_size": st.sampled_from([16, 32, 0, "16"])})
            | json_values,
            "input_activations": st.none() | st.just({"num_bits": 4}) | json_values,
            "format": st.just("nvfp4-pack-quantized"),
        },
    ),
    max_size=3,
)


@SETTINGS
@given(tensors=tensors, groups=groups, version=st.sampled_from([None, 1, 2]))
def test_every_rule_on_arbitrary_nvfp4_modules_gives_findings_or_the_tools_own_error(
    tmp_path, tensors, groups, version
):
    from scalar_scales.doctor import diagnose
    from scalar_scales.files import DTYPE_BITS
    from scalar_scales.sources import open_local

    entries, data, offset = {}, b"", 0
    for name, (dtype, shape, value) in tensors.items():
        shape = [] if name.endswith("_global_scale") and len(shape) > 1 else shape
        size = DTYPE_BITS[dtype] * math.prod(shape) // 8
        chunk = (struct.pack("<f", value) if dtype == "F32" else b"\1") * size
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        data, offset = data + chunk[:size], offset + size
    folder = tmp_path / "ckpt"
    folder.mkdir(exist_ok=True)
    encoded = json.dumps(entries, separators=(",", ":")).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    quantization = {"format": "nvfp4-pack-quantized", "config_groups": groups}
    if version is not None:
        quantization["format_version"] = version
    (folder / "config.json").write_text(json.dumps({"quantization_config": quantization}))
    try:
        findings = diagnose(open_local(folder)).findings
    except CheckpointError as error:
        assert "\n" not in str(error)
        return
    assert all(finding.message and "\n" not in finding.message for finding in findings)
