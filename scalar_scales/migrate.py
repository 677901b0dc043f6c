"""Migrate a checkpoint's per-tensor scales between (1,) and 0-D by editing shard headers.

Everything is decided before anything is written, and the order of work is
what makes the rest safe:

1. Take the checkpoint's lock (:mod:`scalar_scales.system.lock`), on the
   real folder that holds its shards, so two runs meet however the
   checkpoint is spelled (the folder, a file in it, a link). A file that is
   a shard of the checkpoint in its folder is refused: config.json's marker
   speaks for every shard, so shards are migrated together.
2. Read and validate every shard and plan every header edit in memory, and
   config.json's marker edit (``config_marker``); check each planned
   header; check every file can be written and the file system has room for
   every file that is written anew. Any problem raises
   :class:`CheckpointError` here, and nothing has changed (exit 2).
3. Remove the temporary files a killed run left.
4. Edit the shards (in parallel): an in-place edit writes only the changed
   header bytes and fsyncs, after checking that the shard still holds the
   header it was planned from. Each edit is one byte between two valid
   headers, so a shard killed mid-write still parses, and its data is never
   touched. A header that must grow, or a shard that is a link into a shared
   blob store with ``materialize``, is written to a new file next to it
   (created exclusively, never through a link), fsynced, and renamed over
   the old name.
5. Read every changed header back and compare it with the plan.
6. Only then write ``config.json``'s ``format_version``, atomically and
   durably, if the file still holds the text the edit was planned from. An
   interrupted run leaves the old marker, and a rerun finishes.

From step 3 on, an error or an interrupt (SIGINT, SIGTERM) is a
:class:`StoppedAfterWriting` that says how many shards changed (exit 3); the
shards being edited when it came are finished first, and nothing more is
started. Every OS error names the file it happened to; a failed write leaves
no temporary file behind.
"""

from __future__ import annotations

import os
import queue
import shutil
import stat
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalar_scales.consumers import Change, Observation, announcement, changes, unchanged
from scalar_scales.errors import CheckpointError, Interrupted, StoppedAfterWriting
from scalar_scales.files.config_marker import MarkerEdit, plan_format_version, write_planned
from scalar_scales.files.durable import os_errors_named, remove_stale, replaced, stale_temporaries, try_replacing_in
from scalar_scales.files.header import file_identity
from scalar_scales.files.header_edit import HeaderEdit, Layout, plan_header_edit
from scalar_scales.nvfp4 import LEGACY_FORMAT_VERSION, MODELOPT, NVFP4_FORMAT, SCALAR_FORMAT_VERSION, Producer
from scalar_scales.scan import CheckpointScan, scan_shards
from scalar_scales.sources.local import Checkpoint, open_local, refuse_a_shard, resolve_checkpoint
from scalar_scales.system.fileops import copy_range, no_follow, removal_forbidden, unkeepable, write_at
from scalar_scales.system.lock import FolderLocked, folder_lock

__all__ = ["MigrationReport", "checkpoint_lock", "migrate_checkpoint"]

Progress = Callable[[int, int], None]
WRITERS = 8
"""Shards written at once, at most."""
MARKER_SPEAKS_FOR_EVERY_SHARD = (
    "changes a checkpoint's shards together, so that config.json's format_version stays true of every one"
)
"""Why a shard is not migrated alone (:func:`~scalar_scales.sources.local.refuse_a_shard`)."""


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
    """The marker as config.json states it before: None where it has no ``format_version`` (legacy, which
    compressed-tensors reads as 1) or no NVFP4 config; ``check --json`` says the same."""
    format_version_after: int | None = None
    """The marker as config.json states it after: ``--to legacy`` removes a 2."""
    marker: MarkerEdit | None = None
    """config.json's planned marker edit; None where the marker stays as it is (or there is no config)."""
    producer: Producer | None = None
    """Who wrote the checkpoint, as its config declares; None without one."""
    consumers: list[Change] = field(default_factory=list)
    """What the change does for each consumer the round trip observed (docs/compatibility.md) where it does
    something: what the consumer did with checkpoints of the old shape, and with the new."""
    consumers_unchanged: list[Observation] = field(default_factory=list)
    """The consumers, as released, the round trip observed that the change does nothing to, where it does
    something to another."""

    @property
    def scales_changed(self) -> int:
        return sum(len(edit.changed) for edit in self.edits)

    @property
    def config_changed(self) -> bool:
        return self.format_version_before != self.format_version_after

    @property
    def changed(self) -> bool:
        return bool(self.edits) or self.config_changed

    def announcement(self) -> list[str]:
        """The lines that say, before anything is written, what the change does to each consumer
        (:func:`~scalar_scales.consumers.announcement`); none where it does nothing to any."""
        return announcement(self.consumers, self.consumers_unchanged, dry_run=self.dry_run)

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
            "producer": self.producer,
            "consumers_changed": [
                {
                    "consumer": change.observation.consumer,
                    "fix": change.observation.fix,
                    "before": str(change.before),
                    "after": str(change.after),
                }
                for change in self.consumers
            ],
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


def migrate_checkpoint(
    path: str | os.PathLike[str],
    *,
    to: Layout = "scalar",
    dry_run: bool = False,
    include: Sequence[str] = (),
    materialize: bool = False,
    progress: Progress | None = None,
    announce: Callable[[MigrationReport], None] | None = None,
    finishing: Callable[[], None] | None = None,
) -> MigrationReport:
    """Put every per-tensor scale in scope into layout ``to`` and declare it in ``config.json``. ``announce`` is
    given the plan once it is decided and checked, before anything is written (with ``dry_run``, instead);
    ``finishing`` is called once every shard is edited and read back, just before config.json's marker, the last
    write, which takes an instant: a caller that stops taking interrupts there always finishes, so an
    interrupt never lands between the marker's write and the report of it."""
    checkpoint = resolve_checkpoint(path)
    with checkpoint_lock(checkpoint):
        refuse_a_shard(checkpoint, "migrate", MARKER_SPEAKS_FOR_EVERY_SHARD)
        scan = scan_shards(open_local(checkpoint), include=include, read_values=False)
        report = _plan(checkpoint, scan, to, include, dry_run)
        if not report.changed:
            return report
        _check_writable(report, materialize, probe=not dry_run)
        if announce is not None:
            announce(report)
        if not dry_run:
            _write(report, materialize, progress, finishing)
        return report


def _plan(
    checkpoint: Checkpoint, scan: CheckpointScan, to: Layout, include: Sequence[str], dry_run: bool
) -> MigrationReport:
    if scan.index_disagreements:
        raise scan.index_disagreements[0].error()
    declared = scan.declared
    if declared is not None and declared.producer == MODELOPT:
        return _modelopt_plan(checkpoint, scan, to, include, dry_run)
    only = "migrate changes NVFP4 global scales only, unless --include GLOB names other per-tensor scales"
    if declared is not None and not declared.is_nvfp4 and not include:
        found = scan.quantization_format
        stated = f"quantization format is {found!r}" if found is not None else "declares no quantization format"
        raise CheckpointError(checkpoint.config or checkpoint.root, f"{stated}, not {NVFP4_FORMAT}; {only}")
    if declared is None and not scan.scale_count and not include:
        raise CheckpointError(
            checkpoint.root, f"holds no NVFP4 global scale (*_global_scale) and no config declares a format; {only}"
        )
    producer = None if declared is None else declared.producer
    report = MigrationReport(checkpoint, to, dry_run, scan.scale_count, _header_edits(scan, to), producer=producer)
    report.consumers = changes(scan, to)
    report.consumers_unchanged = unchanged(scan, to) if report.consumers else []
    if scan.config is not None and declared is not None and declared.is_nvfp4:
        report.format_version_before = marker_now = declared.stated_format_version
        legacy = declared.format_version == LEGACY_FORMAT_VERSION  # the key absent, or 1
        report.format_version_after = SCALAR_FORMAT_VERSION if to == "scalar" else marker_now if legacy else None
        if report.config_changed:
            assert checkpoint.config is not None
            version = SCALAR_FORMAT_VERSION if to == "scalar" else None
            report.marker = plan_format_version(checkpoint.config, version)
    return report


def _modelopt_plan(
    checkpoint: Checkpoint, scan: CheckpointScan, to: Layout, include: Sequence[str], dry_run: bool
) -> MigrationReport:
    """A ModelOpt checkpoint's scales go to 0-D, as ModelOpt writes them and every vLLM loads them; its configs
    have no marker, so only headers change. Anything else asked of one is refused: the other layouts migrate
    writes are compressed-tensors'."""
    where = scan.declared.source if scan.declared is not None and scan.declared.source else checkpoint.root
    if to != "scalar" or include:
        raise CheckpointError(
            where, "is a ModelOpt checkpoint; migrate writes compressed-tensors' layouts (--to, --include) only"
        )
    edits = _header_edits(scan, to)
    return MigrationReport(checkpoint, to, dry_run, scan.scale_count, edits, producer=MODELOPT)


def _header_edits(scan: CheckpointScan, to: Layout) -> list[HeaderEdit]:
    planned = (plan_header_edit(shard.header, shard.indices, to) for shard in scan.shards)
    return [edit for edit in planned if edit is not None]


def _is_shared(path: Path) -> bool:
    """A symlink (Hugging Face cache snapshots link shards to blobs) or a file with other hard links."""
    return path.is_symlink() or path.stat().st_nlink > 1


def _rewritten_anew(edit: HeaderEdit, materialize: bool) -> bool:
    return not edit.in_place or (materialize and _is_shared(edit.path))


@dataclass(frozen=True)
class _NewFile:
    """A file the migration writes anew, to a temporary file beside it renamed over it."""

    path: Path
    size: int
    frees_old: bool
    """The rename frees the old file: a regular file with no other link. A link's target (a cache blob) and a
    file with other hard links stay, so the new file takes its room and its inode for good."""


def _check_writable(report: MigrationReport, materialize: bool, *, probe: bool) -> None:
    """Everything the writes need, tried before the first (step 2 of the module's docstring); with ``probe``, a
    file is also created, renamed and removed in each folder a file is written anew in (a dry run does not)."""
    anew: list[_NewFile] = []
    for edit in report.edits:
        shard = edit.path
        shared = _is_shared(shard)
        if shared and not materialize:
            raise _shared_refused(shard, "editing it in place would change every copy")
        if not shard.is_symlink():
            _require_writable_file(shard)
        if _rewritten_anew(edit, materialize):
            _require_writable_folder(shard.parent)
            data = shard.stat().st_size - edit.old_data_start
            anew.append(_NewFile(shard, 8 + len(edit.new_raw) + data, not shared))
    if report.marker is not None:
        config = report.marker.path
        shared = _is_shared(config)
        if shared and not materialize:
            raise _shared_refused(config, "writing it anew would leave a file of its own where the link was")
        _require_writable_file(config)
        _require_writable_folder(config.parent)
        anew.append(_NewFile(config, len(report.marker.new), not shared))
    for new in anew:
        with os_errors_named(new.path, "read the owner and attributes of"):
            why = unkeepable(new.path)
        if why is not None:
            raise CheckpointError(
                new.path,
                f"migrate replaces it with a new file, which could not keep {why}: run migrate as its owner or as root",
            )
    folders = _folders_replaced_in(report.checkpoint.folder, anew)
    _require_room(anew)
    if probe:
        for folder in folders:
            try_replacing_in(folder)


def _shared_refused(path: Path, because: str) -> CheckpointError:
    """A link into shared storage (a shard, or config.json) that only ``--materialize`` may replace."""
    return CheckpointError(
        path,
        f"is a link into shared storage (e.g. a Hugging Face cache blob); {because}. Pass --materialize to replace "
        "the link with an edited copy",
    )


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


def _folders_replaced_in(checkpoint_folder: Path, anew: list[_NewFile]) -> list[Path]:
    """The folders where a file is renamed over another and a temporary file removed: each one a file is written
    anew in, and the checkpoint's own where a killed run left temporary files (the run removes them first). Each
    must allow that: an append-only folder takes new files but lets none be renamed over or removed."""
    needs: dict[str, tuple[Path, str]] = {}
    for new in anew:
        reason = f"migrate writes {new.path.name} anew, to a new file renamed over it, which this folder forbids"
        needs.setdefault(os.path.realpath(new.path.parent), (new.path.parent, reason))
    if stale := stale_temporaries(checkpoint_folder):
        reason = f"the temporary file {stale[0].name} a killed run left in it cannot be removed"
        needs.setdefault(os.path.realpath(checkpoint_folder), (checkpoint_folder, reason))
    for folder, reason in needs.values():
        with os_errors_named(folder, "read the attributes of"):
            attribute = removal_forbidden(folder)
        if attribute is not None:
            raise CheckpointError(folder, f"folder is {attribute}: {reason}")
    return [folder for folder, _ in needs.values()]


def _require_room(anew: list[_NewFile]) -> None:
    """Each file system that a file is written anew on must hold, while the old files still exist, the new
    copies of the files it writes at once (:data:`WRITERS` at most, the largest counted), and for good those whose
    old file stays (:attr:`_NewFile.frees_old`); in bytes, rounded up to its blocks, and in inodes."""
    by_device: dict[int, list[_NewFile]] = {}
    for new in anew:
        with os_errors_named(new.path.parent, "measure the free space of"):
            by_device.setdefault(os.stat(new.path.parent).st_dev, []).append(new)
    for files in by_device.values():
        _require_room_on(files[0].path.parent, files)


def _require_room_on(folder: Path, files: list[_NewFile]) -> None:
    with os_errors_named(folder, "measure the free space of"):
        free, inodes, block = _free(folder)
    kept = [new for new in files if not new.frees_old]
    freed = sorted((new for new in files if new.frees_old), key=lambda new: new.size, reverse=True)
    at_once = kept + freed[:WRITERS]
    needed = sum(-(-new.size // block) * block for new in at_once)
    if free < needed:
        largest = max(files, key=lambda new: new.size)
        links = f" ({len(kept)} of them replace a link or a file with other links, which frees nothing)" if kept else ""
        raise CheckpointError(
            largest.path,
            f"cannot be written anew: the file system has {free} bytes free, and the new copies of the files this "
            f"migration writes anew need {needed}{links}",
        )
    if inodes is not None and inodes < len(at_once):
        raise CheckpointError(
            files[0].path,
            f"cannot be written anew: the file system has {inodes} inodes free, and the new files this migration "
            f"writes need {len(at_once)}",
        )


def _free(folder: Path) -> tuple[int, int | None, int]:
    """The bytes free to this user on ``folder``'s file system, its free inodes (None where it has no fixed
    number: btrfs, or Windows, which says none), and its block size."""
    if not hasattr(os, "statvfs"):
        return shutil.disk_usage(folder).free, None, 1
    status = os.statvfs(folder)
    return status.f_bavail * status.f_frsize, status.f_favail if status.f_files else None, status.f_frsize or 1


def _write(
    report: MigrationReport, materialize: bool, progress: Progress | None, finishing: Callable[[], None] | None
) -> None:
    """Steps 3 to 6 of the module's docstring; from the first change on, any failure says what changed."""
    changed: list[HeaderEdit] = []
    try:
        with os_errors_named(report.checkpoint.folder, "clear the temporary files of"):
            remove_stale(report.checkpoint.folder)
        _apply_edits(report, materialize, progress, changed)
        _verify(report)
        if finishing is not None:
            finishing()
        if report.marker is not None:
            write_planned(report.marker)
    except BaseException as error:
        if not changed:
            raise
        cause = "interrupted" if isinstance(error, (KeyboardInterrupt, Interrupted)) else _cause(error)
        raise StoppedAfterWriting(report.checkpoint.root, len(changed), len(report.checkpoint.files), cause) from None


def _cause(error: BaseException) -> str:
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    return str(error)


def _apply_edits(
    report: MigrationReport, materialize: bool, progress: Progress | None, changed: list[HeaderEdit]
) -> None:
    """Edit every shard, in threads; ``changed`` collects each one edited. Where one fails, or the run is
    interrupted, no edit is started any more, the ones under way finish, and the failure is raised.

    An interrupt reaches this thread only, and may come anywhere, within starting a thread too. So the
    writers are all started before any may edit, and each edit is recorded by the writer that made it: every
    writer that may have edited is one whose start returned, and is waited for, so no edit goes unrecorded.
    (With a thread pool, an interrupt inside ``submit``, while it starts a thread that already has an edit to
    make, left that thread unwaited for and its edit uncounted.)"""
    total = len(report.edits)
    pending: queue.SimpleQueue[HeaderEdit] = queue.SimpleQueue()
    for edit in report.edits:
        pending.put(edit)
    finished: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
    go, stop = threading.Event(), threading.Event()

    def write() -> None:
        go.wait()
        while not stop.is_set():
            try:
                edit = pending.get_nowait()
            except queue.Empty:
                return
            try:
                if _rewritten_anew(edit, materialize):
                    _rewrite(edit)
                    report.rewritten.append(edit.path)
                else:
                    _edit_in_place(edit)
            except BaseException as error:  # handed to the main thread, which raises it
                finished.put(error)
                return
            changed.append(edit)
            finished.put(None)

    started: list[threading.Thread] = []
    try:
        for number in range(min(WRITERS, os.cpu_count() or 1, max(total, 1))):
            writer = threading.Thread(target=write, name=f"scalar-scales-writer-{number}")
            writer.start()
            started.append(writer)
        go.set()
        for done in range(1, total + 1):
            error = _next(finished)
            if error is not None:
                raise error
            if progress is not None:
                progress(done, total)
    finally:
        stop.set()
        go.set()
        for writer in started:
            writer.join()


def _next(finished: queue.SimpleQueue[BaseException | None]) -> BaseException | None:
    """The next writer's outcome, waited for in short steps: a wait without a timeout cannot be interrupted on
    Windows."""
    while True:
        try:
            return finished.get(timeout=0.2)
        except queue.Empty:
            continue


def _open_as_planned(edit: HeaderEdit, flags: int) -> int:
    """The shard opened (never through a link where the edit is in place), if it is still the file, unchanged,
    whose header the edit was planned from."""
    fd = os.open(edit.path, flags)
    if file_identity(os.fstat(fd)) != edit.identity:
        os.close(fd)
        raise CheckpointError(edit.path, "changed since this run read it; not edited")
    return fd


def _edit_in_place(edit: HeaderEdit) -> None:
    begin, end = edit.span
    with os_errors_named(edit.path, "write"):
        fd = _open_as_planned(edit, os.O_RDWR | no_follow())
        try:
            write_at(fd, edit.new_raw[begin:end], 8 + begin)
            os.fsync(fd)
        finally:
            os.close(fd)


def _rewrite(edit: HeaderEdit) -> None:
    """Write the new header and the unchanged data to a new file, then rename it over the shard."""
    shard = edit.path
    data_start = edit.old_data_start
    with os_errors_named(shard, "rewrite"):
        source = _open_as_planned(edit, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            with replaced(shard) as target:
                target.write(struct.pack("<Q", len(edit.new_raw)) + edit.new_raw)
                target.flush()
                size = os.fstat(source).st_size - data_start
                if copy_range(source, target.fileno(), data_start, size) != size:
                    raise CheckpointError(shard, "ended while being copied")
        finally:
            os.close(source)


def _verify(report: MigrationReport) -> None:
    """Read every changed header back; it must be byte for byte the planned one, which was validated."""
    for edit in report.edits:
        with os_errors_named(edit.path, "read back"), open(edit.path, "rb") as f:
            written = f.read(8 + len(edit.new_raw))
        if written != struct.pack("<Q", len(edit.new_raw)) + edit.new_raw:
            raise CheckpointError(edit.path, "header read back differs from what was written")
