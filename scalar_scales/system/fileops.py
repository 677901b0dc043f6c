"""File operations that differ by operating system.

Each takes the OS's own call where the OS has it, and the portable one where
it does not or ``SCALAR_SCALES_PORTABLE=1`` asks:

==============================  ========================================  ======================================
operation                       where the OS has it                       portable
==============================  ========================================  ======================================
write bytes at an offset        ``os.pwrite`` (POSIX)                     ``os.lseek`` then ``os.write``
copy a byte range               ``os.copy_file_range`` (Linux), or reads  reads and writes of 1 MiB
                                and writes where it refuses the two
                                files (another file system: EXDEV)
what a new file keeps           owner (POSIX), extended attributes, ACLs  mode, by path (Windows); the
                                among them (Linux), then mode, each       owner stays the writer's
                                through the descriptor
keepable by this user           owner and group ours, or root (POSIX)     always (Windows)
make a rename durable           fsync the folder (POSIX)                  nothing: Windows cannot open a folder
a folder's own attributes       append-only, immutable (Linux             none known (macOS, Windows)
                                ``FS_IOC_GETFLAGS``, as ``lsattr -d``)
never follow a link             ``O_NOFOLLOW`` (POSIX)                    no flag: Windows has none
==============================  ========================================  ======================================
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from scalar_scales.system.portable import portable_forced

__all__ = [
    "copy_range",
    "extended_attributes",
    "no_follow",
    "removal_forbidden",
    "sync_folder",
    "take_metadata",
    "unkeepable",
    "write_at",
]

_CHUNK = 1 << 20
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS})
"""What ``copy_file_range`` answers where the kernel cannot copy between these two files (another file system, a
file system without it, an old kernel): shutil then copies by reads and writes, and so does :func:`copy_range`."""


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
    came, fewer where ``source`` ends first. The kernel copies where it can; where it cannot copy between these
    two files (:data:`_NO_KERNEL_COPY`), the rest is read and written."""
    copied = 0
    if hasattr(os, "copy_file_range") and not portable_forced():
        while copied < count:
            try:
                step = os.copy_file_range(source, target, count - copied, offset + copied)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                break
            if step == 0:
                return copied
            copied += step
    os.lseek(source, offset + copied, os.SEEK_SET)
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


def take_metadata(fd: int, path: str | os.PathLike[str], like: os.stat_result, source: str | os.PathLike[str]) -> None:
    """Give the open file ``fd`` (at ``path``) what the file it replaces (``source``, as ``like``) has: its owner,
    its extended attributes (POSIX ACLs are ``system.posix_acl_*`` attributes) and its permission bits.

    The owner goes first: the kernel clears setuid and setgid on a change of
    owner, so the mode, set last, keeps them. :func:`unkeepable` says
    beforehand where a file's owner or attributes could not be kept.
    """
    mode = stat.S_IMODE(like.st_mode)
    if not hasattr(os, "fchmod") or sys.platform == "win32":
        os.chmod(path, mode)
        return
    if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
        os.fchown(fd, like.st_uid, like.st_gid)
    for name, value in extended_attributes(source).items():
        os.setxattr(fd, name, value)
    os.fchmod(fd, mode)


def extended_attributes(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every extended attribute of the file at ``path`` (a link followed), where the OS has them (Linux)."""
    if not hasattr(os, "listxattr"):
        return {}
    try:
        names = os.listxattr(path)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    return {name: os.getxattr(path, name) for name in names}


_USER_SETTABLE = ("user.", "system.posix_acl_access", "system.posix_acl_default")
"""The attributes a file's owner may set on a file of their own; the rest (``security.``, ``trusted.``) need
privileges."""


def unkeepable(path: str | os.PathLike[str]) -> str | None:
    """What of ``path`` a new file written in its place by this process could not keep (its owner, its group, an
    extended attribute only the privileged may set), or None: only root gives a file away. A ``trusted.*``
    attribute is listed to root only, so no one else can know of it."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return None
    info = os.stat(path)
    if info.st_uid != os.geteuid():
        return f"its owner, user {info.st_uid}"
    if info.st_gid != os.getegid() and info.st_gid not in os.getgroups():
        return f"its group {info.st_gid}, which user {os.geteuid()} is not in"
    if privileged := [name for name in extended_attributes(path) if not name.startswith(_USER_SETTABLE)]:
        return f"its extended attribute {privileged[0]}"
    return None


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable, where the OS lets a folder be fsynced (not Windows)."""
    if sys.platform == "win32":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FS_IOC_GETFLAGS = 0x80086601
"""Linux's ioctl that reads a file's attributes (``lsattr``): ``_IOR('f', 1, long)``."""
_FS_APPEND_FL, _FS_IMMUTABLE_FL = 0x20, 0x10


def removal_forbidden(folder: str | os.PathLike[str]) -> str | None:
    """``append-only (chattr +a)`` or ``immutable (chattr +i)`` where ``folder``'s own attributes forbid renaming a
    file over another in it and removing one, else None: also where the OS or the file system keeps no such
    attributes. An append-only folder takes new files; that is why a probe file cannot tell it: the probe would stay."""
    if sys.platform != "linux":
        return None
    import fcntl

    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        flags = bytearray(8)
        try:
            fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)
        except OSError as exc:
            if exc.errno in (errno.ENOTTY, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                return None
            raise
    finally:
        os.close(fd)
    value = int.from_bytes(flags[:4], sys.byteorder)
    if value & _FS_IMMUTABLE_FL:
        return "immutable (chattr +i)"
    if value & _FS_APPEND_FL:
        return "append-only (chattr +a)"
    return None


def no_follow() -> int:
    """The ``os.open`` flag that refuses a link at the last component of a path, where the OS has one."""
    return getattr(os, "O_NOFOLLOW", 0)
