"""One process at a time on a folder: an exclusive, non-blocking lock that the OS drops when its holder dies.

- **Linux, macOS:** ``flock`` on the folder itself. No file is created, and
  every spelling of the folder (a link to it, ``DIR/.``) is the same lock.
- **Portable (Windows; Linux with ``SCALAR_SCALES_PORTABLE=1``):** Windows
  cannot open a folder, so the lock is a file in it, ``.scalar-scales.lock``,
  opened without following a link and locked with the OS's own file lock
  (``msvcrt.locking`` on Windows, ``flock`` on POSIX). It is removed when the
  lock is let go; one that a killed holder left is locked and removed by the
  next run. On POSIX the file may be removed under a waiting run, so a run
  checks that the name still leads to the file it locked; on Windows an open
  file cannot be removed at all. A folder whose attributes forbid removing a
  file (``chattr +a``, ``+i``) is refused before the lock file is created, as
  the file could not be removed afterwards.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from scalar_scales.system.fileops import no_follow, removal_forbidden
from scalar_scales.system.portable import portable_forced

__all__ = ["LOCK_FILE_NAME", "FolderLocked", "folder_lock"]

LOCK_FILE_NAME = ".scalar-scales.lock"


class FolderLocked(Exception):
    """Another process holds the folder's lock."""


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of ``folder`` (a real path) for the block; :class:`FolderLocked` if another process has it.

    An OS error (a folder that cannot be opened, a lock file that cannot be
    created) propagates as it is, naming its file.
    """
    with _lock_file(folder) if sys.platform == "win32" or portable_forced() else _locked_folder(folder):
        yield


@contextmanager
def _locked_folder(folder: Path) -> Iterator[None]:
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLocked(folder) from None
        yield
    finally:
        os.close(fd)


@contextmanager
def _lock_file(folder: Path) -> Iterator[None]:
    path = folder / LOCK_FILE_NAME
    if why := removal_forbidden(folder):
        raise PermissionError(
            errno.EPERM, f"folder is {why}, so a lock file {LOCK_FILE_NAME} could not be removed", str(folder)
        )
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | no_follow() | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            _lock(fd)
        except BlockingIOError:
            os.close(fd)
            raise FolderLocked(folder) from None
        if _still_named(fd, path):
            break
        os.close(fd)  # removed by the holder we waited for; lock the new one
    try:
        yield
    finally:
        if sys.platform == "win32":
            os.close(fd)
            _remove(path)
        else:
            _remove(path)
            os.close(fd)


def _lock(fd: int) -> None:
    """The OS's lock on the open file ``fd``, or :class:`BlockingIOError` where another process holds it."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            raise BlockingIOError from None
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _still_named(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _remove(path: Path) -> None:
    """Remove the lock file; on Windows a run that opened it meanwhile keeps it, and removes it itself."""
    with suppress(FileNotFoundError, PermissionError):
        os.unlink(path)
