"""SIGKILL at moments spread over a migrate, and as soon as it edits a shard: every shard still parses with the
shapes it had or the migrated ones, no data byte moves, config.json never declares 0-D scales before every shard
has them, nothing is left running, and a rerun finishes.

Each moment is an event seen from outside the process, never a guessed delay: file leases (the test kit's
``Lease``) make its opens of a file wait, so a kill lands while it waits to read a shard, to check one, to check
config.json, with a given number of shard edits let through and the others held, or once every shard is edited
and read back, before the marker. A kill meant to land mid-migration does so every time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales_testkit.cli import (
    Lease,
    data_digest,
    let_edits_through,
    no_process_left,
    run_cli_in_process,
    shard_writes_held,
    shards,
    signals_taken_over,
    until,
)
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

KILLS = {"linux": 24, "portable": 8}
"""Kills at moments spread over a run, on each path; then kills as soon as the first shard is edited."""
AT_FIRST_EDIT = 3

BEFORE_WRITING = ("signals taken over", "reading a shard", "checking a shard", "checking config.json")
"""The moments before anything is written: a kill there changes nothing."""
WRITING = ("shards edited", "every shard edited")
"""The moments mid-migration: some shards edited and not all, or every one and not yet the marker."""


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


def declared_version(checkpoint) -> int | None:
    return json.loads((checkpoint / "config.json").read_text())["quantization_config"].get("format_version")


def kill_moments(kills: int, count: int) -> list[tuple[str, int]]:
    """``kills`` moments spread over a run of a checkpoint of ``count`` shards, in the order a run meets them: each
    a moment's name and a shard's number (for ``shards edited``, how many edits are let through, spread from one to
    all but one)."""
    early = [("signals taken over", 0), ("reading a shard", count // 2), ("checking a shard", count // 2)]
    early.append(("checking config.json", 0))
    edited = kills - len(early) - 1
    spread = [1 + (count - 2) * i // max(edited - 1, 1) for i in range(edited)]
    return [*early, *(("shards edited", p) for p in spread), ("every shard edited", 0)]


def kill_at(checkpoint: Path, env: dict[str, str], moment: str, which: int) -> subprocess.Popen[bytes]:
    """Start a migrate of ``checkpoint`` and SIGKILL it at ``moment`` (:func:`kill_moments`); every lease is taken
    before the process starts, and a kill meant to land while it waits lands before the wait ends."""

    def start() -> subprocess.Popen[bytes]:
        return migrate_process(checkpoint, env)

    if moment == "signals taken over":
        process = start()
        assert until(signals_taken_over(process), process), "the migration ended before it took over its signals"
    elif moment in ("reading a shard", "checking a shard", "checking config.json"):
        path = checkpoint / "config.json" if moment == "checking config.json" else shards(checkpoint)[which]
        with Lease(path, "write" if moment == "reading a shard" else "read") as lease:
            process = start()
            assert until(lease.waited_on, process), f"the migration ended before {moment}"
            process.send_signal(signal.SIGKILL)
    elif moment == "shards edited":
        with shard_writes_held(checkpoint, start) as (process, leases):
            assert until(let_edits_through(leases, process, which), process), "the last edit let through never came"
            process.send_signal(signal.SIGKILL)
    else:
        assert moment == "every shard edited", moment
        with (
            shard_writes_held(checkpoint, start) as (process, leases),
            Lease(checkpoint / "config.json", "write") as marker,  # read before the marker is written
        ):
            for lease in leases:
                lease.release()
            assert until(marker.waited_on, process), "the migration ended without reading config.json again"
            process.send_signal(signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    return process


@pytest.mark.parametrize("path", ["linux", "portable"])
def test_sigkill_at_random_moments_and_at_the_first_edit_never_tears_a_shard_nor_runs_the_marker_ahead(tmp_path, path):
    env = {"SCALAR_SCALES_PORTABLE": "1"} if path == "portable" else {}
    # V4-Flash-shaped headers (66,048 scales, 46 shards), tiny data: the run is all header work.
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    digests = {p.name: data_digest(p) for p in shards(checkpoint)}
    legacy = {p.name: shapes_by_safetensors(p) for p in shards(checkpoint)}
    scalar = {name: {t: () if is_global_scale(t) else s for t, s in found.items()} for name, found in legacy.items()}
    everything = sum(map(is_global_scale, (t for shapes in legacy.values() for t in shapes)))

    assert migrate_process(checkpoint, env).wait() == 0
    assert run_cli_in_process("migrate", checkpoint, "--to", "legacy", env=env).returncode == 0

    moments = kill_moments(KILLS[path], len(shards(checkpoint))) + [("shards edited", 1)] * AT_FIRST_EDIT
    mid_migration = 0
    for moment, which in moments:
        process = kill_at(checkpoint, env, moment, which)
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
        if declared_version(checkpoint) == 2:
            assert len(migrated) == everything, "config.json declared format_version 2 before every shard had it"
        landed = 0 < len(migrated) < everything or (len(migrated) == everything and declared_version(checkpoint) != 2)
        mid_migration += landed
        if moment in WRITING:
            assert landed, f"a kill at {moment} ({which}) did not land while shards were being edited"
        else:
            assert moment in BEFORE_WRITING and not migrated and declared_version(checkpoint) is None, moment

        assert run_cli_in_process("migrate", checkpoint, env=env).returncode == 0
        assert run_cli_in_process("check", checkpoint, "--silent").returncode == 0
        assert run_cli_in_process("migrate", checkpoint, "--to", "legacy", env=env).returncode == 0

    assert mid_migration >= AT_FIRST_EDIT, "a kill at the first edit did not land while shards were being edited"
    assert mid_migration == sum(moment in WRITING for moment, _ in moments)
