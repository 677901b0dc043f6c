"""`scalar-scales check`: rule codes, grouped output, selection, JSON, exit codes."""

from __future__ import annotations

import json
import math
import shutil
import struct

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales.sources import INDEX_NAME, read_headers
from scalar_scales_testkit.broken import EXPERT, clean_checkpoint, rewrite_shard, shard_of, to_modelopt
from scalar_scales_testkit.cli import run_cli_in_process, shards
from scalar_scales_testkit.refusals import not_loaded_lines, observed_not_to_load, refused


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


COMPRESSED_TENSORS_RULES = [code for code, rule in RULES.items() if rule.is_about(COMPRESSED_TENSORS_LAYOUT)]
"""The rules applied to a compressed-tensors checkpoint: every rule but ModelOpt's own (NV608)."""
CHECKED = "Checked 24 NVFP4 modules (config group group_0, nvfp4-pack-quantized W4A4: 24) and 48 global scales."


def test_a_clean_checkpoint_exits_0_saying_what_was_checked(clean):
    """With the engines observed not to load its 0-D scales, which are no finding (test_engines.py)."""
    result = run_cli_in_process("check", clean)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{clean}: 3 shards, nvfp4-pack-quantized, format_version 2, 48 global scales (0 (1,), 48 0-D)",
        CHECKED,
        *not_loaded_lines(clean),
        f"All checks passed: no finding from {len(COMPRESSED_TENSORS_RULES)} rules on 24 NVFP4 modules and 48 global "
        f"scales.{observed_not_to_load(clean)}",
    ]


@pytest.mark.parametrize(("marker", "shown"), [(None, "no format_version"), (1, "format_version 1")])
def test_the_heading_shows_the_marker_as_the_config_states_it(checkpoint, marker, shown):
    config = json.loads((checkpoint / "config.json").read_text())
    if marker is not None:
        config["quantization_config"]["format_version"] = marker
    (checkpoint / "config.json").write_text(json.dumps(config))
    heading = run_cli_in_process("check", checkpoint).stdout.splitlines()[0]
    assert heading.startswith(f"{checkpoint}: 3 shards, nvfp4-pack-quantized, {shown}, 48 global scales")
    summary = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)["summary"]
    assert summary["format_version"] == marker


WHY_NV101 = [
    "  vLLM 0.23, 0.32 and 0.33 load it (observed), and so does transformers; a loader that copies it",
    "  into a 0-D tensor with copy_ fails (output with shape [] doesn't match the broadcast shape [1])",
]


NO_TERMINAL: dict[str, str | None] = {"COLUMNS": None}
"""No terminal width: the text's explanations are wrapped to 100 columns."""


def test_legacy_scales_are_grouped_under_one_code_with_the_why_once_and_the_first_few_shown(checkpoint):
    result = run_cli_in_process("check", checkpoint, env=NO_TERMINAL)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[1] == CHECKED
    assert lines[2] == (
        f"NV101 legacy-scale-shape (warning): 48 findings: a global scale of shape (1,); fix: scalar-scales migrate "
        f"{checkpoint}"
    )
    assert lines[3:5] == WHY_NV101
    assert lines[5] == (
        "    model-00001-of-00003.safetensors: model.layers.0.mlp.experts.0.gate_proj.input_global_scale  shape (1,)"
    )
    assert all(line.startswith("    model-0000") and line.endswith("  shape (1,)") for line in lines[5:10])
    assert lines[10] == "  ... and 43 more (--show-all or --output-format json lists them)"
    assert lines[11] == "Found 48 findings: 48 warnings (NV101 48)."
    assert len(lines) == 12


def test_show_all_prints_every_finding_and_the_why_once(checkpoint):
    lines = run_cli_in_process("check", checkpoint, "--show-all", env=NO_TERMINAL).stdout.splitlines()
    assert sum(line.endswith("  shape (1,)") for line in lines) == 48
    assert sum(line == WHY_NV101[0] for line in lines) == 1


def test_a_narrower_terminal_wraps_the_why_to_its_width(checkpoint):
    lines = run_cli_in_process("check", checkpoint, env={"COLUMNS": "60"}).stdout.splitlines()
    why = lines[3 : lines.index(next(line for line in lines if line.startswith("    model-")))]
    assert len(why) > len(WHY_NV101) and all(len(line) <= 60 for line in why)
    assert " ".join(line.strip() for line in why) == " ".join(line.strip() for line in WHY_NV101)


def test_quiet_prints_the_findings_without_the_heading_or_the_summary(checkpoint):
    """As ruff's --quiet: the diagnostics and nothing else."""
    full = run_cli_in_process("check", checkpoint).stdout.splitlines()
    result = run_cli_in_process("check", checkpoint, "-q")
    assert (result.returncode, result.stdout.splitlines()) == (0, full[2:-1])
    assert result.stdout.startswith("NV101 legacy-scale-shape (warning): 48 findings")


def test_quiet_prints_nothing_for_a_checkpoint_without_findings_and_keeps_the_exit_code(clean):
    """A ModelOpt one, which no engine's refusal is judged by (--quiet keeps a refusal: test_engines.py)."""
    to_modelopt(clean)
    result = run_cli_in_process("check", clean, "--quiet", "--strict")
    assert (result.returncode, result.stdout) == (0, "")


def test_quiet_takes_show_all(checkpoint):
    assert len(run_cli_in_process("check", checkpoint, "--quiet", "--show-all").stdout.splitlines()) == 1 + 2 + 48


def test_silent_prints_nothing_and_exits_as_the_check_would(checkpoint):
    for arguments, code in [((), 0), (("--strict",), 1)]:
        result = run_cli_in_process("check", checkpoint, "-s", *arguments)
        assert (result.returncode, result.stdout, result.stderr) == (code, "", "")


@pytest.mark.parametrize("output_format", ["json", "github", "sarif"])
def test_silent_prints_nothing_in_every_format(checkpoint, output_format):
    result = run_cli_in_process("check", checkpoint, "--silent", "--output-format", output_format)
    assert (result.returncode, result.stdout) == (0, "")


def test_silent_still_says_why_a_check_is_refused(tmp_path):
    result = run_cli_in_process("check", tmp_path / "absent", "--silent")
    assert (result.returncode, result.stdout, result.stderr.count("\n")) == (2, "", 1)


def test_statistics_prints_a_count_per_rule_most_first_then_the_summary(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    result = run_cli_in_process("check", checkpoint, "--statistics")
    assert (result.returncode, result.stdout.splitlines()) == (
        1,
        [
            "48\tNV101\t[*] legacy-scale-shape",
            " 1\tNV301\tinvalid-scale-value",
            "Found 49 findings: 1 error, 48 warnings (NV301 1, NV101 48).",
        ],
    )


def test_statistics_with_quiet_prints_the_counts_alone(checkpoint):
    assert run_cli_in_process("check", checkpoint, "--statistics", "-q").stdout == "48\tNV101\t[*] legacy-scale-shape\n"


def test_statistics_as_json_is_a_list_of_each_rule_s_count(checkpoint):
    result = run_cli_in_process("check", checkpoint, "--statistics", "--output-format", "json")
    assert json.loads(result.stdout) == [{"code": "NV101", "name": "legacy-scale-shape", "count": 48, "fixable": True}]


@pytest.mark.parametrize("option", ["--list", "--show-all"])
def test_statistics_is_refused_with_an_option_that_adds_findings_or_scales(checkpoint, option):
    """docs/check.md: an option is refused where it would not mean something."""
    result = run_cli_in_process("check", checkpoint, "--statistics", option)
    assert result.returncode == 2 and result.stdout == ""
    assert f"--statistics prints a count per rule instead of the findings; it cannot be given with {option}" in (
        result.stderr
    )


def test_statistics_is_not_taken_for_strict(checkpoint):
    """It was: argparse took the unknown --statistics for the nearest option (issue 43)."""
    assert run_cli_in_process("check", checkpoint, "--statistics").returncode == 0


def test_list_shows_every_scale_with_its_layout_and_value(checkpoint):
    lines = run_cli_in_process("check", checkpoint, "--list").stdout.splitlines()
    listed = [line for line in lines if line.startswith("legacy [1]")]
    assert len(listed) == 48
    name, value = listed[0].split()[2], float(listed[0].split(" = ")[1])
    assert name == "model.layers.0.mlp.experts.0.gate_proj.input_global_scale"
    assert 100.0 <= value <= 50000.0


def test_a_marker_that_disagrees_with_the_shards_is_an_nv102_warning_naming_config_json(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"]["format_version"] = 2
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = run_cli_in_process("check", checkpoint, "--json", "--select", "NV102")
    assert result.returncode == 0
    [finding] = findings(result)
    assert (finding["file"], finding["tensor"], finding["severity"]) == (
        str(checkpoint / "config.json"),
        None,
        "warning",
    )
    assert finding["message"].startswith("config.json declares format_version 2 but 48 global scales are (1,)")


def test_0_d_scales_without_the_marker_are_information_that_strict_lets_pass(clean):
    config = json.loads((clean / "config.json").read_text())
    del config["quantization_config"]["format_version"]
    (clean / "config.json").write_text(json.dumps(config))
    result = run_cli_in_process("check", clean, "--json")
    assert [(f["code"], f["severity"], f["effect"]) for f in findings(result)] == [("NV103", "info", "none")]
    strict = run_cli_in_process("check", clean, "--strict").returncode
    assert (result.returncode, strict) == (0, int(refused(clean))), "--strict fails an engine's refusal alone"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (0.0, "is 0: "),
        (-2.0, "is negative (-2.0)"),
        (math.nan, "is NaN: "),
        (math.inf, "is Inf: "),
        (-math.inf, "is -Inf: "),
    ],
)
def test_a_zero_negative_nan_or_inf_scale_is_an_nv301_error(clean, value, said):
    name = set_scale_value(clean, "input_global_scale", 0, value)
    result = run_cli_in_process("check", clean, "--json")
    assert result.returncode == 1
    assert [(f["code"], f["severity"], f["tensor"]) for f in findings(result)] == [("NV301", "error", name)]
    assert said in findings(result)[0]["message"]


def test_a_scale_just_above_the_reciprocal_threshold_is_not_reported(clean):
    """Not as the other convention: among siblings of 100 and more, these are a placeholder and an outlier (NV304,
    NV305)."""
    set_scale_value(clean, "down_proj.weight_global_scale", 0, 1.0)
    set_scale_value(clean, "down_proj.input_global_scale", 0, 0.05)
    assert run_cli_in_process("check", clean, "--select", "NV302").returncode == 0


def test_a_weight_scale_below_1_is_reported_as_the_reciprocal_convention(clean):
    name = set_scale_value(clean, "down_proj.weight_global_scale", 0, 0.99)
    [finding] = findings(run_cli_in_process("check", clean, "--json"))
    assert (finding["code"], finding["tensor"]) == ("NV302", name)
    assert "ModelOpt's amax/(6*448)" in finding["message"]


def test_a_scale_include_adds_is_checked_for_invalid_values_and_not_for_a_convention(clean):
    """0.05 would be the other convention for a weight global scale; a KV-cache scale has none of NVFP4's."""
    names = {"model.layers.0.self_attn.k_scale": 0.05, "model.layers.0.self_attn.v_scale": 0.0}
    shard = shard_of(clean, f"{EXPERT}.gate_proj.weight_packed")

    def add(tensors):
        for name, value in names.items():
            tensors[name] = {"dtype": "F32", "shape": [], "data": struct.pack("<f", value)}

    rewrite_shard(shard, add)
    index = json.loads((clean / INDEX_NAME).read_text())
    index["weight_map"].update(dict.fromkeys(names, shard.name))
    (clean / INDEX_NAME).write_text(json.dumps(index))
    result = run_cli_in_process("check", clean, "--json", "--include", "*.[kv]_scale", "--select", "NV3")
    assert [(f["code"], f["tensor"]) for f in findings(result)] == [("NV301", "model.layers.0.self_attn.v_scale")]


def test_a_scale_include_adds_is_held_to_nv101_alone_not_to_the_marker(clean):
    """format_version 2 speaks of the global scales: an included (1,) k_scale beside 0-D global scales is NV101's,
    and the marker still tells the truth (NV102 counted the included scales as global ones)."""
    names = ["model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"]
    shard = shard_of(clean, f"{EXPERT}.gate_proj.weight_packed")

    def add(tensors):
        for name in names:
            tensors[name] = {"dtype": "F32", "shape": [1], "data": struct.pack("<f", 1.0)}

    rewrite_shard(shard, add)
    index = json.loads((clean / INDEX_NAME).read_text())
    index["weight_map"].update(dict.fromkeys(names, shard.name))
    (clean / INDEX_NAME).write_text(json.dumps(index))
    result = run_cli_in_process("check", clean, "--json", "--include", "*.[kv]_scale", "--select", "NV1")
    assert sorted((f["code"], f["tensor"]) for f in findings(result)) == [("NV101", name) for name in names]


def test_a_lone_safetensors_file_is_not_said_to_be_judged_by_the_rules_that_need_a_config(clean, tmp_path):
    """A lone file has no config: the config rules (NV6) cannot judge it, and rules_applied and the summary's count
    leave them out, as docs/rules.md says. NV202 judges it by its tensors (tests/base/doctor/test_input_scales.py)."""
    lone = tmp_path / "model.safetensors"
    shutil.copy(shards(clean)[0], lone)
    summary = json.loads(run_cli_in_process("check", lone, "--json").stdout)["summary"]
    needs_config = {code for code, rule in RULES.items() if {"config", "quantization"} & set(rule.needs)}
    assert {"NV601", "NV607"} <= needs_config
    assert "NV202" not in needs_config
    assert summary["rules_applied"] == [code for code in COMPRESSED_TENSORS_RULES if code not in needs_config]


@pytest.mark.parametrize(("value", "codes"), [(20.0, []), (25.0, ["NV302"])])
def test_a_modelopt_input_scale_is_the_other_convention_only_above_65504_over_2688(clean, value, codes):
    """NV302's explanation: an input_scale of 20 (amax 53,760, within float16's range) is not flagged; above
    about 24.4 it is a compressed-tensors divisor."""
    to_modelopt(clean)
    set_scale_value(clean, ".input_scale", 0, value)
    assert [f["code"] for f in findings(run_cli_in_process("check", clean, "--json", "--select", "NV302"))] == codes


def test_a_selection_that_leaves_no_rule_is_a_usage_error(clean):
    """A check of no rule would pass any checkpoint: it printed "All checks passed: no finding from 0 rules"."""
    result = run_cli_in_process("check", clean, "--select", "NV1", "--ignore", "NV1", "--strict")
    assert (result.returncode, result.stdout, result.stderr.count("\n")) == (2, "", 1)
    assert "leaves no rule" in result.stderr


@pytest.mark.parametrize(("code", "edit"), [("NV501", "add"), ("NV502", "drop")])
def test_an_index_finding_says_what_vllm_does_with_it_once(clean, code, edit):
    """The finding's detail is the disagreement, its why what it does: the detail had held the consequence too."""
    index_path = clean / INDEX_NAME
    index = json.loads(index_path.read_text())
    name = f"{EXPERT}.up_proj.weight_packed"
    if edit == "add":
        index["weight_map"][f"{EXPERT}.up_proj.bias"] = index["weight_map"][name]
    else:
        del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    [finding] = findings(run_cli_in_process("check", clean, "--json"))
    assert finding["code"] == code
    assert finding["message"].count("vLLM loads") == 1, finding["message"]


def test_warnings_exit_0_and_strict_makes_them_exit_1(clean):
    """A ModelOpt checkpoint, which no engine's refusal is judged by: --strict passes it until it has a warning (a
    compressed-tensors one with 0-D scales fails --strict without one: transformers does not load it)."""
    to_modelopt(clean)
    assert run_cli_in_process("check", clean, "--strict").returncode == 0
    index_path = clean / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name = f"{EXPERT}.up_proj.weight"
    del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    result = run_cli_in_process("check", clean, "--json")
    assert result.returncode == 0
    assert [(f["code"], f["severity"], f["tensor"]) for f in findings(result)] == [("NV502", "warning", name)]
    assert run_cli_in_process("check", clean, "--strict").returncode == 1


def test_fused_partners_with_different_scales_are_an_nv303_error(clean):
    name = set_scale_value(clean, "up_proj.weight_global_scale", 0, 123.0)
    result = run_cli_in_process("check", clean, "--json")
    assert result.returncode == 1
    assert [(f["code"], f["severity"], f["effect"], f["tensor"]) for f in findings(result)] == [
        ("NV303", "error", "wrong-output", name)
    ]


def move_module_to_last_shard(checkpoint, module: str) -> None:
    """Move every tensor of ``module`` into the checkpoint's last shard, and the index with them."""
    source, target = shard_of(checkpoint, f"{module}.weight_packed"), shards(checkpoint)[-1]
    assert source != target
    moved = {}

    def take(tensors):
        moved.update({name: tensors.pop(name) for name in list(tensors) if name.startswith(f"{module}.")})

    rewrite_shard(source, take)
    rewrite_shard(target, lambda tensors: tensors.update(moved))
    index = json.loads((checkpoint / INDEX_NAME).read_text())
    index["weight_map"].update(dict.fromkeys(moved, target.name))
    (checkpoint / INDEX_NAME).write_text(json.dumps(index, indent=2))


def test_fused_partners_in_two_shards_with_different_scales_are_an_nv303_error(clean):
    name = set_scale_value(clean, f"{EXPERT_0}.up_proj.weight_global_scale", 0, 123.0)
    move_module_to_last_shard(clean, f"{EXPERT_0}.up_proj")
    result = run_cli_in_process("check", clean, "--json")
    assert [(f["code"], f["tensor"], f["file"]) for f in findings(result)] == [("NV303", name, str(shards(clean)[-1]))]


def test_fused_partners_in_two_shards_with_equal_scales_are_not_reported(clean):
    move_module_to_last_shard(clean, f"{EXPERT_0}.up_proj")
    result = run_cli_in_process("check", clean, "--json")
    assert (result.returncode, findings(result)) == (0, [])


DENSE_UP = "model.layers.0.mlp.up_proj.weight_global_scale"


def dense_mlp_finding(clean, tmp_path):
    """The one finding of a lone file holding one dense MLP, expert 0's made plain, its up projection's global
    scale set apart from its gate's."""
    lone = tmp_path / "model.safetensors"
    shutil.copy(shards(clean)[0], lone)

    def dense_mlp(tensors):
        expert = {name: tensor for name, tensor in tensors.items() if name.startswith(f"{EXPERT_0}.")}
        tensors.clear()
        tensors.update({name.replace(".experts.0.", "."): tensor for name, tensor in expert.items()})
        tensors[DENSE_UP]["data"] = struct.pack("<f", 7.5)

    rewrite_shard(lone, dense_mlp)
    [finding] = findings(run_cli_in_process("check", lone, "--json"))
    return finding


def test_gate_and_up_of_a_dense_mlp_are_partners_too(clean, tmp_path):
    """Outside experts, vLLM's fused linear keeps the largest global scale rather than the gate's."""
    finding = dense_mlp_finding(clean, tmp_path)
    assert (finding["code"], finding["tensor"]) == ("NV303", DENSE_UP)
    assert "keeps the largest" in finding["message"]


def test_a_dense_mlp_s_partners_say_their_effect_is_read_not_observed(clean, tmp_path):
    """The other tokens observed were an expert's w13's; no fused linear layer's break was served."""
    why = dense_mlp_finding(clean, tmp_path)["why"]
    assert "(observed" not in why and "(read, not run" in why, why


def test_a_module_without_weight_scale_is_reported_missing_under_nv203(clean):
    tensor = f"{EXPERT}.down_proj.weight_scale"
    rewrite_shard(shard_of(clean, tensor), lambda tensors: tensors.pop(tensor))
    result = run_cli_in_process("check", clean, "--json", "--select", "NV2,NV4")
    assert [(f["code"], f["tensor"]) for f in findings(result)] == [("NV203", tensor)]
    assert findings(result)[0]["message"].startswith("missing: ")


def test_select_and_ignore_take_codes_and_prefixes(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    codes = lambda *args: {f["code"] for f in findings(run_cli_in_process("check", checkpoint, "--json", *args))}  # noqa: E731
    assert codes() == {"NV101", "NV301"}
    assert codes("--select", "NV3") == {"NV301"}
    assert codes("--select", "NV101,NV301", "--ignore", "NV1") == {"NV301"}
    assert codes("--ignore", "NV301") == {"NV101"}


def test_ignoring_every_error_exits_0(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, 0.0)
    assert run_cli_in_process("check", checkpoint).returncode == 1
    assert run_cli_in_process("check", checkpoint, "--ignore", "NV301").returncode == 0


def test_an_unknown_rule_code_is_a_usage_error(checkpoint):
    result = run_cli_in_process("check", checkpoint, "--select", "NV999")
    assert result.returncode == 2
    assert "unknown rule code 'NV999'" in result.stderr
    assert "Traceback" not in result.stderr


def test_json_has_findings_and_a_summary(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, math.nan)
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    assert set(document) == {"schema_version", "findings", "not_loaded_by", "summary"}
    assert document["schema_version"] == 1
    assert {tuple(f) for f in document["findings"]} == {
        ("code", "severity", "effect", "tensor", "file", "message", "detail", "why")
    }
    assert document["summary"] == {
        "checkpoint": str(checkpoint),
        "commit": None,
        "changed_locally": [],
        "shards": 3,
        "producer": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_format": "nvfp4-pack-quantized",
        "format_version": None,
        "checked": True,
        "nvfp4_modules": 24,
        "rules_applied": COMPRESSED_TENSORS_RULES,
        "modules": [{"group": "group_0", "kind": "nvfp4", "count": 24}],
        "scales": 48,
        "legacy": 48,
        "scalar": 0,
        "kv_cache_scales": 0,
        "errors": 1,
        "warnings": 48,
        "infos": 0,
        "counts": {"NV101": 48, "NV301": 1},
        "ignored_by_config": 0,
        "exit_code": 1,
        "failed": True,
        "bytes_fetched": None,
        "bytes_total": None,
    }


def test_json_with_list_adds_every_scale_in_strict_json(checkpoint):
    set_scale_value(checkpoint, "input_global_scale", 0, math.nan)
    result = run_cli_in_process("check", checkpoint, "--json", "--list")
    scales = json.loads(result.stdout, parse_constant=refuse_non_json_constant)["scales"]
    assert len(scales) == 48
    assert {s["layout"] for s in scales} == {"legacy"}
    assert scales[0]["value"] == "NaN"


def test_an_fp8_module_beside_the_nvfp4_ones_is_not_judged_by_nvfp4_rules(clean):
    """Mixed precision: an FP8 projection, which its FP8 config group targets, has weight and an F32
    weight_scale, and no weight_packed."""
    config_path = clean / "config.json"
    config = json.loads(config_path.read_text())
    groups = config["quantization_config"]["config_groups"]
    groups["group_0"]["targets"] = [r"re:.*\.experts\..*"]
    groups["group_1"] = {"targets": [r"re:.*self_attn\.o_proj$"], "format": "float-quantized", "weights": {}}
    config["quantization_config"]["format"] = "mixed-precision"
    config_path.write_text(json.dumps(config))
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
    result = run_cli_in_process("check", clean, "--json")
    assert (result.returncode, findings(result)) == (0, []), result.stdout


@pytest.fixture
def bf16(tmp_path):
    """An unquantized checkpoint: one BF16 linear layer, a config without quantization_config."""
    folder = tmp_path / "bf16"
    folder.mkdir()
    header = json.dumps(
        {"model.layers.0.mlp.down_proj.weight": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}}
    )
    encoded = header.encode() + b" " * (-len(header) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(64))
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    return folder


def test_a_checkpoint_without_nvfp4_says_nothing_was_checked_and_exits_0(bf16):
    result = run_cli_in_process("check", bf16)
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == (
        "Nothing checked: no NVFP4 module and no per-tensor scale in scope (no quantization_config); the rules "
        "apply to NVFP4 checkpoints."
    )
    assert "All checks passed" not in result.stdout


def test_strict_makes_a_checkpoint_with_nothing_checked_exit_1(bf16):
    assert run_cli_in_process("check", bf16, "--strict").returncode == 1


def test_a_selection_no_rule_of_applies_to_the_checkpoint_is_nothing_checked(clean, tmp_path):
    """The config rules on a lone file (no config) judge nothing: that is no clean bill from 0 rules, exit 0 under
    --strict, but nothing checked."""
    lone = tmp_path / "model.safetensors"
    shutil.copy(shards(clean)[0], lone)
    result = run_cli_in_process("check", lone, "--select", "NV6", "--strict")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].startswith("Nothing checked: no rule selected applies to this checkpoint")


def test_nothing_checked_names_the_command_that_says_what_each_rule_selected_is_applied_to(clean, tmp_path):
    lone = tmp_path / "model.safetensors"
    shutil.copy(shards(clean)[0], lone)
    last = run_cli_in_process("check", lone, "--select", "NV601,NV602").stdout.splitlines()[-1]
    command = last.rpartition("; ")[2].removesuffix(" says what each is applied to.")
    assert command == "scalar-scales rule NV601 NV602"
    reference = run_cli_in_process(*command.split()[1:]).stdout
    assert reference.count("Applied only to a checkpoint with NVFP4 tensors") == 2


def test_nv609_names_an_nvfp4_group_whose_input_activations_alone_are_in_groups_other_than_16(clean):
    """vLLM refuses a W4A4 group whose weights are in groups of 16 and whose input activations are not."""
    config = json.loads((clean / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["group_size"] = 32
    (clean / "config.json").write_text(json.dumps(config))
    (finding,) = findings(run_cli_in_process("check", clean, "--json"))
    assert (finding["code"], finding["tensor"]) == ("NV609", None)
    assert finding["detail"] == (
        "the NVFP4 config group group_0 (nvfp4-pack-quantized) declares input_activations.group_size 32, but NVFP4 "
        "is blocks of 16 values"
    )


def test_nv613_names_the_group_its_format_and_each_weights_argument_that_is_not_nvfp4s(clean):
    """vLLM chooses the scheme from the arguments; the format says NVFP4. An argument left out is not judged."""
    config = json.loads((clean / "config.json").read_text())
    weights = config["quantization_config"]["config_groups"]["group_0"]["weights"]
    weights.update(type="int", symmetric=False)
    del weights["strategy"]
    (clean / "config.json").write_text(json.dumps(config))
    (finding,) = findings(run_cli_in_process("check", clean, "--json"))
    assert (finding["code"], finding["severity"], finding["tensor"]) == ("NV613", "error", None)
    assert finding["detail"] == (
        'the config group group_0 has format nvfp4-pack-quantized, but its weights say type "int", symmetric '
        "false, not NVFP4's"
    )


def test_nv613_reads_type_and_strategy_as_compressed_tensors_does_whatever_their_case(clean):
    """compressed-tensors' QuantizationArgs lowercases both before vLLM and SGLang compare them: "FLOAT" and
    "TENSOR_GROUP" are NVFP4's."""
    config = json.loads((clean / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"].update(type="FLOAT", strategy="TENSOR_GROUP")
    (clean / "config.json").write_text(json.dumps(config))
    assert findings(run_cli_in_process("check", clean, "--json")) == []


def test_a_model_class_in_the_targets_leaves_the_class_rules_unapplied_and_says_so(clean):
    config = json.loads((clean / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear", "Qwen3MoeTopKRouter"]
    (clean / "config.json").write_text(json.dumps(config))
    lines = run_cli_in_process("check", clean).stdout.splitlines()
    assert lines[1] == CHECKED[:-1] + (
        "; NV601, NV602, NV603, NV604 not applied: the config names classes a checkpoint does not show "
        "(Qwen3MoeTopKRouter)."
    )
    assert lines[-1].startswith(f"All checks passed: no finding from {len(COMPRESSED_TENSORS_RULES) - 4} rules")


def test_a_shard_that_is_still_a_git_lfs_pointer_is_refused_in_one_line_saying_to_pull(clean):
    """A clone made without `git lfs pull` holds each shard as a pointer of a few lines; its first bytes read as a
    header length of 2336927755350992246, which says nothing of what to do."""
    shard = shards(clean)[1]
    size = shard.stat().st_size
    shard.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        f"size {size}\n"
    )
    result = run_cli_in_process("check", clean)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"scalar-scales: error: {shard}: a Git LFS pointer, not the file: run git lfs pull\n"


def test_a_shard_of_a_checkpoint_is_refused_in_one_line_giving_the_folder_s_check(clean):
    """Checked alone, without its config, a shard passed where its folder's check found the same tensors wrong
    (a (1,) scale under format_version 2: NV102)."""
    shard = shards(clean)[0]
    result = run_cli_in_process("check", shard)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"scalar-scales: error: {shard}: is a shard of the checkpoint {clean} (its model.safetensors.index.json names "
        f"it); check judges a checkpoint's shards together, with its config and index: scalar-scales check {clean}"
    ]


def test_a_file_that_is_no_checkpoint_s_shard_is_checked_alone(clean):
    extra = clean / "consolidated.safetensors"
    shutil.copy(shards(clean)[0], extra)
    assert run_cli_in_process("check", extra).returncode == 0


def test_a_file_beside_a_config_json_without_an_index_is_refused_as_its_checkpoint_s_shard(clean):
    (clean / INDEX_NAME).unlink()
    result = run_cli_in_process("check", shards(clean)[0])
    assert result.returncode == 2
    assert "(its folder holds config.json)" in result.stderr
