"""Start the command in its own process, and end it, so that an interrupt at any instant tells the truth.

One arriving while the command line is still being imported says ``nothing
was changed`` and exits 130 or 143, as the command does once it runs. Once
the command has returned its exit code, interrupts do nothing, and the
process exits at once with that code: the interpreter's finalization would
put back the signals' defaults, and a late signal would kill it after its
last line. (Before this module runs, the interpreter is still starting, and a
signal ends it as the interpreter ends, having done nothing.)"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn

__all__ = ["run"]


def run() -> NoReturn:
    """``scalar-scales``: the console script, and ``python -m scalar_scales``."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _interrupted_while_starting)
    from scalar_scales.cli import finish_whatever_comes, main

    try:
        code = main()
    except KeyboardInterrupt:  # after the command's own handling, before its exit code came back
        _interrupted_while_starting(signal.SIGINT, None)
    finish_whatever_comes()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away
            stream.flush()
    os._exit(code)  # the interpreter's finalization puts back the signals' defaults: a late one would kill it


def _interrupted_while_starting(number: int, frame: object) -> NoReturn:
    # The line cli.main prints when interrupted, written out here: importing it would widen the window before
    # these handlers are in place (scalar_scales.errors imports json: about 7 ms).
    os.write(2, f"scalar-scales: interrupted ({signal.Signals(number).name}); nothing was changed\n".encode())
    os._exit(128 + number)
