"""`scalar-scales check`: layouts, format_version, suspicious values, exit codes."""

from __future__ import annotations

import json
import math
import struct

from scalar_scales.checkpoint import read_headers
from scalar_scales_testkit.cli import run_cli, shards


def set_scale_value(checkpoint, suffix: str, index: int, value: float) -> str:
    """Write ``value`` into the index-th global scale whose name ends in ``suffix``; return its name."""
    shard = shards(checkpoint)[0]
    header = read_headers(shard)[0]
    name = [n for n in header.names if n.endswith(suffix)][index]
    entry = header.tensors[name]
    raw = bytearray(shard.read_bytes())
    raw[header.data_start + entry.begin : header.data_start + entry.end] = struct.pack("<f", value)
    shard.write_bytes(bytes(raw))
    return name


def test_legacy_checkpoint_exits_1_and_lists_every_scale(checkpoint):
    result = run_cli("check", checkpoint)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{checkpoint}: 3 shard(s), nvfp4-pack-quantized, format_version 1"
    assert sum(line.startswith("legacy [1]") for line in lines) == 48
    assert lines[-1].startswith("48 per-tensor scales: 48 legacy (1,), 0 scalar; 0 warnings; fix with:")


def test_migrated_checkpoint_is_clean(checkpoint):
    assert run_cli("migrate", checkpoint).returncode == 0
    result = run_cli("check", checkpoint, "--quiet")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{checkpoint}: 3 shard(s), nvfp4-pack-quantized, format_version 2",
        "48 per-tensor scales: 0 legacy (1,), 48 scalar; 0 warnings",
    ]


def test_a_marker_that_disagrees_with_the_shards_is_a_problem(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"]["format_version"] = 2
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = run_cli("check", checkpoint, "--quiet")
    assert result.returncode == 1
    assert "problem: config.json declares format_version 2 but 48 scales are (1,)" in result.stdout


def test_zero_negative_nan_and_inf_scales_are_warnings(checkpoint):
    assert run_cli("migrate", checkpoint).returncode == 0
    flagged = {
        set_scale_value(checkpoint, "input_global_scale", 0, 0.0): "zero",
        set_scale_value(checkpoint, "input_global_scale", 1, -2.0): "negative",
        set_scale_value(checkpoint, "weight_global_scale", 0, math.nan): "NaN",
        set_scale_value(checkpoint, "weight_global_scale", 1, math.inf): "Inf",
    }
    result = run_cli("check", checkpoint, "--quiet")
    assert result.returncode == 0
    warned = {
        line.split()[2]: line.rsplit("warning: ", 1)[1] for line in result.stdout.splitlines() if "warning:" in line
    }
    assert warned == flagged
    assert result.stdout.splitlines()[-1].endswith("4 warnings")


def test_strict_turns_warnings_into_exit_1(checkpoint):
    assert run_cli("migrate", checkpoint).returncode == 0
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    assert run_cli("check", checkpoint, "--strict").returncode == 1


def test_json_lists_every_scale_with_layout_value_and_warnings(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    result = run_cli("check", checkpoint, "--json")
    document = json.loads(result.stdout)
    assert result.returncode == document["exit_code"] == 1
    assert document["format_version"] == 1
    assert len(document["scales"]) == 48
    assert {s["layout"] for s in document["scales"]} == {"legacy"}
    assert [s["warnings"] for s in document["scales"] if s["warnings"]] == [["zero"]]
