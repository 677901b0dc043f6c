"""A checkpoint as git's staging area holds it: what the next commit will hold (``check --staged``, the pre-commit
hook), not what the working tree has.

pre-commit gives a hook the files a commit adds or changes, never those it deletes, and a hook that reads the
working tree also reads files that are not staged (an untracked shard the index names) and cannot see a shard
staged for deletion. So the hook reads git instead: the staging area's entries of the checkpoint's folder
(``git ls-files --stage``, or the temporary index ``git commit -a`` and ``git commit PATH`` build, which git
names in ``GIT_INDEX_FILE``), each file's staged blob (``git cat-file blob``, read only as far as the header and
the scales, then stopped), and where that blob is a Git LFS pointer, the object it points to in the clone's LFS
store (``.git/lfs/objects``, or ``lfs.storage``), which is the file the commit publishes. A file the index names
that is not staged is missing from the commit, whatever is on disk. Which shards the checkpoint has is decided as
for any other (:func:`~scalar_scales.sources.checkpoint.shard_names`), from the staged names.

Whether a commit can change the checkpoint at all is decided first (:func:`open_staged`): a commit whose staged
changes touch none of its files (a README) is not checked, and one with no staged change at all (``pre-commit
run`` outside a commit, in CI) checks what is staged, which is then the last commit. Only git's read-only
commands run, with no optional lock: ``git commit`` holds the index's lock while its hook runs.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from scalar_scales.environment import others_setting
from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import LFS_POINTER_START
from scalar_scales.files.json_document import MAX_JSON_BYTES, json_object
from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAMES,
    UNIQUE_KEYS,
    OpenedCheckpoint,
    ScaleSelector,
    ShardRead,
    read_shard_from,
    shard_names,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME

__all__ = ["StagedCheckpoint", "StagedShards", "is_checkpoint_file", "open_staged"]

LFS_POINTER_MAX = 1024
"""Git LFS pointers are smaller than this (its specification); a larger blob is the file itself."""
_LFS_POINTER = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize ([0-9]+)\n")
_SKIP_CHUNK = 1 << 20
"""Bytes of a staged blob read and dropped at a time on the way to a scale further on."""
_FILE_MODES = ("100644", "100755")
_PATHS_FROM_CWD = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")
"""The paths git takes from the environment relative to its current folder, which ``-C`` changes."""
_NOT_STAGED = (
    "not staged: the commit would hold an index naming a shard it lacks (git add the shard, or stage an index "
    "without it)"
)


def is_checkpoint_file(name: str) -> bool:
    """A file of a checkpoint's folder that ``check`` reads, or that decides which shards it has: a change to any
    other file (a README, the tokenizer) cannot change what ``check`` finds."""
    return name.endswith(".safetensors") or name in (*INDEX_NAMES, CONFIG_NAME, MODELOPT_CONFIG_NAME)


class _Entry(NamedTuple):
    """A file's entry in the staging area (or in HEAD's tree): its mode and object, and its merge stage (0 unless
    it is in conflict)."""

    mode: str
    oid: str
    stage: str = "0"


@dataclass(frozen=True)
class StagedCheckpoint:
    """A checkpoint folder as staged: the same fields as a local :class:`~scalar_scales.sources.local.Checkpoint`,
    each file named by its path as the command was given it (``models/moe/config.json``), as a check of the
    working tree names it."""

    root: Path
    files: tuple[Path, ...]
    config: Path | None
    weight_map: dict[str, str] | None
    modelopt_config: Path | None = None


class _Git:
    """git, run in the checkpoint's folder with the caller's environment (``GIT_INDEX_FILE`` and ``GIT_DIR``, which
    git sets for its hooks, included)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        made_absolute = {  # a hook's git may set them relative to the folder it runs the hook in
            name: os.path.abspath(value)
            for name in _PATHS_FROM_CWD
            if (value := others_setting(name)) and not os.path.isabs(value)
        }
        self.environment = {**os.environ, **made_absolute} if made_absolute else None

    def command(self, *args: str) -> list[str]:
        return ["git", "--no-optional-locks", "-C", os.fspath(self.folder), *args]

    def run(self, *args: str, ok: tuple[int, ...] = (0,), given: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """``git ARGS``, ``given`` on its stdin; an exit code not in ``ok`` is refused with git's own line."""
        try:
            result = subprocess.run(self.command(*args), input=given, capture_output=True, env=self.environment)
        except FileNotFoundError:
            raise CheckpointError(self.folder, "--staged reads git's staging area, and git is not on PATH") from None
        if result.returncode not in ok:
            raise CheckpointError(self.folder, f"git {args[0]} failed: {_first_line(result.stderr)}")
        return result

    def output(self, *args: str, given: bytes = b"") -> bytes:
        return self.run(*args, given=given).stdout

    @contextmanager
    def blob(self, oid: str) -> Iterator[IO[bytes]]:
        """The content of object ``oid`` as a stream, read as far as it is needed: the process is stopped then."""
        process = subprocess.Popen(
            self.command("cat-file", "blob", oid),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.environment,
        )
        assert process.stdout is not None
        try:
            yield process.stdout
        finally:
            process.stdout.close()
            process.kill()
            process.wait()


def _first_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "backslashreplace").strip().splitlines()
    return lines[0] if lines else "no message"


def _entries(listing: bytes, fields: Callable[[str], _Entry]) -> dict[str, list[_Entry]]:
    """``MODE ... \\tNAME`` records, NUL-terminated, of the folder's own files (not its subfolders'), by name."""
    found: dict[str, list[_Entry]] = {}
    for record in listing.split(b"\0"):
        if not record:
            continue
        head, _, raw_name = record.partition(b"\t")
        name = os.fsdecode(raw_name)
        if "/" not in name:
            found.setdefault(name, []).append(fields(head.decode("ascii")))
    return found


def _staged(git: _Git) -> dict[str, list[_Entry]]:
    """The staging area's entries of the folder's own files: ``MODE OID STAGE`` each (three for a conflict)."""

    def fields(head: str) -> _Entry:
        mode, oid, stage = head.split(" ")
        return _Entry(mode, oid, stage)

    return _entries(git.output("ls-files", "--stage", "-z"), fields)


def _committed(git: _Git) -> dict[str, list[_Entry]]:
    """HEAD's entries of the folder's own files (``MODE TYPE OID``); none before the first commit."""
    if git.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", ok=(0, 1)).returncode:
        return {}

    def fields(head: str) -> _Entry:
        mode, _, oid = head.split(" ")
        return _Entry(mode, oid)

    return _entries(git.output("ls-tree", "-z", "HEAD"), fields)


def open_staged(path: str | os.PathLike[str]) -> OpenedCheckpoint | None:
    """The checkpoint folder at ``path`` as git's staging area holds it, its parsed configs, and the reader of its
    staged shards; or None where the staged changes touch none of its files (:func:`is_checkpoint_file`) but do
    change others, so that a commit cannot change what ``check`` finds.

    Every file of the checkpoint is read from the staging area: a shard the
    index names that is not staged (untracked, or staged for deletion) is
    refused naming it, and so is a file in a merge conflict, or staged as a
    symbolic link or a submodule, none of which a commit holds as a file.
    """
    given, root = os.fspath(path), Path(path)
    if not given:
        raise CheckpointError('""', "no checkpoint named: give the folder of a checkpoint in a git repository")
    if not root.is_dir():
        problem = "not a folder" if os.path.lexists(root) else "no such folder"
        raise CheckpointError(given, f"{problem}: --staged checks a checkpoint folder in a git repository")
    git = _Git(root)
    inside = git.run("rev-parse", "--is-inside-work-tree", ok=(0, 128))
    if inside.returncode or inside.stdout.strip() != b"true":
        reason = _first_line(inside.stderr) if inside.returncode else "it is inside a .git folder"
        raise CheckpointError(root, f"--staged reads git's staging area, and this is not in a git work tree ({reason})")
    staged = {name: entries for name, entries in _staged(git).items() if is_checkpoint_file(name)}
    committed = {name: entries for name, entries in _committed(git).items() if is_checkpoint_file(name)}
    touched = any(staged.get(name) != committed.get(name) for name in {*staged, *committed})
    if not touched and git.run("diff", "--cached", "--quiet", "--no-relative", "--no-ext-diff", ok=(0, 1)).returncode:
        return None
    return _open(root, git, staged)


def _open(root: Path, git: _Git, staged: dict[str, list[_Entry]]) -> OpenedCheckpoint:
    source = StagedShards(git, staged, root)
    config, modelopt_config = (
        json_object(source.read_file(name, MAX_JSON_BYTES), root / name, UNIQUE_KEYS[name]) if name in staged else None
        for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME)
    )
    names, weight_map = shard_names(
        staged.__contains__,
        lambda name: json_object(source.read_file(name, MAX_JSON_BYTES), root / name),
        root,
        lambda name: str(root / name),
        missing=_NOT_STAGED,
    )
    checkpoint = StagedCheckpoint(
        root=root,
        files=tuple(root / name for name in names),
        config=root / CONFIG_NAME if config is not None else None,
        weight_map=weight_map,
        modelopt_config=root / MODELOPT_CONFIG_NAME if modelopt_config is not None else None,
    )
    return OpenedCheckpoint(checkpoint, config, source, modelopt_config)


class _Content:
    """A staged file's bytes: its first 8 (``prefix``: a safetensors header's length, or the start of a Git LFS
    pointer), then reads at increasing offsets past them, from a stream of its blob (each byte once: those before
    an offset asked for are read and dropped) or from its Git LFS object, a file (where reads seek)."""

    def __init__(self, stream: IO[bytes], size: int, label: Path, seekable: bool) -> None:
        self.stream, self.size, self.label, self.seekable = stream, size, label, seekable
        self.prefix = stream.read(8)
        self.at = len(self.prefix)

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset``, at or after the end of the last read; a file that holds fewer than git or
        the LFS pointer said is refused."""
        if self.seekable:
            self.stream.seek(offset)
        else:
            assert offset >= self.at, f"a pipe is read forwards only: {offset} asked for after {self.at}"
            while self.at < offset:
                skipped = self.stream.read(min(_SKIP_CHUNK, offset - self.at))
                if not skipped:
                    break
                self.at += len(skipped)
        data = self.stream.read(size)
        self.at = offset + len(data)
        if len(data) != size:
            raise CheckpointError(self.label, f"changed while it was read: {size} bytes at {offset} were not there")
        return data

    def whole(self) -> bytes:
        return self.prefix + self.read(len(self.prefix), self.size - len(self.prefix))


class StagedShards:
    """Reads a checkpoint's files as staged (``staged``: the staging area's entries of its folder's files, by name),
    each named by its path under ``root``; a Git LFS pointer is read as the object it points to."""

    def __init__(self, git: _Git, staged: dict[str, list[_Entry]], root: Path) -> None:
        self._git, self._staged, self._root = git, staged, root
        self._sizes: dict[str, int] | None = None
        self._lfs_objects: Path | None = None

    def _oid(self, name: str) -> str:
        """The object staged as the file ``name``; refused where the staging area holds it as no file a commit
        would publish (a merge conflict, a symbolic link, a submodule)."""
        label, entries = self._root / name, self._staged[name]
        if len(entries) > 1 or entries[0].stage != "0":
            raise CheckpointError(label, "has a merge conflict in git's staging area: resolve it, then git add it")
        mode = entries[0].mode
        if mode == "120000":
            raise CheckpointError(label, "is staged as a symbolic link: a commit would hold the link, not the file")
        if mode not in _FILE_MODES:
            raise CheckpointError(label, f"is staged as a submodule (mode {mode}), not a file")
        return entries[0].oid

    def read_file(self, name: str, limit: int) -> bytes:
        """The whole staged file ``name`` (a config, the index): at most ``limit`` bytes, else refused unread."""
        label = self._root / name
        with self._content(name) as content:
            if content.size > limit:
                raise CheckpointError(label, f"holds more than the {limit} bytes a config or an index may hold")
            return content.whole()

    def read_shard(self, file: Path, select: ScaleSelector, *, values: bool) -> ShardRead:
        with self._content(file.name) as content:
            return read_shard_from(file, content.prefix, content.size, content.read, select, values=values)

    @contextmanager
    def _content(self, name: str) -> Iterator[_Content]:
        """The staged file ``name``'s bytes: its blob, or, where that is a Git LFS pointer, the object it names."""
        label, oid = self._root / name, self._oid(name)
        size = self._object_size(oid, label)
        with self._git.blob(oid) as stream:
            content = _Content(stream, size, label, seekable=False)
            if content.prefix != LFS_POINTER_START or size >= LFS_POINTER_MAX:
                yield content
                return
            pointer = content.whole()
        with self._lfs_object(pointer, label) as content:
            yield content

    def _object_size(self, oid: str, label: Path) -> int:
        if self._sizes is None:
            self._sizes = self._batch_sizes()
        size = self._sizes.get(oid)
        if size is None:
            raise CheckpointError(label, "its staged object is missing from the repository (git fsck says more)")
        return size

    def _batch_sizes(self) -> dict[str, int]:
        """Each staged object's size, from one ``git cat-file --batch-check``."""
        oids = "".join(sorted({f"{entry.oid}\n" for entries in self._staged.values() for entry in entries}))
        sizes: dict[str, int] = {}
        for line in self._git.output("cat-file", "--batch-check", given=oids.encode("ascii")).splitlines():
            fields = line.decode("ascii", "replace").split(" ")
            if len(fields) == 3 and fields[1] == "blob" and fields[2].isdigit():
                sizes[fields[0]] = int(fields[2])
        return sizes

    @contextmanager
    def _lfs_object(self, pointer: bytes, label: Path) -> Iterator[_Content]:
        """The file a Git LFS pointer names, from the clone's LFS store, checked against the pointer's size."""
        match = _LFS_POINTER.fullmatch(pointer)
        if match is None:
            raise CheckpointError(
                label, "is staged as a Git LFS pointer this tool cannot read (not version, oid, size)"
            )
        oid, size = match[1].decode("ascii"), int(match[2])
        store = self._lfs_store()
        path = store / oid[:2] / oid[2:4] / oid
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise CheckpointError(
                label,
                f"is staged as a Git LFS pointer, and its object (sha256:{oid[:12]}...) is not in {store}: run "
                "git lfs fetch",
            ) from None
        except OSError as exc:
            raise CheckpointError(label, f"its Git LFS object cannot be read: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise CheckpointError(label, f"its Git LFS object ({path}) is not a file")
        try:
            with open(path, "rb") as f:
                found = os.fstat(f.fileno()).st_size
                if found != size:
                    raise CheckpointError(
                        label, f"its Git LFS object holds {found} bytes where the staged pointer says {size}"
                    )
                yield _Content(f, size, label, seekable=True)
        except OSError as exc:
            raise CheckpointError(label, f"its Git LFS object cannot be read: {exc.strerror or exc}") from None

    def _lfs_store(self) -> Path:
        """The clone's Git LFS objects, where git-lfs keeps them: ``objects`` in ``lfs.storage`` (relative to git's
        common folder, where it is not absolute), or in that folder's ``lfs`` (a worktree's objects are its main
        clone's)."""
        if self._lfs_objects is None:
            common = self._root / os.fsdecode(self._git.output("rev-parse", "--git-common-dir").rstrip(b"\n"))
            storage = self._git.run("config", "--path", "--get", "lfs.storage", ok=(0, 1)).stdout.rstrip(b"\n")
            self._lfs_objects = common / (os.fsdecode(storage) if storage else "lfs") / "objects"
        return self._lfs_objects
