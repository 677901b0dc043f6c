"""A local checkpoint's shards are the ones its index names, and no other file of the folder is opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scalar_scales.sources import INDEX_NAME, resolve_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process, snapshot


def test_a_safetensors_file_the_index_does_not_name_is_never_opened(tmp_path):
    """A FIFO blocks whoever opens it for reading until a writer comes, and none does: the check can only finish
    if it never opens the file."""
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    os.mkfifo(checkpoint / "consolidated.safetensors")
    for command in ("check", "migrate"):
        result = subprocess.run(
            [sys.executable, "-m", "scalar_scales", command, str(checkpoint), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode in (0, 1), result.stderr
    expected = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    assert expected["summary"]["shards"] == 12


def test_a_shard_the_index_names_that_is_not_in_the_folder_is_refused_naming_it(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    missing = sorted(checkpoint.glob("*.safetensors"))[5]
    missing.unlink()
    before = snapshot(checkpoint)
    for command in ("check", "migrate"):
        result = run_cli_in_process(command, checkpoint)
        assert (result.returncode, result.stderr) == (
            2,
            f"scalar-scales: error: {missing}: named in {INDEX_NAME} but missing\n",
        )
    assert snapshot(checkpoint) == before


def test_a_folder_s_shards_are_the_ones_its_index_names(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    (checkpoint / "extra.safetensors").write_bytes(b"")
    resolved = resolve_checkpoint(checkpoint)
    assert resolved.files == tuple(sorted(checkpoint.glob("model-*.safetensors")))
    assert set(resolved.weight_map.values()) == {shard.name for shard in resolved.files}


@pytest.mark.parametrize("value", [7, True, None, ["model-00001-of-00012.safetensors"], {"file": "x.safetensors"}])
def test_a_weight_map_entry_that_is_not_a_file_name_is_refused_naming_its_tensor(tmp_path, value):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    index = json.loads((checkpoint / INDEX_NAME).read_text())
    tensor = sorted(index["weight_map"])[3]
    index["weight_map"][tensor] = value
    (checkpoint / INDEX_NAME).write_text(json.dumps(index))
    before = snapshot(checkpoint)
    for command in ("check", "migrate"):
        result = run_cli_in_process(command, checkpoint)
        assert (result.returncode, result.stderr) == (
            2,
            f"scalar-scales: error: {checkpoint / INDEX_NAME}: weight_map maps {tensor!r} to {value!r}, "
            "which is not a .safetensors file in this folder\n",
        )
    assert snapshot(checkpoint) == before


def _folder_of_one_file(tmp_path, config: bool):
    """A folder holding one lone file under a name no library saves (FLUX.2-dev-NVFP4's), and config.json or not."""
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=1)
    folder = tmp_path / "flux2"
    folder.mkdir()
    (shard,) = checkpoint.glob("*.safetensors")
    shard.rename(folder / "flux2-dev-nvfp4-mixed.safetensors")
    if config:
        (checkpoint / "config.json").rename(folder / "config.json")
    return folder


def test_a_folder_whose_one_lone_file_has_another_name_is_refused_naming_the_path_that_reads_it(tmp_path):
    folder = _folder_of_one_file(tmp_path, config=False)
    for command in ("check", "migrate"):
        result = run_cli_in_process(command, folder)
        assert (result.returncode, result.stdout, result.stderr.count("\n")) == (2, "", 1)
        assert result.stderr.endswith(
            f"; its one .safetensors file is read alone where named: {folder / 'flux2-dev-nvfp4-mixed.safetensors'}\n"
        )
    assert run_cli_in_process("check", folder / "flux2-dev-nvfp4-mixed.safetensors").returncode in (0, 1)


def test_a_folder_with_config_json_and_a_file_of_another_name_names_no_file(tmp_path):
    """Named alone, that file would be refused as a shard of the folder's checkpoint."""
    folder = _folder_of_one_file(tmp_path, config=True)
    result = run_cli_in_process("check", folder)
    assert result.returncode == 2
    assert "read alone" not in result.stderr
