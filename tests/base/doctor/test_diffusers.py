"""A diffusers transformer folder (Wan 2.2's layout, auto-round #2380) is read as users point at it."""

from __future__ import annotations

import json

from scalar_scales.doctor import RULES
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.sources import DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_FILE_NAME, resolve_checkpoint
from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.diffusion import wan_transformer


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
    result = run_cli_in_process("check", wan_transformer(tmp_path / "transformer"))
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == (
        f"All checks passed: no finding from {len(RULES)} rules on 12 NVFP4 modules and 24 global scales."
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
