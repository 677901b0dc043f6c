"""File operations that differ by operating system.

Each takes the OS's own call where the OS has it, and the portable one where
it does not or ``SCALAR_SCALES_PORTABLE=1`` asks:

==============================  ========================================  ======================================
operation                       where the OS has it                       portable
==============================  ========================================  ======================================
write bytes at an offset        ``os.pwrite`` (POSIX)                     ``os.lseek`` then ``os.write``
copy a byte range               ``os.copy_file_range`` (Linux)            reads and writes of 1 MiB
mode and owner of a new file    ``fchmod``; ``fchown`` as root (POSIX)    ``chmod`` by path; the owner stays
make a rename durable           fsync the folder (POSIX)                  nothing: Windows cannot open a folder
never follow a link             ``O_NOFOLLOW`` (POSIX)                    no flag: Windows has none
==============================  ========================================  ======================================
"""

from __future__ import annotations

import os
import stat
import sys

from scalar_scales.system.portable import portable_forced

__all__ = ["copy_range", "no_follow", "sync_folder", "take_mode_and_owner", "write_at"]

_CHUNK = 1 << 20


def write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of the open file ``fd``."""
    view = memoryview(data)
    if hasattr(os, "pwrite") and not portable_forced():
        while view:
            view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
        return
    os.lseek(fd, offset, os.SEEK_SET)
    while view:
        view = view[os.write(fd, view) :]


def copy_range(source: int, target: int, offset: int, count: int) -> int:
    """Append ``count`` bytes of ``source`` from ``offset`` on to ``target`` (at its position); return how many
    came, fewer where ``source`` ends first."""
    copied = 0
    if hasattr(os, "copy_file_range") and not portable_forced():
        while copied < count:
            step = os.copy_file_range(source, target, count - copied, offset + copied)
            if step == 0:
                break
            copied += step
        return copied
    os.lseek(source, offset, os.SEEK_SET)
    while copied < count:
        chunk = os.read(source, min(_CHUNK, count - copied))
        if not chunk:
            break
        write_all(target, chunk)
        copied += len(chunk)
    return copied


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def take_mode_and_owner(fd: int, path: str | os.PathLike[str], like: os.stat_result) -> None:
    """Give the open file ``fd`` (at ``path``) the permission bits, and where the OS can the owner, of ``like``.

    Only root may give a file away: for anyone else the file stays the
    writer's, as any rewrite would leave it.
    """
    mode = stat.S_IMODE(like.st_mode)
    if hasattr(os, "fchmod") and sys.platform != "win32":
        os.fchmod(fd, mode)
    else:
        os.chmod(path, mode)
    if hasattr(os, "fchown") and (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, like.st_uid, like.st_gid)
        except PermissionError:
            pass


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable, where the OS lets a folder be fsynced (not Windows)."""
    if sys.platform == "win32":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def no_follow() -> int:
    """The ``os.open`` flag that refuses a link at the last component of a path, where the OS has one."""
    return getattr(os, "O_NOFOLLOW", 0)
