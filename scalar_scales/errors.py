"""The errors the command line shows a user as one line, each with its exit code (docs/migrate.md).

- :class:`CheckpointError`: a file refused, read or written, before
  anything changed (exit 2).
- :class:`StoppedAfterWriting`: ``migrate`` changed files, then an error or
  an interrupt stopped it (exit 3); the line says what changed.
- :class:`Interrupted`: SIGTERM, as SIGINT is ``KeyboardInterrupt``.

Every module that reads or writes a checkpoint raises them, so they live at
the bottom of the package.
"""

from __future__ import annotations

import json
import os

__all__ = ["CheckpointError", "Interrupted", "StoppedAfterWriting", "escaped", "printable"]


class CheckpointError(Exception):
    """A checkpoint file we refuse to read or change.

    The message is one line, ``<file>: [<tensor>: ]<problem>``, fit to show a
    user as it is.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, tensor: str | None = None):
        self.path = str(path)
        self.problem = problem
        self.tensor = tensor
        where = f"{printable(self.path)}: {printable(tensor)}: " if tensor else f"{printable(self.path)}: "
        super().__init__(where + problem)


def printable(text: str) -> str:
    """``text`` as it is, or JSON-quoted when it holds control characters: errors stay on one line."""
    return text if text.isprintable() else json.dumps(text)


def escaped(line: str) -> str:
    """``line`` with every character a terminal would act on (a newline, an escape sequence's ESC, a BEL, a
    bidirectional override) written as its Python escape: what a checkpoint or a server names cannot forge a
    line or reach the terminal."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in line)


class StoppedAfterWriting(Exception):
    """A migration that changed shards and then stopped. Every shard it left is whole, in its old layout or its
    new one, and config.json's marker, written only last, is as it was: a rerun finishes the job."""

    def __init__(self, root: str | os.PathLike[str], changed: int, total: int, cause: str):
        self.root, self.changed, self.total, self.cause = str(root), changed, total, cause
        super().__init__(
            f"{printable(self.root)}: stopped after changing {changed} of {total} shards (config.json not "
            f"changed): {cause}; every shard is whole, in its old layout or its new one: run migrate again to finish"
        )


class Interrupted(BaseException):
    """The process was asked to stop (SIGTERM); like ``KeyboardInterrupt``, not an error of the checkpoint."""

    def __init__(self, signal_number: int):
        self.signal_number = signal_number
        super().__init__(f"signal {signal_number}")
