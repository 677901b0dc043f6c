"""Decide, then write: every resource and permission a write needs is tried before the first byte is written, and
every failure after that point says what is on disk.

Each case is reproduced as it was found: a real tmpfs out of inodes or of room, a real ``chattr +a`` folder, blobs
on a second file system, stdout on ``/dev/full``, stderr on a terminal that hung up. A reproduction that needs root
(a mount, ``chattr``) or a device this machine lacks skips, saying so."""

from __future__ import annotations

import errno
import json
import os
import pty
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scalar_scales.errors import StoppedAfterWriting
from scalar_scales.files import TEMPORARY_NAME
from scalar_scales.migration import migrate_checkpoint
from scalar_scales.system.lock import LOCK_FILE_NAME
from scalar_scales_testkit.cli import (
    Lease,
    make_checkpoint,
    run_cli_in_process,
    shard_writes_held,
    shards,
    snapshot,
    until,
)
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

PORTABLE = {"SCALAR_SCALES_PORTABLE": "1"}


def root_or_skip(what: str) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip(f"{what} needs root, and this test runs as another user")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount a tmpfs with the given options (``size``, ``nr_inodes``) under ``tmp_path``; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(**options: str | int) -> Path:
        root_or_skip("mounting a tmpfs")
        point = tmp_path / f"tmpfs-{len(mounted)}"
        point.mkdir()
        spec = ",".join(f"{key}={value}" for key, value in options.items())
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", spec, "tmpfs", str(point)], capture_output=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")
        mounted.append(point)
        return point

    try:
        yield mount
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", str(point)], check=True)


@contextmanager
def append_only(folder: Path) -> Iterator[None]:
    """``chattr +a folder`` for the block: files can be created in it, not renamed over or removed."""
    root_or_skip("chattr +a (CAP_LINUX_IMMUTABLE)")
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    result = subprocess.run(["chattr", "+a", str(folder)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"this file system takes no chattr +a: {result.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-a", str(folder)], check=True)


def chattr(flag: str, folder: Path) -> None:
    subprocess.run(["chattr", flag, str(folder)], check=True)


def refusal(checkpoint: Path, *args: str, env: dict[str, str | None] | None = None) -> str:
    """The one line of a refused ``migrate``."""
    result = run_cli_in_process("migrate", checkpoint, *args, env=env)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


def use_every_inode(root: Path) -> None:
    for number in range(1_000_000):
        try:
            (root / f"filler-{number}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if TEMPORARY_NAME.fullmatch(p.name) or p.name == LOCK_FILE_NAME)


def linked_snapshot(blobs: Path, snapshot_dir: Path, source: Path) -> None:
    """A Hugging Face cache snapshot: every file of ``source`` a link (absolute) to a blob in ``blobs``."""
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot_dir.mkdir(parents=True)
    for number, file in enumerate(sorted(source.iterdir())):
        blob = blobs / f"{number:040x}"
        shutil.copyfile(file, blob)
        (snapshot_dir / file.name).symlink_to(blob)
    shutil.rmtree(source)


# Room and inodes.


@pytest.mark.parametrize("env", [{}, PORTABLE], ids=["linux", "portable"])
def test_a_file_system_with_bytes_but_no_inode_free_is_refused_before_any_shard_changes(tmpfs, env):
    """It used to edit both shards in place, then fail to create config.json's temporary file (exit 3). A dry run
    says the same; the portable lock file, which needs an inode too, is refused by name."""
    root = tmpfs(size="64m", nr_inodes=16)
    checkpoint = make_checkpoint(root / "ckpt", shards=2)
    use_every_inode(root)
    before = snapshot(checkpoint)
    lines = {refusal(checkpoint, *args, env=env) for args in ((), ("--dry-run",))}
    if env:
        assert lines == {f"scalar-scales: error: {checkpoint}: cannot lock: No space left on device"}
    else:
        assert lines == {
            f"scalar-scales: error: {checkpoint / 'config.json'}: cannot be written anew: the file system has 0 "
            "inodes free, and the new files this migration writes need 1"
        }
    assert snapshot(checkpoint) == before


def test_materialized_links_count_in_full_against_the_room_left(tmpfs):
    """A rewritten shard frees its old copy; a materialized link frees nothing (its blob stays). With room for 10
    copies of 16 linked shards, it used to materialize 9 and stop at ENOSPC (exit 3)."""
    root = tmpfs(size="16m")
    snapshot_dir = root / "snapshots" / ("ab" * 20)
    source = write_synthetic_checkpoint(root / "source", data_bytes=16 * 128 * 1024, experts=8, shards=16)
    linked_snapshot(root / "blobs", snapshot_dir, source)
    largest = max(p.stat().st_size for p in shards(snapshot_dir))
    with open(root / "filler", "wb") as filler:
        filler.write(bytes(shutil.disk_usage(root).free - 10 * largest - largest // 2))
    before = snapshot(root)
    for args in ((), ("--dry-run",)):
        line = refusal(snapshot_dir, "--materialize", *args)
        assert line.startswith(f"scalar-scales: error: {snapshot_dir}/model-000")
        assert ": cannot be written anew: the file system has " in line
    assert snapshot(root) == before
    assert all(p.is_symlink() for p in snapshot_dir.iterdir())


# The folder: create, rename, remove.


@pytest.mark.parametrize("env", [{}, PORTABLE], ids=["linux", "portable"])
def test_an_append_only_folder_is_refused_before_any_shard_changes(checkpoint, env):
    """Files can be created in it, not renamed over or removed: it used to edit every shard, fail to rename
    config.json's new file into place (exit 3), and leave the temporary file (and the portable lock file)."""
    before = snapshot(checkpoint)
    with append_only(checkpoint):
        lines = {refusal(checkpoint, *args, env=env) for args in ((), ("--dry-run",))}
        left = temporaries(checkpoint)
    (line,) = lines
    assert line.startswith(f"scalar-scales: error: {checkpoint}: ")
    assert "folder is append-only (chattr +a)" in line
    assert left == []
    assert snapshot(checkpoint) == before


def test_a_stale_temporary_file_an_append_only_folder_keeps_is_refused_by_a_dry_run_too(tmp_path):
    """An in-place edit needs nothing of the folder, but the run first removes what a killed run left: the real
    run refused that, and a dry run said the migration would go ahead."""
    source = make_checkpoint(tmp_path / "source", shards=1)
    folder = tmp_path / "single"
    folder.mkdir()
    shard = folder / "model.safetensors"
    shutil.copyfile(shards(source)[0], shard)
    (folder / ".scalar-scales-0123456789abcdef.tmp").write_bytes(b"left by a killed run")
    before = snapshot(folder)
    with append_only(folder):
        lines = {refusal(shard, *args) for args in ((), ("--dry-run",))}
    (line,) = lines
    assert line.startswith(f"scalar-scales: error: {folder}: folder is append-only (chattr +a)")
    assert snapshot(folder) == before


def test_a_marker_that_cannot_be_renamed_into_place_says_its_temporary_file_was_left(checkpoint):
    """The folder turns append-only once every shard is edited (after every check): the run stops (exit 3), and
    the line says what is on disk, the temporary file included, which the next run removes."""
    with append_only(checkpoint):  # skips where it cannot be set
        pass
    try:
        with pytest.raises(StoppedAfterWriting) as stopped:
            migrate_checkpoint(checkpoint, finishing=lambda: chattr("+a", checkpoint))
        (left,) = temporaries(checkpoint)
    finally:
        chattr("-a", checkpoint)
    message = str(stopped.value)
    assert "stopped after changing 3 of 3 shards (config.json not changed)" in message
    assert f"its temporary file {checkpoint / left} was left" in message
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert temporaries(checkpoint) == []


def test_an_error_line_that_cannot_be_written_does_not_change_the_exit_code(checkpoint):
    """The folder turns append-only while the run waits at its first write, so it stops after writing (exit 3);
    with stderr on /dev/full, the line's ENOSPC used to escape the command, which exited 1."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with append_only(checkpoint):  # skips where it cannot be set
        pass
    command = [sys.executable, "-m", "scalar_scales", "migrate", "--json", str(checkpoint)]
    try:
        with open("/dev/full", "w") as full:
            start = lambda: subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=full)  # noqa: E731
            with shard_writes_held(checkpoint, start) as (process, _):
                chattr("+a", checkpoint)
            assert process.wait(timeout=300) == 3
    finally:
        chattr("-a", checkpoint)


# Copies across file systems.


def test_materialize_copies_links_to_blobs_on_another_file_system(tmp_path):
    """copy_file_range refuses to copy across file systems (EXDEV): the shard used to be refused, "cannot rewrite:
    Invalid cross-device link"; the copy now falls back to reads and writes, as shutil's does."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here, the second file system this test puts the blobs on")
    blobs = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="scalar-scales-blobs-"))
    try:
        if os.stat(blobs).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system as the test's folder")
        snapshot_dir = tmp_path / "snapshot"
        linked_snapshot(blobs, snapshot_dir, make_checkpoint(tmp_path / "source"))
        before = snapshot(blobs)
        result = run_cli_in_process("migrate", snapshot_dir, "--materialize")
        assert result.returncode == 0, result.stderr
        assert not any(p.is_symlink() for p in [*shards(snapshot_dir), snapshot_dir / "config.json"])
        assert snapshot(blobs) == before
        assert run_cli_in_process("check", snapshot_dir, "--silent").returncode == 0
    finally:
        shutil.rmtree(blobs)


# Output that fails once the migration is done, or while it writes.


def migrate_with_stdout_on_dev_full(checkpoint: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint), *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )


def test_a_report_that_cannot_be_written_does_not_change_a_finished_migration_s_exit_code(checkpoint):
    """``migrate --json DIR > /dev/full`` writes every shard and the marker; it used to exit 2, "No space left on
    device", which means refused and nothing changed."""
    result = migrate_with_stdout_on_dev_full(checkpoint, "--json")
    assert result.returncode == 0
    (line,) = result.stderr.splitlines()
    assert line == (
        f"scalar-scales: {checkpoint}: changed 48 of 48 scales to 0-D in 3 of 3 shards in place (header only); "
        "config.json format_version absent -> 2; the report could not be written to standard output: No space left on "
        "device"
    )
    assert run_cli_in_process("check", checkpoint, "--silent").returncode == 0


def test_output_that_fails_before_the_first_write_is_a_refusal_naming_standard_output(checkpoint):
    """Without --json, what the change does for each consumer is said before anything is written: a stdout that
    takes nothing refuses the run, and the line names it."""
    before = snapshot(checkpoint)
    result = migrate_with_stdout_on_dev_full(checkpoint)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "scalar-scales: error: standard output: cannot write: No space left on device; nothing was changed"
    ]
    assert snapshot(checkpoint) == before


def test_a_progress_bar_on_a_terminal_that_hangs_up_does_not_stop_the_migration(tmp_path):
    """The terminal (``nohup``'s, say) goes away while the shards are read: the progress bar's writes then fail
    (EIO). The run used to stop after its first edit and exit 1; it finishes, exit 0."""
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=4)
    terminal, command_side = pty.openpty()
    try:
        with Lease(shards(checkpoint)[2], "write") as reading:
            process = subprocess.Popen(
                [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint)],
                stdout=subprocess.PIPE,
                stderr=command_side,
                text=True,
            )
            assert until(reading.waited_on, process), "the migration ended before it read the shards"
            os.close(terminal)
            terminal = -1
        stdout, _ = process.communicate(timeout=300)
    finally:
        os.close(command_side)
        if terminal >= 0:
            os.close(terminal)
    assert process.returncode == 0
    assert "changed 48 of 48 scales to 0-D in 4 of 4 shards" in stdout
    assert json.loads((checkpoint / "config.json").read_text())["quantization_config"]["format_version"] == 2
