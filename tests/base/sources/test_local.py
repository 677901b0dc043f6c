"""A local checkpoint's shards are the ones its index names, though a scan starts on the folder's files while the
index is read."""

from __future__ import annotations

import json

import pytest

from scalar_scales.sources import INDEX_NAME, resolve_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, run_cli, snapshot


def test_a_broken_safetensors_file_the_index_does_not_name_is_not_read(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    (checkpoint / "consolidated.safetensors").write_bytes(b"\xff" * 16)
    expected = json.loads(run_cli("check", checkpoint, "--json").stdout)
    assert expected["summary"]["shards"] == 12
    assert [f["code"] for f in expected["findings"]] == ["NV101"] * expected["summary"]["scales"]


def test_a_shard_the_index_names_that_is_not_in_the_folder_is_refused_naming_it(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    missing = sorted(checkpoint.glob("*.safetensors"))[5]
    missing.unlink()
    before = snapshot(checkpoint)
    for command in ("check", "migrate"):
        result = run_cli(command, checkpoint)
        assert (result.returncode, result.stderr) == (
            2,
            f"scalar-scales: error: {missing}: named in {INDEX_NAME} but missing\n",
        )
    assert snapshot(checkpoint) == before


def test_the_index_is_read_when_the_shards_are_asked_for(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    (checkpoint / "extra.safetensors").write_bytes(b"")
    resolved = resolve_checkpoint(checkpoint)
    assert len(resolved.likely_files) == 13
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
        result = run_cli(command, checkpoint)
        assert (result.returncode, result.stderr) == (
            2,
            f"scalar-scales: error: {checkpoint / INDEX_NAME}: weight_map maps {tensor!r} to {value!r}, "
            "which is not a .safetensors file in this folder\n",
        )
    assert snapshot(checkpoint) == before
