"""The paths macOS and Windows take, run for real on Linux with ``SCALAR_SCALES_PORTABLE=1``: the lock file, and
plain reads and writes where Linux copies in the kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scalar_scales.system.lock import LOCK_FILE_NAME, FolderLocked, folder_lock
from scalar_scales_testkit.cli import data_digest, make_checkpoint, rewrite_header, run_cli_in_process, shards, snapshot

PORTABLE = {"SCALAR_SCALES_PORTABLE": "1"}


@pytest.fixture
def portable(monkeypatch):
    monkeypatch.setenv("SCALAR_SCALES_PORTABLE", "1")


def test_the_portable_path_migrates_and_checks_like_linux(tmp_path):
    linux, portable = (make_checkpoint(tmp_path / name, shards=12, experts=8) for name in ("linux", "portable"))
    assert run_cli_in_process("migrate", linux).returncode == 0
    result = run_cli_in_process("migrate", portable, env=PORTABLE)
    assert result.returncode == 0, result.stderr
    assert snapshot(portable) == snapshot(linux)
    summaries = [
        json.loads(run_cli_in_process("check", path, "--json", env=env).stdout)["summary"] | {"checkpoint": None}
        for path, env in ((portable, PORTABLE), (linux, None))
    ]
    assert summaries[0] == summaries[1] and summaries[0]["scalar"] == 96


def test_the_lock_file_keeps_a_second_holder_out_and_is_gone_afterwards(tmp_path, portable):
    with folder_lock(tmp_path):
        assert (tmp_path / LOCK_FILE_NAME).is_file()
        holder = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from scalar_scales.system.lock import folder_lock\n"
                "with folder_lock(Path(sys.argv[1])): pass\n",
                str(tmp_path),
            ],
            env={**os.environ, **PORTABLE},
            capture_output=True,
            text=True,
        )
        assert "FolderLocked" in holder.stderr
        with pytest.raises(FolderLocked), folder_lock(tmp_path):
            pass
    assert not (tmp_path / LOCK_FILE_NAME).exists()


def test_a_lock_file_a_killed_holder_left_is_taken_and_removed(tmp_path, portable):
    (tmp_path / LOCK_FILE_NAME).write_bytes(b"")
    with folder_lock(tmp_path):
        pass
    assert not (tmp_path / LOCK_FILE_NAME).exists()


def test_a_link_planted_as_the_lock_file_is_not_followed(tmp_path, portable):
    outside = tmp_path / "outside"
    outside.write_text("kept")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / LOCK_FILE_NAME).symlink_to(outside)
    with pytest.raises(OSError), folder_lock(folder):
        pass
    assert outside.read_text() == "kept"


def grown_to_legacy(checkpoint):
    """Every global scale 0-D, so that ``migrate --to legacy`` grows each header and rewrites each shard."""
    for shard in shards(checkpoint):
        rewrite_header(
            shard, lambda h: {n: (s | {"shape": []} if n.endswith("_global_scale") else s) for n, s in h.items()}
        )


@pytest.mark.parametrize("platform", ["linux", "portable"])
def test_a_header_that_grows_is_copied_by_the_kernel_on_linux_and_by_reads_and_writes_on_the_portable_path(
    checkpoint, platform
):
    """Linux copies the data in the kernel (copy_file_range); the portable path never calls it."""
    grown_to_legacy(checkpoint)
    digests = {p.name: data_digest(p) for p in shards(checkpoint)}
    result = run_forbidding(
        "os.copy_file_range", "migrate", checkpoint, "--to", "legacy", portable=platform == "portable"
    )
    if platform == "linux":
        assert result.returncode != 0 and "os.copy_file_range was called" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert {p.name: data_digest(p) for p in shards(checkpoint)} == digests
    assert (
        run_cli_in_process("check", checkpoint, "--select", "NV101", "--statistics")
        .stdout.splitlines()[-1]
        .startswith("Found 48 findings:")
    )


def test_an_in_place_edit_on_the_portable_path_changes_one_byte_per_scale_without_pwrite(checkpoint):
    before = {p.name: p.read_bytes() for p in shards(checkpoint)}
    scales = {p.name: sum(n.endswith("_global_scale") for n in json.loads(header_json(p))) for p in shards(checkpoint)}
    result = run_forbidding("os.pwrite", "migrate", checkpoint, portable=True)
    assert result.returncode == 0, result.stderr
    for shard in shards(checkpoint):
        old, new = before[shard.name], shard.read_bytes()
        assert len(old) == len(new)
        changed = [(old[i], new[i]) for i in range(len(old)) if old[i] != new[i]]
        assert set(changed) == {(ord("1"), ord(" "))}
        assert len(changed) == scales[shard.name] == 16


def header_json(shard) -> bytes:
    data = shard.read_bytes()
    return data[8 : 8 + int.from_bytes(data[:8], "little")]


def run_forbidding(call: str, *args: object, portable: bool) -> subprocess.CompletedProcess[str]:
    """The command in a process where the ``os`` function ``call`` raises, to show which path runs."""
    code = (
        "import os, sys\n"
        f"def forbidden(*args):\n    raise RuntimeError({call + ' was called'!r})\n"
        f"os.{call.removeprefix('os.')} = forbidden\n"
        "from scalar_scales.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, **PORTABLE} if portable else {k: v for k, v in os.environ.items() if k not in PORTABLE}
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def run_without(missing: tuple[str, ...], *args: object) -> subprocess.CompletedProcess[str]:
    """The command in a process that lacks ``missing``: modules (``fcntl``) or ``os`` calls (``os.pwrite``), as
    Windows does."""
    code = (
        "import os, sys\n"
        f"for name in {missing!r}:\n"
        "    if name.startswith('os.'):\n"
        "        delattr(os, name[3:])\n"
        "    else:\n"
        "        sys.modules[name] = None\n"
        "from scalar_scales.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **PORTABLE},
        timeout=300,
    )


def test_check_runs_where_there_is_no_fcntl(checkpoint):
    result = run_without(("fcntl", "os.copy_file_range", "os.pwrite"), "check", checkpoint, "--statistics")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "Found 48 findings: 48 warnings (NV101 48)."


def test_migrate_runs_where_there_is_no_pwrite_nor_copy_file_range(checkpoint):
    grown_to_legacy(checkpoint)
    digests = {p.name: data_digest(p) for p in shards(checkpoint)}
    for to in ("legacy", "scalar"):
        result = run_without(("os.copy_file_range", "os.pwrite"), "migrate", checkpoint, "--to", to)
        assert result.returncode == 0, result.stderr
    assert {p.name: data_digest(p) for p in shards(checkpoint)} == digests
    assert run_cli_in_process("check", checkpoint).returncode == 0
