"""Replace a file so that a reader sees the old one or the new one, never a torn one, and write nothing else.

The new content is written to a temporary file beside the target, given the
target's owner, extended attributes (its ACL among them) and mode, then
renamed over it. With ``durable``, the file and
its folder are fsynced too (where the OS can, docs/migrate.md), so the new
file also survives a power loss. A failure on the way removes the temporary
file and leaves the target as it was.

The temporary file is created exclusively (``O_EXCL``) and never through a
link (``O_NOFOLLOW``), under a name no one can guess
(``.scalar-scales-<random>.tmp``), so a link or file planted in a shared
folder is never written through or over. The name is short whatever the
target's name, so no file name is too long for it. A run killed on the way
leaves its temporary file, which :func:`remove_stale` clears at the next
run: only files of that name, never following a link, each refusal naming
its file. Where a failed write's temporary file cannot be removed either,
the error says it was left.

:func:`try_replacing_in` does in a folder, with an empty file, what
:func:`replaced` does there (create, rename, remove), so that a folder that
refuses one of them is found before anything is written.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from scalar_scales.errors import CheckpointError
from scalar_scales.system.fileops import no_follow, sync_folder, take_metadata

__all__ = [
    "TEMPORARY_NAME",
    "create_exclusive",
    "os_errors_named",
    "remove_stale",
    "replaced",
    "stale_temporaries",
    "try_replacing_in",
]

TEMPORARY_NAME = re.compile(r"\.scalar-scales-[0-9a-f]{16}\.tmp|\..+\.scalar-scales\.tmp")
"""A temporary file of this tool: ``.scalar-scales-<16 hex digits>.tmp``, or, from releases before it,
``.<name>.scalar-scales.tmp``."""
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _temporary_name(folder: Path) -> Path:
    return folder / f".scalar-scales-{os.urandom(8).hex()}.tmp"


def create_exclusive(folder: Path) -> tuple[int, Path]:
    """A new, empty file in ``folder`` under an unguessable temporary name: its descriptor and path."""
    for _ in range(16):
        path = _temporary_name(folder)
        try:
            return os.open(path, _CREATE | no_follow(), 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(folder))


@contextmanager
def replaced(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[BinaryIO]:
    """A file to write the new content of ``path`` into; it replaces ``path`` when the block ends without error.

    ``path`` itself may be a link (a Hugging Face cache snapshot's): the link
    is replaced by the new file, and what it pointed to is not touched.
    """
    path = Path(path)
    try:
        before = os.stat(path)
    except FileNotFoundError:
        before = None
    fd, tmp = create_exclusive(path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if before is not None:
                take_metadata(f.fileno(), tmp, before, path)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        _discard(tmp, error)
        raise
    if durable:
        sync_folder(path.parent)


def _discard(tmp: Path, error: BaseException) -> None:
    """Remove a failed write's temporary file; where that fails too, ``error`` (an OS error or a refusal) is
    raised again saying the file was left, for the line that reports what is on disk."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError as left:
        note = f"; its temporary file {tmp} was left (cannot remove it: {left.strerror or left})"
        if isinstance(error, CheckpointError):
            raise CheckpointError(error.path, error.problem + note, error.tensor) from error
        if isinstance(error, OSError):
            raise OSError(error.errno, f"{error.strerror or error}{note}", error.filename) from error


def try_replacing_in(folder: Path) -> None:
    """Create a file in ``folder`` exclusively, rename it and remove it, as writing a file anew there does; a
    :class:`CheckpointError` naming the folder and the step that failed. Each name is recorded before the call
    that may make a file of it, so that whatever stops the probe (a failed step, an interrupt at any point, even
    just after the file is made), the ``finally`` removes what the probe made: a run interrupted here has changed
    nothing. A name taken already (``O_EXCL``: a link planted there, say) is passed over, never removed."""
    made: list[Path] = []
    try:
        with os_errors_named(folder, "create a file in this folder"):
            for _ in range(16):
                made.append(_temporary_name(folder))
                try:
                    os.close(os.open(made[-1], _CREATE | no_follow(), 0o600))
                    break
                except FileExistsError:
                    made.pop()
            else:
                raise FileExistsError(errno.EEXIST, "every temporary name tried is taken")
        first, second = made[-1], _temporary_name(folder)
        made.append(second)
        with os_errors_named(folder, "rename a file in this folder"):
            os.rename(first, second)
        with os_errors_named(folder, f"remove a file in this folder ({second.name} was left)"):
            os.unlink(second)
    finally:
        for name in made:
            with suppress(OSError):
                os.unlink(name)


@contextmanager
def os_errors_named(path: str | os.PathLike[str], doing: str) -> Iterator[None]:
    """An OS error inside becomes a one-line :class:`CheckpointError`, ``PATH: cannot DOING: why``."""
    try:
        yield
    except OSError as exc:
        raise CheckpointError(path, f"cannot {doing}: {exc.strerror or exc}") from None


def stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """The temporary files killed runs left in ``folder`` (links among them; not a folder of that name)."""
    with os_errors_named(folder, "list"), os.scandir(folder) as entries:
        named = [Path(entry.path) for entry in entries if TEMPORARY_NAME.fullmatch(entry.name)]
    return [path for path in named if path.is_symlink() or not path.is_dir()]


def remove_stale(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files killed runs left in ``folder`` (links themselves, never what they point to);
    return them. A folder of that name is left alone."""
    removed = []
    for path in stale_temporaries(folder):
        with os_errors_named(path, "remove a stale temporary file"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
        removed.append(path)
    return removed
