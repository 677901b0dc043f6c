"""ModelOpt NVFP4 checkpoints (NVIDIA's layout), as NVIDIA's exporter writes them (nvidia-modelopt 0.47 on the toys:
scripts/make_modelopt_artifacts.py): checked by the same rules in ModelOpt's names, but for the three that are
compressed-tensors' own; `migrate` gives (1,) scales the 0-D shape ModelOpt writes, and nothing else.

An export declares its quantization twice, in config.json's ``quantization_config`` (which vLLM reads) and in
hf_quant_config.json. A checkpoint declared in hf_quant_config.json alone, as ModelOpt's older exports are, is
made here from a real export by removing config.json's declaration: no exporter at hand writes one so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales_testkit.broken import EXPERT, MODELOPT_CORPUS
from scalar_scales_testkit.checkpoints import described, tensor_bytes
from scalar_scales_testkit.cli import rewrite_header, run_cli_in_process, snapshot
from scalar_scales_testkit.modelopt_exports import EXPORTS, copy_of_export, exported
from scalar_scales_testkit.replicas import Replica, bf16, modelopt_config, modelopt_module, write_replica

MODELOPT_RULES = [code for code, rule in RULES.items() if rule.is_about(MODELOPT_LAYOUT)]
"""The rules applied to a ModelOpt export: every rule but compressed-tensors' own."""

COMPRESSED_TENSORS_OWN = {"NV102", "NV103", "NV304", "NV604", "NV613"}
"""The rules docs/check.md says are applied to compressed-tensors checkpoints only: its marker, its placeholder
scale, its weight-only groups, its group format."""
MODELOPT_OWN = {"NV608", "NV611", "NV612"}
"""The rules docs/check.md says are applied to ModelOpt checkpoints only: its quant_algo against its groups, its
router, its two declaration files."""
FORMATS = {"w4a16": "W4A16_NVFP4", "mixed": "MIXED_PRECISION"}
"""The ModelOpt format of each export that is not NVFP4."""


def declared_in_hf_quant_config_only(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    del config["quantization_config"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    return checkpoint


def checked(checkpoint, *args):
    return json.loads(run_cli_in_process("check", checkpoint, "--json", *args).stdout)


def test_the_rules_about_one_producer_are_those_the_docs_name():
    text = " ".join((Path(__file__).resolve().parents[3] / "docs" / "check.md").read_text(encoding="utf-8").split())
    found = re.search(r"except (\w+) about one producer's own: (.*?) to ModelOpt checkpoints only", text)
    assert found is not None
    theirs, ours = found.group(2).split("are applied to compressed-tensors checkpoints only")
    assert set(re.findall(r"NV\d{3}", theirs)) == COMPRESSED_TENSORS_OWN
    assert set(re.findall(r"NV\d{3}", ours)) == MODELOPT_OWN
    assert found.group(1) == "eight" and len(COMPRESSED_TENSORS_OWN | MODELOPT_OWN) == 8
    assert {code for code, rule in RULES.items() if not rule.is_about(MODELOPT_LAYOUT)} == COMPRESSED_TENSORS_OWN
    assert {code for code, rule in RULES.items() if not rule.is_about(COMPRESSED_TENSORS_LAYOUT)} == MODELOPT_OWN


@pytest.mark.parametrize("name", EXPORTS)
def test_every_real_export_passes_under_its_own_format_name_and_declaration_file(name):
    result = run_cli_in_process("check", exported(name))
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout
    assert f"ModelOpt {FORMATS.get(name, 'NVFP4')} (config.json)" in lines[0]
    assert lines[-1].startswith(f"All checks passed: no finding from {len(MODELOPT_RULES)} rules on ")


@pytest.mark.parametrize("name", EXPORTS)
def test_the_rules_applied_to_a_real_export_leave_out_compressed_tensors_own(name):
    summary = checked(exported(name))["summary"]
    assert (summary["producer"], summary["format"]) == ("modelopt", FORMATS.get(name, "NVFP4"))
    assert summary["rules_applied"] == MODELOPT_RULES
    assert not COMPRESSED_TENSORS_OWN & set(summary["rules_applied"])


def test_an_export_declared_in_hf_quant_config_json_alone_passes_naming_that_file(tmp_path):
    checkpoint = declared_in_hf_quant_config_only(copy_of_export(tmp_path / "export"))
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 0, result.stdout
    assert "ModelOpt NVFP4 (hf_quant_config.json)" in result.stdout.splitlines()[0]


def test_mixed_precision_checks_its_nvfp4_experts_and_holds_its_fp8_attention_to_the_config():
    lines = run_cli_in_process("check", exported("mixed")).stdout.splitlines()
    assert "config group NVFP4 (group size 16), NVFP4 W4A4: 48" in lines[1]
    assert "8 quantized another way" in lines[1]


def test_a_compressed_tensors_divisor_in_weight_scale_2_is_told_in_modelopt_terms(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS["reciprocal-convention"].make(checkpoint, MODELOPT_LAYOUT)
    finding = next(f for f in checked(checkpoint)["findings"] if f["tensor"] == f"{EXPERT}.down_proj.weight_scale_2")
    assert "in ModelOpt's amax/(6*448) convention" in finding["detail"]
    assert finding["why"].startswith("the value looks like compressed-tensors' (6*448)/amax; vLLM multiplies by it")


@pytest.mark.parametrize(
    ("example", "tensors", "engines"),
    [
        (
            "modelopt-weight-only-groups",
            "no shard holds an input_scale, as weight-only has none",
            "vLLM 0.23 reads quant_algo and builds W4A4 over activation scales never loaded",
        ),
        (
            "modelopt-weight-only-groups-with-input-scales",
            "the shards hold 56 input_scale tensors, as W4A4 has",
            "serve it weight-only (W4A16_NVFP4), dropping those input scales",
        ),
    ],
    ids=["no-input-scales", "input-scales"],
)
def test_nv608_names_both_sides_and_the_one_the_shards_bear_out(tmp_path, example, tensors, engines):
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS[example].make(checkpoint, MODELOPT_LAYOUT)
    (finding,) = checked(checkpoint)["findings"]
    assert (finding["tensor"], finding["file"]) == (None, str(checkpoint / "config.json"))
    assert finding["detail"] == (
        "quant_algo NVFP4 declares W4A4 (activations quantized), but config groups group_0 all say "
        f"input_activations: null (weight-only); {tensors}"
    )
    assert engines in finding["why"]


def test_nv608_is_not_found_where_one_config_group_quantizes_activations(tmp_path):
    """vLLM takes NVFP4 for weight-only only where every config group is: one W4A4 group keeps it W4A4."""
    checkpoint = copy_of_export(tmp_path / "export")
    config = json.loads((checkpoint / "config.json").read_text())
    groups = config["quantization_config"]["config_groups"]
    groups["group_1"] = {**groups["group_0"], "input_activations": None, "targets": ["re:.*never$"]}
    (checkpoint / "config.json").write_text(json.dumps(config))
    assert checked(checkpoint)["findings"] == []


def test_mixed_precision_nvfp4_is_w4a4_whatever_its_config_groups_say(tmp_path):
    """vLLM builds MIXED_PRECISION's NVFP4 layers as W4A4 whatever the config groups say (its
    ModelOptMixedPrecisionConfig never reads them): there is no contradiction for the engines to read two ways
    (no NV608), and the experts are held to W4A4's input scales."""
    checkpoint = copy_of_export(tmp_path / "export", "mixed")
    config = json.loads((checkpoint / "config.json").read_text())
    for group in config["quantization_config"]["config_groups"].values():
        group["input_activations"] = None
    (checkpoint / "config.json").write_text(json.dumps(config))
    assert checked(checkpoint)["findings"] == []
    assert "config group NVFP4 (group size 16), NVFP4 W4A4: 48" in run_cli_in_process("check", checkpoint).stdout


@pytest.mark.parametrize(
    ("declared_in", "key"),
    [("config.json", "ignore"), ("hf_quant_config.json", "exclude_modules")],
)
def test_nv601_names_the_key_the_exclusions_came_from(tmp_path, declared_in, key):
    checkpoint = copy_of_export(tmp_path / "export")
    if declared_in == "hf_quant_config.json":
        declared_in_hf_quant_config_only(checkpoint)
    MODELOPT_CORPUS["quantized-layer-ignored"].make(checkpoint, MODELOPT_LAYOUT)
    messages = {f["message"] for f in checked(checkpoint)["findings"] if f["code"] == "NV601"}
    assert messages == {
        f"stored as NVFP4, but the config's {key} leaves the module unquantized: vLLM builds it unquantized and "
        "finds no weight of that name (observed: the engine does not start)"
    }


def test_migrate_says_there_is_nothing_to_migrate_in_a_real_export_and_changes_nothing(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{checkpoint}: nothing to migrate: a ModelOpt NVFP4 checkpoint, whose 112 scales are 0-D, as ModelOpt "
        "writes them\n"
    )
    assert snapshot(checkpoint) == before


def with_1_scales(checkpoint):
    MODELOPT_CORPUS["legacy-scales"].make(checkpoint, MODELOPT_LAYOUT)
    return checkpoint


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-sharded"])
def test_nv101_on_an_export_advises_migrate_and_migrate_makes_its_scales_0_d_as_the_export_had_them(tmp_path, name):
    """Every tensor gets back the dtype, shape and bytes the exporter wrote (the header's text may differ)."""
    checkpoint = with_1_scales(copy_of_export(tmp_path / "export", name))
    assert f"fix: scalar-scales migrate {checkpoint}" in run_cli_in_process("check", checkpoint).stdout
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert "changed 112 of 112 scales to 0-D" in result.stdout
    assert "; ModelOpt's configs have no marker to update" in result.stdout
    assert described(checkpoint) == described(exported(name))
    assert tensor_bytes(checkpoint) == tensor_bytes(exported(name))
    assert run_cli_in_process("check", checkpoint).returncode == 0


def test_migrate_of_a_modelopt_checkpoint_changes_neither_config(tmp_path):
    checkpoint = with_1_scales(copy_of_export(tmp_path / "export"))
    configs = {name: (checkpoint / name).read_bytes() for name in ("config.json", "hf_quant_config.json")}
    run_cli_in_process("migrate", checkpoint)
    assert {name: (checkpoint / name).read_bytes() for name in configs} == configs


@pytest.mark.parametrize("option", [("--to", "legacy"), ("--include", "*.input_scale")], ids=["to-legacy", "include"])
def test_migrate_refuses_to_write_a_compressed_tensors_layout_into_a_modelopt_checkpoint(tmp_path, option):
    """migrate --help: a ModelOpt checkpoint's configs stay as they are, and --to legacy and --include refuse it."""
    checkpoint = copy_of_export(tmp_path / "export")
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint, *option)
    assert result.returncode == 2
    assert "is a ModelOpt checkpoint" in result.stderr
    assert snapshot(checkpoint) == before


def test_migrate_refuses_a_modelopt_scale_that_holds_more_than_one_value(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    tensor = f"{EXPERT}.down_proj.weight_scale_2"
    rewrite_header(checkpoint / "model.safetensors", lambda header: header[tensor].update(shape=[1, 1]))
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 2
    assert tensor in result.stderr
    assert snapshot(checkpoint) == before


def test_an_unquantized_target_in_an_export_is_told_as_the_engine_showed_it_nan_not_a_refusal(tmp_path):
    """ModelOpt names its packed weight ``weight``, as an unquantized one is named (docs/check-evidence.md)."""
    checkpoint = copy_of_export(tmp_path / "export")
    tensor = MODELOPT_CORPUS["targeted-layer-unquantized"].make(checkpoint, MODELOPT_LAYOUT)
    (finding,) = [f for f in checked(checkpoint)["findings"] if f["code"] == "NV603"]
    assert (finding["tensor"], finding["effect"]) == (tensor, "nan-output")
    assert finding["message"].endswith(
        "vLLM builds it as NVFP4 and loads its stored weight's bytes as FP4 values (observed for an unquantized "
        "one: NaN output)"
    )


def test_an_uncalibrated_expert_in_an_export_has_the_effect_the_engine_showed_other_tokens(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS["uncalibrated-expert"].make(checkpoint, MODELOPT_LAYOUT)
    effects = {f["effect"] for f in checked(checkpoint)["findings"] if f["code"] == "NV301"}
    assert effects == {"wrong-output"}


def test_the_rule_reference_gives_the_effect_seen_on_modelopt_checkpoints_where_it_differs():
    reference = run_cli_in_process("rule", "NV301").stdout
    assert "\nEffect on modelopt checkpoints: `wrong-output` (vLLM starts and generates other tokens" in reference


def test_nv611_names_the_router_and_the_exclusions_that_leave_it_quantized(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS["router-not-excluded"].make(checkpoint, MODELOPT_LAYOUT)
    findings = checked(checkpoint)["findings"]
    assert [(f["code"], f["tensor"]) for f in findings] == [
        ("NV611", f"model.layers.{layer}.mlp.gate.weight") for layer in (0, 1)
    ]
    assert findings[0]["detail"] == (
        "the router is stored unquantized (BF16), but quant_algo NVFP4 quantizes it: the config's ignore does not "
        "name it"
    )
    assert findings[0]["why"].startswith(
        "vLLM 0.23, 0.32 and 0.33 build Qwen3MoeForCausalLM's router as packed FP4 and refuse its weight"
    )
    assert "observed for Qwen3-MoE's router in vLLM 0.32 and 0.33)" in findings[0]["why"]


def test_nv611_is_not_found_for_an_architecture_whose_engines_build_the_router_unquantized(tmp_path):
    """vLLM's Mixtral builds its router with no quantization config whatever the declaration says."""
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS["router-not-excluded"].make(checkpoint, MODELOPT_LAYOUT)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "architectures": ["MixtralForCausalLM"]}))
    assert checked(checkpoint)["findings"] == []


def test_nv612_names_the_field_and_what_each_file_says_of_it(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export")
    MODELOPT_CORPUS["declaration-files-disagree"].make(checkpoint, MODELOPT_LAYOUT)
    (finding,) = checked(checkpoint)["findings"]
    assert (finding["code"], finding["severity"], finding["file"]) == (
        "NV612",
        "warning",
        str(checkpoint / "config.json"),
    )
    assert finding["detail"] == (
        "quant_algo: config.json's quantization_config says NVFP4, hf_quant_config.json says W4A16_NVFP4"
    )
    assert finding["why"].startswith("vLLM 0.23, 0.32 and 0.33 and SGLang 0.5.23 serve config.json's")


def edited(path, edit):
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def test_nv612_reads_config_json_s_kv_cache_scheme_as_the_fp8_that_hf_quant_config_json_names(tmp_path):
    """The exporter writes ``kv_cache_scheme`` (8-bit floats) in one file and ``kv_cache_quant_algo: FP8`` in the
    other: the same algorithm (the real export passes); a file that names none disagrees."""
    checkpoint = copy_of_export(tmp_path / "export", "nvfp4-fp8-kv")
    edited(
        checkpoint / "hf_quant_config.json", lambda document: document["quantization"].update(kv_cache_quant_algo=None)
    )
    (finding,) = checked(checkpoint)["findings"]
    assert (finding["code"], finding["detail"]) == (
        "NV612",
        "the KV-cache algorithm: config.json's quantization_config says FP8, hf_quant_config.json says nothing",
    )


def test_nv612_finds_a_group_size_the_two_files_state_differently(tmp_path):
    """The exporter states group_size in hf_quant_config.json alone, which is no disagreement (the real export
    passes); stated in both, two sizes are."""
    checkpoint = copy_of_export(tmp_path / "export")
    edited(checkpoint / "config.json", lambda document: document["quantization_config"].update(group_size=16))
    edited(checkpoint / "hf_quant_config.json", lambda document: document["quantization"].update(group_size=32))
    (finding,) = checked(checkpoint)["findings"]
    assert (finding["code"], finding["detail"]) == (
        "NV612",
        "group_size: config.json's quantization_config says 16, hf_quant_config.json says 32",
    )


def test_nv612_names_only_the_quantized_layers_whose_algorithm_differs(tmp_path):
    checkpoint = copy_of_export(tmp_path / "export", "mixed")
    module = "model.layers.0.self_attn.q_proj"
    edited(
        checkpoint / "hf_quant_config.json",
        lambda document: document["quantization"]["quantized_layers"].update({module: {"quant_algo": "NVFP4"}}),
    )
    (finding,) = checked(checkpoint)["findings"]
    assert (finding["code"], finding["detail"]) == (
        "NV612",
        f"quantized_layers: config.json's quantization_config says {module}: FP8, hf_quant_config.json says "
        f"{module}: NVFP4",
    )


def test_nv612_holds_the_exclusions_as_sets_and_names_each_files(tmp_path):
    """The exporter lists the same modules in both files; their order is not a disagreement, a missing one is."""
    checkpoint = copy_of_export(tmp_path / "export")
    modelopt = json.loads((checkpoint / "hf_quant_config.json").read_text())
    excluded = modelopt["quantization"]["exclude_modules"]
    modelopt["quantization"]["exclude_modules"] = excluded[::-1]
    (checkpoint / "hf_quant_config.json").write_text(json.dumps(modelopt))
    assert checked(checkpoint)["findings"] == []
    modelopt["quantization"]["exclude_modules"] = excluded[:-1]
    (checkpoint / "hf_quant_config.json").write_text(json.dumps(modelopt))
    (finding,) = checked(checkpoint)["findings"]
    assert finding["detail"] == (
        f"the exclusions: config.json's quantization_config says [{', '.join(sorted(excluded))}], "
        f"hf_quant_config.json says [{', '.join(sorted(excluded[:-1]))}]"
    )


@pytest.mark.parametrize("exclude", [("lm_head",), ()])
def test_a_bf16_lm_head_is_not_judged_whether_a_modelopt_declaration_excludes_it_or_not(tmp_path, exclude):
    """vLLM's ModelOpt config builds a ParallelLMHead its exclusions do not name as NVFP4 (read), but what it does
    with a BF16 one is not observed: NV603 claims no effect for it."""
    tensors = [bf16("lm_head.weight", 128, 64), *modelopt_module("model.layers.0.self_attn.o_proj")]
    replica = Replica(
        {"model.safetensors": tensors},
        {"architectures": ["LlamaForCausalLM"]},
        modelopt_config(exclude_modules=exclude),
    )
    document = json.loads(run_cli_in_process("check", write_replica(replica, tmp_path / "checkpoint"), "--json").stdout)
    assert document["findings"] == []
