"""`scalar-scales migrate`: header-only, idempotent, reversible, scoped."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from scalar_scales.sources import read_headers
from scalar_scales_testkit.cli import (
    assert_migrate_refuses,
    data_digest,
    make_checkpoint,
    rewrite_header,
    run_cli_in_process,
    shards,
    snapshot,
    write_scales_natively_0_d,
)


def scale_shapes(folder) -> set[tuple[int, ...]]:
    return {
        shape
        for header in read_headers(folder)
        for name, shape in zip(header.names, header.shapes, strict=True)
        if name.endswith("_global_scale")
    }


def format_version(folder):
    return json.loads((folder / "config.json").read_text())["quantization_config"].get("format_version")


def test_migrate_makes_every_global_scale_0d_and_declares_format_version_2(checkpoint):
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert scale_shapes(checkpoint) == {()}
    assert format_version(checkpoint) == 2
    assert "changed 48 of 48 scales to 0-D in 3 of 3 shards in place (header only)" in result.stdout


def test_migrate_changes_exactly_one_header_byte_per_scale_and_no_data_byte(checkpoint):
    before = {p.name: p.read_bytes() for p in shards(checkpoint)}
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    for shard in shards(checkpoint):
        old, new = before[shard.name], shard.read_bytes()
        assert len(old) == len(new)
        changed = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        (header_length,) = struct.unpack("<Q", old[:8])
        assert all(8 <= i < 8 + header_length for i in changed)
        assert {(old[i], new[i]) for i in changed} == {(ord("1"), ord(" "))}
        assert len(changed) == sum(1 for n in read_headers(shard)[0].names if n.endswith("_global_scale"))


def test_a_second_migrate_changes_nothing_and_says_so(checkpoint):
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    after_first = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0
    assert "nothing to change: all 48 scales are already 0-D and config.json declares format_version 2" in result.stdout
    assert snapshot(checkpoint) == after_first


def test_migrate_to_legacy_and_back_gives_back_the_same_bytes(checkpoint):
    legacy = snapshot(checkpoint)
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    scalar = snapshot(checkpoint)
    assert run_cli_in_process("migrate", checkpoint, "--to", "legacy").returncode == 0
    assert snapshot(checkpoint) == legacy
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert snapshot(checkpoint) == scalar


def test_migrate_to_legacy_rewrites_a_header_with_no_byte_to_spare(checkpoint):
    """Natively written 0-D scales say `[]`: (1,) needs a longer header, so the shard is rewritten whole."""
    write_scales_natively_0_d(checkpoint)
    digests = {p.name: data_digest(p) for p in shards(checkpoint)}
    result = run_cli_in_process("migrate", checkpoint, "--to", "legacy")
    assert result.returncode == 0, result.stderr
    assert "3 rewritten to new files" in result.stdout
    assert scale_shapes(checkpoint) == {(1,)}
    assert {p.name: data_digest(p) for p in shards(checkpoint)} == digests
    assert not list(checkpoint.glob(".*.tmp"))


def test_dry_run_reports_and_changes_nothing(checkpoint):
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint, "--dry-run")
    assert result.returncode == 0
    assert (
        "would change 48 of 48 scales to 0-D in 3 of 3 shards; config.json format_version absent -> 2" in result.stdout
    )
    assert snapshot(checkpoint) == before


def test_check_exits_1_saying_what_would_change_and_changes_nothing(checkpoint):
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", checkpoint, "--check")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == (
        f"{checkpoint}: would change 48 of 48 scales to 0-D in 3 of 3 shards; config.json format_version absent -> 2"
    )
    assert snapshot(checkpoint) == before


def test_check_exits_0_where_there_is_nothing_to_change(checkpoint):
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    result = run_cli_in_process("migrate", checkpoint, "--check")
    assert result.returncode == 0
    assert "nothing to change: all 48 scales are already 0-D" in result.stdout


def test_check_with_json_exits_1_with_the_dry_run_s_document(checkpoint):
    result = run_cli_in_process("migrate", checkpoint, "--check", "--json")
    assert (result.returncode, json.loads(result.stdout)["dry_run"]) == (1, True)


def test_json_output_describes_the_migration(checkpoint):
    result = run_cli_in_process("migrate", checkpoint, "--json")
    report = json.loads(result.stdout)
    assert report["scales_changed"] == report["scales_total"] == 48
    assert (report["format_version_before"], report["format_version_after"]) == (None, 2)
    assert result.stderr == ""


def test_a_checkpoint_of_many_shards_is_migrated_whole(tmp_path):
    """More shards than migrate writes at once (``WRITERS`` threads): every one is written, none twice."""
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=12, experts=8)
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert scale_shapes(checkpoint) == {()}
    assert len(shards(checkpoint)) == 12


def test_a_folder_with_one_model_safetensors(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=1)
    (only,) = shards(checkpoint)
    only.rename(checkpoint / "model.safetensors")
    (checkpoint / "model.safetensors.index.json").unlink()
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert scale_shapes(checkpoint) == {()}
    assert format_version(checkpoint) == 2


def make_fp8_like(checkpoint):
    """Another format with per-tensor (1,) scales: rename the global scales and declare float-quantized."""
    for shard in shards(checkpoint):
        rewrite_header(shard, lambda h: {n.replace("_global_scale", "_scale_pt"): s for n, s in h.items()})
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    index["weight_map"] = {n.replace("_global_scale", "_scale_pt"): f for n, f in index["weight_map"].items()}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"]["format"] = "float-quantized"
    config["quantization_config"]["config_groups"]["group_0"]["format"] = "float-quantized"
    (checkpoint / "config.json").write_text(json.dumps(config))


def test_another_format_is_refused_with_an_explanation(checkpoint):
    make_fp8_like(checkpoint)
    assert_migrate_refuses(
        checkpoint, checkpoint, "quantization format is 'float-quantized', not nvfp4-pack-quantized", "--include GLOB"
    )


def test_include_names_other_per_tensor_scales(checkpoint):
    make_fp8_like(checkpoint)
    config = (checkpoint / "config.json").read_bytes()
    result = run_cli_in_process("migrate", checkpoint, "--include", "*.input_scale_pt")
    assert result.returncode == 0, result.stderr
    assert "consumers the round trip observed" not in result.stdout, "the round trip observed NVFP4 checkpoints only"
    shapes = {
        name: shape
        for header in read_headers(checkpoint)
        for name, shape in zip(header.names, header.shapes, strict=True)
        if "_scale_pt" in name
    }
    assert {s for n, s in shapes.items() if n.endswith("input_scale_pt")} == {()}
    assert {s for n, s in shapes.items() if n.endswith("weight_scale_pt")} == {(1,)}
    assert (checkpoint / "config.json").read_bytes() == config


def test_hugging_face_cache_links_are_refused_by_default(tmp_path):
    snapshot_dir, blobs = hf_cache(tmp_path)
    assert_migrate_refuses(snapshot_dir, blobs, "is a link into shared storage", "--materialize")


def test_a_linked_config_json_is_refused_by_default_though_every_shard_is_a_file(tmp_path):
    """Writing config.json anew renames a file over its link: the snapshot would hold a file of its own, which only
    --materialize may make. It used to become a regular file, exit 0."""
    snapshot_dir, _ = hf_cache(tmp_path)
    for shard in shards(snapshot_dir):
        blob = shard.resolve()
        shard.unlink()
        shutil.copyfile(blob, shard)
    assert_migrate_refuses(snapshot_dir, snapshot_dir.parent.parent, "config.json: is a link into shared storage")
    assert (snapshot_dir / "config.json").is_symlink()


@pytest.mark.parametrize("linked", ["model-00002-of-00003.safetensors", "config.json"])
def test_a_file_with_another_hard_link_is_refused_by_default_and_materialize_leaves_the_other_link_alone(
    tmp_path, linked
):
    """A hard link shares the file as a cache's symlink does: editing it, or renaming a new file over it, would
    change or part from the other name, so only --materialize writes it, and the other name keeps its bytes."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    other = tmp_path / "elsewhere"
    os.link(checkpoint / linked, other)
    kept = other.read_bytes()
    assert_migrate_refuses(checkpoint, tmp_path, f"{linked}: is a link into shared storage", "--materialize")
    assert run_cli_in_process("migrate", checkpoint, "--materialize").returncode == 0
    assert other.read_bytes() == kept and (checkpoint / linked).stat().st_nlink == 1
    assert scale_shapes(checkpoint) == {()} and format_version(checkpoint) == 2


def test_materialize_replaces_links_with_edited_copies_and_leaves_blobs_alone(tmp_path):
    snapshot_dir, blobs = hf_cache(tmp_path)
    before = snapshot(blobs)
    result = run_cli_in_process("migrate", snapshot_dir, "--materialize")
    assert result.returncode == 0, result.stderr
    assert not any(p.is_symlink() for p in [*shards(snapshot_dir), snapshot_dir / "config.json"])
    assert scale_shapes(snapshot_dir) == {()}
    assert format_version(snapshot_dir) == 2
    assert snapshot(blobs) == before


def hf_cache(tmp_path):
    """A Hugging Face hub cache layout: snapshot files are relative links to content-addressed blobs."""
    source = make_checkpoint(tmp_path / "source")
    repo = tmp_path / "hub" / "models--org--toy"
    blobs, snapshot_dir = repo / "blobs", repo / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snapshot_dir.mkdir(parents=True)
    for i, file in enumerate(sorted(source.iterdir())):
        blob = blobs / f"{i:040x}"
        blob.write_bytes(file.read_bytes())
        (snapshot_dir / file.name).symlink_to(f"../../blobs/{blob.name}")
    return snapshot_dir, blobs


def run_on_a_terminal(*args) -> str:
    """Run the CLI with a pseudo-terminal as stdout and stderr (util-linux `script`)."""
    import shlex
    import subprocess
    import sys

    command = shlex.join([sys.executable, "-m", "scalar_scales", *map(str, args)])
    result = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, check=True)
    return result.stdout


def test_a_terminal_shows_a_progress_bar(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=10, experts=8)
    output = run_on_a_terminal("migrate", checkpoint)
    assert "[##############################] 10/10 shards" in output


def test_json_on_a_terminal_is_quiet(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=10, experts=8)
    output = run_on_a_terminal("migrate", checkpoint, "--json")
    assert "shards]" not in output and "#" not in output
    assert json.loads(output)["scales_changed"] == 96


def test_an_os_error_while_the_lock_is_held_is_not_reported_as_a_lock_failure(checkpoint):
    import errno

    import pytest

    from scalar_scales.migration import checkpoint_lock
    from scalar_scales.sources import resolve_checkpoint

    with pytest.raises(OSError) as raised, checkpoint_lock(resolve_checkpoint(checkpoint)):
        raise OSError(errno.EIO, "Input/output error", str(checkpoint / "config.json"))
    assert raised.value.filename == str(checkpoint / "config.json") and "cannot lock" not in str(raised.value)


def test_a_shard_changed_by_someone_else_during_a_migration_is_not_edited(tmp_path):
    """The first progress report touches every shard: those not yet edited are no longer the files planned from."""
    import os

    import pytest

    from scalar_scales.errors import StoppedAfterWriting
    from scalar_scales.migration import migrate_checkpoint
    from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    touched: list[int] = []

    def someone_else_writes(done: int, total: int) -> None:
        if not touched:
            for shard in shards(checkpoint):
                os.utime(shard, ns=(1, 1))
            touched.append(done)

    with pytest.raises(StoppedAfterWriting, match="changed since this run read it; not edited"):
        migrate_checkpoint(checkpoint, progress=someone_else_writes)
    assert "format_version" not in json.loads((checkpoint / "config.json").read_text())["quantization_config"]


def test_a_lone_file_without_global_scales_is_refused_as_another_format(tmp_path):
    """docs/migrate.md: a lone file without a config counts as NVFP4 if it holds global scales. A BF16 file used
    to be reported as "nothing to change: all 0 scales are already 0-D", exit 0."""
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
    raw = header.encode() + b" " * (-len(header) % 8)
    lone = tmp_path / "model.safetensors"
    lone.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))
    assert_migrate_refuses(lone, tmp_path, "holds no NVFP4 global scale", "--include GLOB")
