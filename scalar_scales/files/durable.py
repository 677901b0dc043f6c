"""Replace a file so that a reader sees the old one or the new one, never a torn one.

The new content is written to a temporary file beside the target, given the
target's mode and owner, then renamed over it. With ``durable``, the file and
its folder (where the OS can, docs/migrate.md) are fsynced too, so the new file also survives a power loss. A
failure on the way removes the temporary file and leaves the target as it
was; a run killed on the way leaves the temporary file, which
``remove_stale`` clears at the next run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from scalar_scales.errors import CheckpointError
from scalar_scales.system.fileops import sync_folder, take_mode_and_owner

__all__ = ["os_errors_named", "remove_stale", "replaced", "temporary_path"]


def temporary_path(path: Path) -> Path:
    """Where the new content of ``path`` is written before it is renamed over it."""
    return path.with_name(f".{path.name}.scalar-scales.tmp")


@contextmanager
def replaced(path: str | os.PathLike[str], *, durable: bool = True, text: bool = False) -> Iterator[IO[Any]]:
    """A file to write the new content of ``path`` into; it replaces ``path`` when the block ends without error."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        before = os.stat(path)
    except FileNotFoundError:
        before = None
    try:
        with open(tmp, "w" if text else "wb", **({"encoding": "utf-8", "newline": ""} if text else {})) as f:
            yield f
            if before is not None:
                take_mode_and_owner(f.fileno(), tmp, before)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        sync_folder(path.parent)


@contextmanager
def os_errors_named(path: str | os.PathLike[str], doing: str) -> Iterator[None]:
    """An OS error inside becomes a one-line :class:`CheckpointError`, ``PATH: cannot DOING: why``."""
    try:
        yield
    except OSError as exc:
        raise CheckpointError(path, f"cannot {doing}: {exc.strerror or exc}") from None


def remove_stale(path: str | os.PathLike[str]) -> bool:
    """Remove the temporary file a killed run left beside ``path``; True if there was one."""
    try:
        os.unlink(temporary_path(Path(path)))
    except FileNotFoundError:
        return False
    return True
