"""The commands the tool prints for a person to paste into a shell (a rule's fix, a download to make first):
each runs as printed, whatever the names in it hold.

Every argument is quoted for a POSIX shell (``shlex``): a folder's name may
hold a space or ``$(...)``. A path that starts with ``-`` is written
``./-...``, which names the same file and which no command reads as an
option: ``scalar-scales migrate --to=legacy`` would be the option, and the
folder would be missing. (``--`` before it would do the same for
``migrate``, but not for every option parser, nor where more options
follow.)
"""

from __future__ import annotations

import os
import shlex

__all__ = ["command", "path_argument"]


def path_argument(path: str | os.PathLike[str]) -> str:
    """``path`` as a command's argument that is no option: ``./`` before a relative path that starts with ``-``."""
    text = os.fspath(path)
    return f"./{text}" if text.startswith("-") else text


def command(*arguments: str) -> str:
    """The command line that runs ``arguments`` as given, each quoted where the shell would read it otherwise."""
    return shlex.join(arguments)
