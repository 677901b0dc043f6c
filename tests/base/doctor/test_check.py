"""`scalar-scales check`: rule codes, grouped output, selection, JSON, exit codes."""

from __future__ import annotations

import json
import math
import shutil
import struct

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.sources import read_headers
from scalar_scales_testkit.broken import EXPERT, clean_checkpoint, rewrite_shard, shard_of
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


EXPERT_0 = "model.layers.0.mlp.experts.0"


def refuse_non_json_constant(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON (RFC 8259)")


def findings(result) -> list[dict]:
    return json.loads(result.stdout)["findings"]


@pytest.fixture
def clean(tmp_path):
    return clean_checkpoint(tmp_path / "clean")


def test_a_clean_checkpoint_exits_0_with_a_short_summary(clean):
    result = run_cli("check", clean)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{clean}: 3 shard(s), nvfp4-pack-quantized, format_version 2, 48 global scales (0 (1,), 48 0-D)",
        f"All checks passed: no finding from {len(RULES)} rules.",
    ]


def test_legacy_scales_are_grouped_under_one_code_with_the_first_few_shown(checkpoint):
    result = run_cli("check", checkpoint)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1] == (
        f"NV101 legacy-scale-shape (error): 48 x a global scale of shape (1,); fix: scalar-scales migrate {checkpoint}"
    )
    assert [line.split()[0] for line in lines[2:7]] == ["NV101"] * 5
    assert lines[2].startswith("  NV101 model-00001-of-00003.safetensors: model.layers.0.mlp.experts.0.")
    assert "vLLM < 0.24 refuses to load it" in lines[2]
    assert lines[7] == "  ... and 43 more NV101 (--show-all or --json lists them)"
    assert lines[8] == "Found 48: 48 errors, 0 warnings (NV101 48)."
    assert len(lines) == 9


def test_show_all_prints_every_finding(checkpoint):
    lines = run_cli("check", checkpoint, "--show-all").stdout.splitlines()
    assert sum(line.startswith("  NV101 ") for line in lines) == 48


def test_quiet_prints_only_the_summary(checkpoint):
    assert run_cli("check", checkpoint, "--quiet").stdout == "Found 48: 48 errors, 0 warnings (NV101 48).\n"


def test_list_shows_every_scale_with_its_layout_and_value(checkpoint):
    lines = run_cli("check", checkpoint, "--list").stdout.splitlines()
    listed = [line for line in lines if line.startswith("legacy [1]")]
    assert len(listed) == 48
    name, value = listed[0].split()[2], float(listed[0].split(" = ")[1])
    assert name == "model.layers.0.mlp.experts.0.gate_proj.input_global_scale"
    assert 100.0 <= value <= 50000.0


def test_a_marker_that_disagrees_with_the_shards_is_nv102_naming_config_json(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"]["format_version"] = 2
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = run_cli("check", checkpoint, "--json", "--select", "NV102")
    assert result.returncode == 1
    [finding] = findings(result)
    assert finding["file"] == str(checkpoint / "config.json")
    assert finding["tensor"] is None
    assert finding["message"].startswith("config.json declares format_version 2 but 48 scales are (1,)")


@pytest.mark.parametrize(
    ("value", "said"),
    [(0.0, "is 0: "), (-2.0, "is negative (-2.0)"), (math.nan, "is NaN: "), (math.inf, "is Inf: ")],
)
def test_a_zero_negative_nan_or_inf_scale_is_an_nv301_error(clean, value, said):
    name = set_scale_value(clean, "input_global_scale", 0, value)
    result = run_cli("check", clean, "--json")
    assert result.returncode == 1
    assert [(f["code"], f["severity"], f["tensor"]) for f in findings(result)] == [("NV301", "error", name)]
    assert said in findings(result)[0]["message"]


def test_a_scale_just_above_the_reciprocal_threshold_is_not_reported(clean):
    set_scale_value(clean, "down_proj.weight_global_scale", 0, 1.0)
    set_scale_value(clean, "down_proj.input_global_scale", 0, 0.05)
    assert run_cli("check", clean).returncode == 0


def test_a_weight_scale_below_1_is_reported_as_the_reciprocal_convention(clean):
    name = set_scale_value(clean, "down_proj.weight_global_scale", 0, 0.99)
    [finding] = findings(run_cli("check", clean, "--json"))
    assert (finding["code"], finding["tensor"]) == ("NV302", name)
    assert "ModelOpt's amax/(6*448)" in finding["message"]


def test_warnings_exit_0_and_strict_makes_them_exit_1(clean):
    name = set_scale_value(clean, "up_proj.weight_global_scale", 0, 123.0)
    result = run_cli("check", clean, "--json")
    assert result.returncode == 0
    assert [(f["code"], f["severity"], f["tensor"]) for f in findings(result)] == [("NV303", "warning", name)]
    assert run_cli("check", clean, "--strict").returncode == 1


def test_gate_and_up_of_a_dense_mlp_are_partners_too(clean, tmp_path):
    """Outside experts, vLLM's fused linear keeps the largest global scale rather than the gate's."""
    lone = tmp_path / "model.safetensors"
    shutil.copy(shards(clean)[0], lone)
    up = "model.layers.0.mlp.up_proj.weight_global_scale"

    def dense_mlp(tensors):
        expert = {name: tensor for name, tensor in tensors.items() if name.startswith(f"{EXPERT_0}.")}
        tensors.clear()
        tensors.update({name.replace(".experts.0.", "."): tensor for name, tensor in expert.items()})
        tensors[up]["data"] = struct.pack("<f", 7.5)

    rewrite_shard(lone, dense_mlp)
    [finding] = findings(run_cli("check", lone, "--json"))
    assert (finding["code"], finding["tensor"]) == ("NV303", up)
    assert "keeps the largest" in finding["message"]


def test_a_module_without_weight_scale_is_reported_missing_under_nv401(clean):
    tensor = f"{EXPERT}.down_proj.weight_scale"
    rewrite_shard(shard_of(clean, tensor), lambda tensors: tensors.pop(tensor))
    result = run_cli("check", clean, "--json", "--select", "NV4")
    assert [(f["code"], f["tensor"]) for f in findings(result)] == [("NV401", tensor)]
    assert findings(result)[0]["message"].startswith("missing: ")


def test_select_and_ignore_take_codes_and_prefixes(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    codes = lambda *args: {f["code"] for f in findings(run_cli("check", checkpoint, "--json", *args))}  # noqa: E731
    assert codes() == {"NV101", "NV301"}
    assert codes("--select", "NV3") == {"NV301"}
    assert codes("--select", "NV101,NV301", "--ignore", "NV1") == {"NV301"}
    assert codes("--ignore", "NV301") == {"NV101"}


def test_ignoring_every_error_exits_0(checkpoint):
    assert run_cli("check", checkpoint, "--ignore", "NV101").returncode == 0


def test_an_unknown_rule_code_is_a_usage_error(checkpoint):
    result = run_cli("check", checkpoint, "--select", "NV999")
    assert result.returncode == 2
    assert "unknown rule code 'NV999'" in result.stderr
    assert "Traceback" not in result.stderr


def test_json_has_findings_and_a_summary(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, math.nan)
    document = json.loads(run_cli("check", checkpoint, "--json").stdout)
    assert set(document) == {"findings", "summary"}
    assert {tuple(f) for f in document["findings"]} == {("code", "severity", "tensor", "file", "message")}
    assert document["summary"] == {
        "checkpoint": str(checkpoint),
        "shards": 3,
        "quantization_format": "nvfp4-pack-quantized",
        "format_version": 1,
        "scales": 48,
        "legacy": 48,
        "scalar": 0,
        "errors": 49,
        "warnings": 0,
        "counts": {"NV101": 48, "NV301": 1},
        "exit_code": 1,
        "bytes_fetched": None,
        "bytes_total": None,
    }


def test_json_with_list_adds_every_scale_in_strict_json(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, math.nan)
    result = run_cli("check", checkpoint, "--json", "--list")
    scales = json.loads(result.stdout, parse_constant=refuse_non_json_constant)["scales"]
    assert len(scales) == 48
    assert {s["layout"] for s in scales} == {"legacy"}
    assert scales[0]["value"] == "NaN"


def test_every_rule_has_a_section_in_the_docs():
    from pathlib import Path

    docs = (Path(__file__).parents[3] / "docs" / "check.md").read_text()
    for code, rule in RULES.items():
        assert f"### {code} {rule.name} ({rule.severity})" in docs


def test_an_fp8_module_beside_the_nvfp4_ones_is_not_judged_by_nvfp4_rules(clean):
    """Mixed precision: an FP8 projection has weight and an F32 weight_scale, and no weight_packed."""
    shard = shards(clean)[0]
    added = {
        "model.layers.0.self_attn.o_proj.weight": {"dtype": "F8_E4M3", "shape": [4, 16], "data": bytes(64)},
        "model.layers.0.self_attn.o_proj.weight_scale": {"dtype": "F32", "shape": [4, 1], "data": bytes(16)},
    }
    rewrite_shard(shard, lambda tensors: tensors.update(added))
    index_path = clean / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update(dict.fromkeys(added, shard.name))
    index_path.write_text(json.dumps(index))
    result = run_cli("check", clean, "--json")
    assert (result.returncode, findings(result)) == (0, []), result.stdout
