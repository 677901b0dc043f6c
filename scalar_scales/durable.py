"""Replace a file so that a reader sees the old one or the new one, never a torn one.

The new content is written to a temporary file beside the target, then
renamed over it. With ``durable``, the file and its folder are fsynced too,
so the new file also survives a power loss. A failure on the way removes the
temporary file and leaves the target as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["fsync_folder", "replaced", "temporary_path"]


def temporary_path(path: Path) -> Path:
    """Where the new content of ``path`` is written before it is renamed over it."""
    return path.with_name(f".{path.name}.scalar-scales.tmp")


@contextmanager
def replaced(path: str | os.PathLike[str], *, durable: bool = True, text: bool = False) -> Iterator[IO[Any]]:
    """A file to write the new content of ``path`` into; it replaces ``path`` when the block ends without error."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_folder(path.parent)


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
