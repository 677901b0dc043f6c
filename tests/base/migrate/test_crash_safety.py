"""SIGKILL at random moments during migrate, and as soon as it edits a shard: every shard still parses with the
shapes it had or the migrated ones, no data byte moves, config.json never declares 0-D scales before every shard
has them, nothing is left running, and a rerun finishes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from safetensors import safe_open

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales_testkit.cli import data_digest, no_process_left, run_cli, shards
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

KILLS = {"linux": 24, "portable": 8}
"""Kills at random moments of a run, on each path; then kills as soon as the first shard is edited."""
AT_FIRST_EDIT = 3


def migrate_process(checkpoint, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def shapes_by_safetensors(shard) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, as safetensors' own reader sees the shard."""
    with safe_open(str(shard), framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}


def kill_at_first_edit(process: subprocess.Popen[bytes], shard) -> None:
    """SIGKILL the migration the moment ``shard``'s header changes: the edits have begun, config.json is not yet
    written."""
    with open(shard, "rb") as f:
        before = os.pread(f.fileno(), 1 << 16, 0)
        deadline = time.monotonic() + 120
        while os.pread(f.fileno(), 1 << 16, 0) == before and process.poll() is None and time.monotonic() < deadline:
            pass
    process.send_signal(signal.SIGKILL)


def declared_version(checkpoint) -> int | None:
    return json.loads((checkpoint / "config.json").read_text())["quantization_config"].get("format_version")


@pytest.mark.parametrize("path", ["linux", "portable"])
def test_sigkill_at_random_moments_and_at_the_first_edit_never_tears_a_shard_nor_runs_the_marker_ahead(tmp_path, path):
    env = {"SCALAR_SCALES_PORTABLE": "1"} if path == "portable" else {}
    # V4-Flash-shaped headers (66,048 scales, 46 shards), tiny data: the run is all header work.
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    digests = {p.name: data_digest(p) for p in shards(checkpoint)}
    legacy = {p.name: shapes_by_safetensors(p) for p in shards(checkpoint)}
    scalar = {name: {t: () if is_global_scale(t) else s for t, s in found.items()} for name, found in legacy.items()}

    start = time.perf_counter()
    assert migrate_process(checkpoint, env).wait() == 0
    full_run = time.perf_counter() - start
    assert run_cli("migrate", checkpoint, "--to", "legacy").returncode == 0

    rng = random.Random(43297)
    mid_migration = 0
    kills = KILLS[path]
    for kill in range(kills + AT_FIRST_EDIT):
        process = migrate_process(checkpoint, env)
        if kill < kills:
            time.sleep(full_run * (kill + rng.random()) / kills)
            process.send_signal(signal.SIGKILL)
        else:
            kill_at_first_edit(process, shards(checkpoint)[0])
        process.wait()
        assert no_process_left(checkpoint)

        found = {p.name: shapes_by_safetensors(p) for p in shards(checkpoint)}
        for name, shapes in found.items():
            assert (
                all(shapes[t] in (legacy[name][t], scalar[name][t]) for t in shapes)
                and shapes.keys() == legacy[name].keys()
            )
        assert {p.name: data_digest(p) for p in shards(checkpoint)} == digests
        migrated = [t for name, shapes in found.items() for t, shape in shapes.items() if shape != legacy[name][t]]
        everything = sum(map(is_global_scale, (t for shapes in legacy.values() for t in shapes)))
        if declared_version(checkpoint) == 2:
            assert len(migrated) == everything, "config.json declared format_version 2 before every shard had it"
        mid_migration += 0 < len(migrated) < everything or (
            len(migrated) == everything and declared_version(checkpoint) != 2
        )

        assert run_cli("migrate", checkpoint).returncode == 0
        assert run_cli("check", checkpoint, "--quiet").returncode == 0
        assert run_cli("migrate", checkpoint, "--to", "legacy").returncode == 0

    assert mid_migration >= AT_FIRST_EDIT, "a kill at the first edit did not land while shards were being edited"
