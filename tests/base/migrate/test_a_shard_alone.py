"""A `.safetensors` file that is a shard of a checkpoint (its folder's index names it, or, without an index, its
folder holds config.json) is migrated only with its checkpoint: config.json's marker speaks for every shard, and a
shard migrated alone made it false. `migrate DIR/FILE` refuses, in one line that gives the folder's command; a file
that is no checkpoint's shard is migrated alone, as before."""

from __future__ import annotations

import json
import subprocess
import sys

from scalar_scales_testkit.cli import (
    let_edits_through,
    make_checkpoint,
    run_cli_in_process,
    shard_writes_held,
    shards,
    snapshot,
    until,
)


def marker_findings(checkpoint) -> list[str]:
    """The findings of the marker rules (NV102: the marker says 0-D where a scale is (1,); NV103: it is missing)."""
    document = json.loads(run_cli_in_process("check", checkpoint, "--json", "--select", "NV102,NV103").stdout)
    return [finding["code"] for finding in document["findings"]]


def test_a_shard_migrated_back_alone_after_its_folder_leaves_the_marker_true(checkpoint):
    """The race's losing order, made deterministic: `migrate DIR` first, then `migrate DIR/FILE --to legacy`."""
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    run_cli_in_process("migrate", shards(checkpoint)[0], "--to", "legacy")
    assert marker_findings(checkpoint) == []


def test_a_shard_named_in_its_folder_s_index_is_refused_in_one_line_giving_the_folder_s_command(checkpoint):
    shard = shards(checkpoint)[0]
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", shard, "--to", "legacy")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"scalar-scales: error: {shard}: is a shard of the checkpoint {checkpoint} (its "
        "model.safetensors.index.json names it); migrate changes a checkpoint's shards together, so that config.json's "
        f"format_version stays true of every one: scalar-scales migrate {checkpoint}"
    ]
    assert snapshot(checkpoint) == before


def test_a_file_beside_a_config_json_without_an_index_is_refused_as_its_checkpoint_s_shard(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=1)
    (only,) = shards(checkpoint)
    only.rename(checkpoint / "model.safetensors")
    (checkpoint / "model.safetensors.index.json").unlink()
    result = run_cli_in_process("migrate", checkpoint / "model.safetensors")
    assert result.returncode == 2
    assert "(its folder holds config.json)" in result.stderr


def test_a_shard_beside_a_config_json_in_a_folder_without_index_or_model_safetensors_is_told_to_write_the_index(
    tmp_path,
):
    """The folder's command refuses such a folder too (it holds neither an index nor model.safetensors): the line
    says what the folder lacks, where it gave `scalar-scales migrate DIR`, which refused in turn."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    (checkpoint / "model.safetensors.index.json").unlink()
    shard = shards(checkpoint)[0]
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", shard)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"scalar-scales: error: {shard}: is a shard of the checkpoint {checkpoint} (its folder holds config.json), "
        "which has no model.safetensors.index.json naming its shards and no model.safetensors; migrate changes a "
        "checkpoint's shards together, so that config.json's format_version stays true of every one: write the "
        f"index, then scalar-scales migrate {checkpoint}"
    ]
    assert run_cli_in_process("migrate", checkpoint).returncode == 2
    assert snapshot(checkpoint) == before


def test_a_shard_beside_a_model_safetensors_without_an_index_is_told_to_write_the_index(tmp_path):
    """`migrate DIR` takes the folder's model.safetensors alone, so it would never change this shard either."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    (checkpoint / "model.safetensors.index.json").unlink()
    first, *others = shards(checkpoint)
    first.rename(checkpoint / "model.safetensors")
    result = run_cli_in_process("migrate", others[0])
    assert result.returncode == 2
    assert (
        "(its folder holds config.json), which has no model.safetensors.index.json naming its shards and a "
        "model.safetensors, which migrate takes alone; migrate changes a checkpoint's shards together, so that "
        f"config.json's format_version stays true of every one: write the index, then scalar-scales migrate "
        f"{checkpoint}"
    ) in result.stderr


def test_a_diffusers_shard_without_its_index_is_told_of_diffusers_index_and_file(tmp_path):
    """A diffusers folder's names for them, where the shard is named as diffusers names its shards."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    (checkpoint / "model.safetensors.index.json").unlink()
    shard = shards(checkpoint)[0].rename(checkpoint / "diffusion_pytorch_model-00001-of-00003.safetensors")
    result = run_cli_in_process("migrate", shard)
    assert result.returncode == 2
    assert (
        "which has no diffusion_pytorch_model.safetensors.index.json naming its shards and no "
        "diffusion_pytorch_model.safetensors;"
    ) in result.stderr


def test_a_file_its_folder_s_index_does_not_name_is_migrated_alone(checkpoint):
    """A file beside the shards that the index does not name (a `consolidated.safetensors`) is no shard of the
    checkpoint: it is migrated alone, and config.json, which does not speak for it, stays as it was."""
    extra = checkpoint / "consolidated.safetensors"
    extra.write_bytes(shards(checkpoint)[0].read_bytes())
    config = (checkpoint / "config.json").read_bytes()
    result = run_cli_in_process("migrate", extra)
    assert result.returncode == 0, result.stderr
    assert "no config.json to update" in result.stdout
    assert (checkpoint / "config.json").read_bytes() == config


def test_a_shard_migrated_while_its_folder_migrates_changes_nothing_and_the_marker_ends_true(checkpoint):
    """The race's other order, held at a known point: `migrate DIR` has checked every file and waits to write its
    first shard when `migrate DIR/FILE --to legacy` runs; that changes nothing, and the folder's migration ends
    with every shard 0-D under format_version 2."""

    def start() -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint)]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    with shard_writes_held(checkpoint, start) as (process, leases):
        alone = run_cli_in_process("migrate", shards(checkpoint)[0], "--to", "legacy")
        assert until(let_edits_through(leases, process, len(leases)), process)
    assert process.wait() == 0, process.stderr.read() if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    assert alone.returncode == 2
    assert "another migrate is running on this checkpoint" in alone.stderr
    assert marker_findings(checkpoint) == []
