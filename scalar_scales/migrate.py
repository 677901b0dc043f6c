"""Migrate a checkpoint's per-tensor scales between (1,) and 0-D by editing shard headers.

The order of work is what makes it safe:

1. Take the checkpoint's lock (:mod:`scalar_scales.system.lock`), on the
   real folder that holds its shards, so two runs meet however the
   checkpoint is spelled (the folder, a file in it, a link). Remove
   temporary files a killed run left.
2. Read and validate every shard and plan every header edit in memory;
   check each planned header; check every file can be written. Any problem
   raises :class:`CheckpointError` here, before a byte is written.
3. Edit the shards (in parallel): an in-place edit writes only the changed
   header bytes and fsyncs. Each edit is one byte between two valid headers,
   so a shard killed mid-write still parses, and its data is never touched.
   A header that must grow, or a shard that is a link into a shared blob
   store with ``materialize``, is written to a new file next to it, fsynced,
   and renamed over the old name.
4. Read every changed header back and compare it with the plan.
5. Only then write ``config.json``'s ``format_version``, atomically and
   durably, editing only the marker's text (``config_marker``). An
   interrupted run leaves the old marker, and a rerun finishes.

Every OS error becomes a :class:`CheckpointError` naming the file it
happened to; a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalar_scales.errors import CheckpointError
from scalar_scales.files.config_marker import set_format_version
from scalar_scales.files.durable import os_errors_named, remove_stale, replaced
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.files.header_edit import HeaderEdit, Layout, plan_header_edit
from scalar_scales.nvfp4 import LEGACY_FORMAT_VERSION, NVFP4_FORMAT, SCALAR_FORMAT_VERSION
from scalar_scales.scan import CheckpointScan, ShardScales, scan_shards
from scalar_scales.sources.local import Checkpoint, open_local, resolve_checkpoint
from scalar_scales.system.fileops import copy_range, write_at
from scalar_scales.system.lock import FolderLocked, folder_lock

__all__ = ["EditPlanner", "MigrationReport", "checkpoint_lock", "migrate_checkpoint"]

Progress = Callable[[int, int], None]


@dataclass
class MigrationReport:
    """What a migration changed, or would change with ``dry_run``."""

    checkpoint: Checkpoint
    to: Layout
    dry_run: bool
    scales_total: int
    edits: list[HeaderEdit] = field(default_factory=list)
    rewritten: list[Path] = field(default_factory=list)
    format_version_before: int | None = None
    format_version_after: int | None = None

    @property
    def scales_changed(self) -> int:
        return sum(len(edit.changed) for edit in self.edits)

    @property
    def config_changed(self) -> bool:
        return self.format_version_before != self.format_version_after

    @property
    def changed(self) -> bool:
        return bool(self.edits) or self.config_changed

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": str(self.checkpoint.root),
            "to": self.to,
            "dry_run": self.dry_run,
            "shards": len(self.checkpoint.files),
            "shards_changed": len(self.edits),
            "scales_total": self.scales_total,
            "scales_changed": self.scales_changed,
            "rewritten": [str(p) for p in self.rewritten],
            "format_version_before": self.format_version_before,
            "format_version_after": self.format_version_after,
            "changed": self.changed,
        }


@contextmanager
def checkpoint_lock(checkpoint: Checkpoint) -> Iterator[None]:
    """Hold the lock of the checkpoint's real folder, or refuse: another migrate is running on it. An OS error
    while taking the lock names the folder; one in the block is the block's own."""
    with ExitStack() as held:
        try:
            with os_errors_named(checkpoint.folder, "lock"):
                held.enter_context(folder_lock(checkpoint.folder))
        except FolderLocked:
            raise CheckpointError(checkpoint.root, "another migrate is running on this checkpoint") from None
        yield


@dataclass(frozen=True)
class EditPlanner:
    """The work a migration gives each shard's job (:class:`scalar_scales.scan.ShardWork`): the header edit
    that puts its scales into layout ``to``, or None where none is needed."""

    to: Layout

    def __call__(self, header: SafetensorsHeader, scales: ShardScales) -> HeaderEdit | None:
        return plan_header_edit(header, scales.indices, self.to)


def migrate_checkpoint(
    path: str | os.PathLike[str],
    *,
    to: Layout = "scalar",
    dry_run: bool = False,
    include: Sequence[str] = (),
    materialize: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Put every per-tensor scale in scope into layout ``to`` and declare it in ``config.json``."""
    checkpoint = resolve_checkpoint(path)
    with checkpoint_lock(checkpoint):
        if not dry_run:
            _remove_stale_temporary_files(checkpoint)
        scan = scan_shards(open_local(checkpoint), include=include, read_values=False, work=EditPlanner(to))
        report = _plan(scan, to, include, dry_run)
        if dry_run:
            return report
        _check_writable(report, materialize)
        _apply_edits(report, materialize, progress)
        _verify(report)
        if report.config_changed:
            assert report.checkpoint.config is not None
            set_format_version(report.checkpoint.config, SCALAR_FORMAT_VERSION if to == "scalar" else None)
        return report


def _remove_stale_temporary_files(checkpoint: Checkpoint) -> None:
    """A run killed while writing leaves ``.<name>.scalar-scales.tmp`` beside a file; we hold the lock now."""
    for path in (*checkpoint.files, *([checkpoint.config] if checkpoint.config else [])):
        with os_errors_named(path.parent, "remove a stale temporary file"):
            remove_stale(path)


def _plan(scan: CheckpointScan, to: Layout, include: Sequence[str], dry_run: bool) -> MigrationReport:
    if scan.index_errors:
        raise scan.index_errors[0]
    if scan.config is not None and not scan.is_nvfp4 and not include:
        raise CheckpointError(
            scan.checkpoint.config or scan.checkpoint.root,
            f"quantization format is {scan.quantization_format!r}, not {NVFP4_FORMAT}; migrate changes NVFP4 "
            "global scales only, unless --include GLOB names other per-tensor scales",
        )
    edits = [shard.work for shard in scan.shards if shard.work is not None]
    report = MigrationReport(scan.checkpoint, to, dry_run, scales_total=scan.scale_count, edits=edits)
    if scan.config is not None and scan.is_nvfp4:
        report.format_version_before = scan.declared_format_version
        report.format_version_after = SCALAR_FORMAT_VERSION if to == "scalar" else LEGACY_FORMAT_VERSION
    return report


def _is_shared(path: Path) -> bool:
    """A symlink (Hugging Face cache snapshots link shards to blobs) or a file with other hard links."""
    return path.is_symlink() or path.stat().st_nlink > 1


def _check_writable(report: MigrationReport, materialize: bool) -> None:
    for edit in report.edits:
        shard = edit.path
        if _is_shared(shard):
            if not materialize:
                raise CheckpointError(
                    shard,
                    "is a link into shared storage (e.g. a Hugging Face cache blob); editing it in place would "
                    "change every copy. Pass --materialize to replace the link with an edited copy",
                )
            _require_writable_folder(shard.parent)
        elif not edit.in_place:
            _require_writable_folder(shard.parent)
        else:
            _require_writable_file(shard)
    if report.config_changed and report.checkpoint.config is not None:
        _require_writable_file(report.checkpoint.config)
        _require_writable_folder(report.checkpoint.config.parent)


def _require_writable_file(path: Path) -> None:
    if not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise CheckpointError(path, "is read-only")
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as exc:
        raise CheckpointError(path, f"cannot be opened for writing: {exc.strerror}") from None


def _require_writable_folder(path: Path) -> None:
    if not os.access(path, os.W_OK):
        raise CheckpointError(path, "folder is not writable")


def _apply_edits(report: MigrationReport, materialize: bool, progress: Progress | None) -> None:
    total = len(report.edits)

    def apply(edit: HeaderEdit) -> Path | None:
        shard = edit.path
        if not edit.in_place or (materialize and _is_shared(shard)):
            _rewrite(edit)
            return shard
        _edit_in_place(edit)
        return None

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, max(total, 1))) as pool:
        for done, rewritten in enumerate(pool.map(apply, report.edits), start=1):
            if rewritten is not None:
                report.rewritten.append(rewritten)
            if progress is not None:
                progress(done, total)


def _edit_in_place(edit: HeaderEdit) -> None:
    begin, end = edit.span
    with os_errors_named(edit.path, "write"):
        fd = os.open(edit.path, os.O_RDWR)
        try:
            write_at(fd, edit.new_raw[begin:end], 8 + begin)
            os.fsync(fd)
        finally:
            os.close(fd)


def _rewrite(edit: HeaderEdit) -> None:
    """Write the new header and the unchanged data to a new file, then rename it over the shard."""
    shard = edit.path
    data_start = edit.old_data_start
    with os_errors_named(shard, "rewrite"), open(shard, "rb") as source, replaced(shard) as target:
        target.write(struct.pack("<Q", len(edit.new_raw)) + edit.new_raw)
        target.flush()
        size = os.fstat(source.fileno()).st_size - data_start
        if copy_range(source.fileno(), target.fileno(), data_start, size) != size:
            raise CheckpointError(shard, "ended while being copied")


def _verify(report: MigrationReport) -> None:
    """Read every changed header back; it must be byte for byte the planned one, which was validated."""
    for edit in report.edits:
        with os_errors_named(edit.path, "read back"), open(edit.path, "rb") as f:
            written = f.read(8 + len(edit.new_raw))
        if written != struct.pack("<Q", len(edit.new_raw)) + edit.new_raw:
            raise CheckpointError(edit.path, "header read back differs from what was written")
