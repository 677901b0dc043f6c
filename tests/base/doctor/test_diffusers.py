"""A diffusers transformer folder (Wan 2.2's layout, auto-round #2380) is read as users point at it, and its
attentions' fused partners are held to one global scale where an engine fuses them, and only there."""

from __future__ import annotations

import json
import shutil

import pytest

from scalar_scales.doctor import RULES
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales.sources import DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_FILE_NAME, resolve_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.diffusion import wan_transformer
from scalar_scales_testkit.publishing import commit_all, git, git_repository
from scalar_scales_testkit.refusals import observed_not_to_load

APPLIED = [code for code, rule in RULES.items() if rule.is_about(COMPRESSED_TENSORS_LAYOUT)]
"""The rules applied to a compressed-tensors checkpoint, a diffusers folder too."""

SELF_ATTENTION = "blocks.0.attn1"
CROSS_ATTENTION = "blocks.1.attn2"
ISSUE_2380 = {"to_q": 12343.1035, "to_k": 5334.3257, "to_v": 8001.4883}
"""blocks.0.attn1's weight global scales in auto-round #2380's Wan2.2-T2V-A14B export."""


def check(folder) -> tuple[int, list[dict]]:
    result = run_cli_in_process("check", folder, "--json")
    return result.returncode, json.loads(result.stdout)["findings"]


def test_a_sharded_diffusers_folder_is_read_by_its_index_and_shard_names(tmp_path):
    folder = wan_transformer(tmp_path / "transformer")
    checkpoint = resolve_checkpoint(folder)
    weight_map = json.loads((folder / DIFFUSERS_INDEX_NAME).read_text())["weight_map"]
    assert [shard.name for shard in checkpoint.files] == sorted(set(weight_map.values()))
    assert checkpoint.weight_map == weight_map
    assert checkpoint.index == folder / DIFFUSERS_INDEX_NAME
    result = run_cli_in_process("check", folder)
    assert result.stdout.splitlines()[:2] == [
        f"{folder}: 2 shards, nvfp4-pack-quantized, format_version 2, 24 global scales (0 (1,), 24 0-D)",
        "Checked 12 NVFP4 modules (config group group_0, nvfp4-pack-quantized W4A4: 12) and 24 global scales.",
    ]


def test_equal_scales_in_every_attention_are_clean(tmp_path):
    result = run_cli_in_process("check", folder := wan_transformer(tmp_path / "transformer"))
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == (
        f"All checks passed: no finding from {len(APPLIED)} rules on 12 NVFP4 modules and 24 global scales."
        + observed_not_to_load(folder)
    )


def test_a_single_diffusion_pytorch_model_file_is_read_as_the_folder(tmp_path):
    folder = wan_transformer(tmp_path / "transformer", sharded=False)
    assert resolve_checkpoint(folder).files == (folder / DIFFUSERS_SINGLE_FILE_NAME,)
    assert check(folder) == (0, [])


def test_a_diffusers_shard_named_alone_is_refused_as_its_index_names_it(tmp_path):
    folder = wan_transformer(tmp_path / "transformer")
    shard = folder / "diffusion_pytorch_model-00001-of-00002.safetensors"
    result = run_cli_in_process("check", shard)
    assert result.returncode == 2
    assert f"is a shard of the checkpoint {folder} (its {DIFFUSERS_INDEX_NAME} names it)" in result.stderr


def test_self_attention_to_q_to_k_to_v_that_differ_are_an_nv303_error(tmp_path):
    scales = {f"{SELF_ATTENTION}.{projection}": value for projection, value in ISSUE_2380.items()}
    code, findings = check(wan_transformer(tmp_path / "transformer", weight_global=scales))
    assert code == 1
    assert [(f["code"], f["severity"], f["tensor"]) for f in findings] == [
        ("NV303", "error", f"{SELF_ATTENTION}.to_k.weight_global_scale"),
        ("NV303", "error", f"{SELF_ATTENTION}.to_v.weight_global_scale"),
    ]
    assert findings[0]["detail"].endswith("differs from to_q's 12343.103515625")
    assert "vLLM-Omni loads this self-attention's to_q, to_k and to_v into one to_qkv" in findings[0]["why"]


def test_check_staged_reads_a_diffusers_folder_as_git_stages_it(tmp_path):
    """The pre-commit hook's source: a staged shard of diffusers' names, by diffusers' index, is the one checked."""
    repository = git_repository(tmp_path / "model")
    folder = wan_transformer(repository / "transformer")
    commit_all(repository, "transformer")
    differing = wan_transformer(tmp_path / "differing", weight_global={f"{SELF_ATTENTION}.to_k": 2000.0})
    for shard in differing.glob("*.safetensors"):
        shutil.copy(shard, folder / shard.name)
    git(repository, "add", "-A")
    result = run_cli_in_process("check", "--staged", folder, "--json")
    findings = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["tensor"]) for f in findings] == [("NV303", f"{SELF_ATTENTION}.to_k.weight_global_scale")]


@pytest.mark.parametrize("differs", ["to_k", "to_v"])
def test_a_cross_attention_to_k_apart_from_its_to_v_is_an_nv303_error(tmp_path, differs):
    scales = {f"{CROSS_ATTENTION}.{differs}": 2000.0}
    code, findings = check(wan_transformer(tmp_path / "transformer", weight_global=scales))
    assert code == 1
    assert [(f["code"], f["tensor"]) for f in findings] == [("NV303", f"{CROSS_ATTENTION}.to_v.weight_global_scale")]
    assert "concatenates a cross-attention's to_k and to_v into one to_kv" in findings[0]["why"]


def test_a_cross_attention_to_q_apart_from_its_to_k_and_to_v_is_clean(tmp_path):
    """diffusers fuses a cross-attention's to_k and to_v only; its to_q reads the image, they the text."""
    scales = {f"{CROSS_ATTENTION}.to_q": 12343.1035}
    assert check(wan_transformer(tmp_path / "transformer", weight_global=scales)) == (0, [])


def test_migrate_makes_a_legacy_diffusers_folder_scalar_and_marks_its_config(tmp_path):
    folder = wan_transformer(tmp_path / "transformer")
    migrate_checkpoint(folder, to="legacy")
    result = run_cli_in_process("migrate", folder)
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == (
        f"{folder}: changed 24 of 24 scales to 0-D in 2 of 2 shards in place (header only); "
        "config.json format_version absent -> 2"
    )
    assert check(folder) == (0, [])
