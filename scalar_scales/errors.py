"""The one error the command line shows a user as one line: a checkpoint file it refuses to read or change.

Every module that reads or writes a checkpoint raises it, so it lives at
the bottom of the package; ``cli`` turns it into ``scalar-scales: error:
LINE`` and exit 2 (docs/check.md, docs/migrate.md).
"""

from __future__ import annotations

import json
import os

__all__ = ["CheckpointError"]


class CheckpointError(Exception):
    """A checkpoint file we refuse to read or change.

    The message is one line, ``<file>: [<tensor>: ]<problem>``, fit to show a
    user as it is.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, tensor: str | None = None):
        self.path = str(path)
        self.problem = problem
        self.tensor = tensor
        where = f"{_printable(self.path)}: {_printable(tensor)}: " if tensor else f"{_printable(self.path)}: "
        super().__init__(where + problem)

    def __reduce__(self) -> tuple[type, tuple[str, str, str | None]]:
        """Rebuild from the three fields: shards are read in worker processes, and errors travel back."""
        return (type(self), (self.path, self.problem, self.tensor))


def _printable(text: str) -> str:
    """``text`` as it is, or JSON-quoted when it holds control characters: errors stay on one line."""
    return text if text.isprintable() else json.dumps(text)
