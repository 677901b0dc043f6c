"""Long-lived worker processes: requests one at a time as JSON lines on a pipe, each request with its own log.

For work that would otherwise start a process per run, where what a run shares with the next is only what is
process-global: the command the process was started with and its environment. ``Workers`` keeps one process
per (command, environment) and starts it at its first request; ``serve`` is the process's side.

- Protocol: the process reads one JSON object per line from its stdin, ``{"args": ..., "log": PATH}``, and
  answers each with one line on its stdout, ``{"result": ...}`` or ``{"failure": TRACEBACK}``, and whether it
  is still usable. Before the first request it says ``{"ready": ...}``. Both ends of the pipe are private
  descriptors: file descriptors 0, 1 and 2 are free for what the work writes.
- Logs: while a request runs, file descriptors 1 and 2 are that request's own file (``os.dup2``, so native
  output is caught too, and libc's buffers are flushed at both ends). Between requests they are the
  process's own log, which is where its start is written: the first request's log begins with it, as a
  process of its own would write it.
- Between requests the process is put back as it started: ``reset`` (the work's own teardown) says whether
  it could be, and ``os.environ`` is restored to what it was when the process said it was ready. A process
  that could not be reset answers, then exits, and the next request starts a new one; one that dies in a
  request after earlier ones is started again and the request run once more, so a request whose process
  died fails only where it would in a process of its own. A stdin closed (the parent gone) ends the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Reply", "Worker", "Workers", "serve"]

_LIBC = ctypes.CDLL(None)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _LIBC.fflush(None)


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """File descriptors 1 and 2 (and Python's streams on them) written to ``path`` inside the block."""
    _flush()
    saved = os.dup(1), os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        os.close(target)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _take_over_stdio() -> tuple[TextIO, TextIO]:
    """The protocol's two ends, moved off descriptors 0 and 1: stdin becomes /dev/null and stdout the log."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return requests, replies


def serve(
    handle: Callable[[Any], Any],
    *,
    start: Callable[[], None] = lambda: None,
    reset: Callable[[], bool] = lambda: True,
) -> None:
    """Answer requests until stdin closes: ``start()`` once, then for each request ``handle(args)`` (its
    result, JSON) and ``reset()`` (False, or raising: this process cannot take another request), with the
    request's file descriptors 1 and 2 in its log. Call it first thing: nothing may write to stdout before."""
    requests, replies = _take_over_stdio()
    faulthandler.enable()  # on descriptor 2: a crash's traceback goes to the log of the request it ended
    start()
    _flush()
    environment = dict(os.environ)
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in requests:
        request = json.loads(line)
        with _output_to(request["log"]):
            try:
                reply: dict[str, Any] = {"result": handle(request["args"])}
            except BaseException:  # reported to the parent, whose request fails with it
                reply = {"failure": traceback.format_exc()}
            try:
                usable = bool(reset())
            except BaseException:
                traceback.print_exc()
                usable = False
            os.environ.clear()
            os.environ.update(environment)
        try:
            replies.write(json.dumps(reply | {"usable": usable}) + "\n")
        except BrokenPipeError:
            break
        if not usable:
            break
    # The collection at the interpreter's exit walks every object of what the work imported (seconds, for
    # SGLang's); atexit's handlers run all the same.
    gc.freeze()


@dataclass
class Reply:
    """What one request came back with: its result (None where it failed), its log, the process that served it
    and how many requests that process had served before, and where it was run once more, why."""

    result: Any
    log: str
    failure: str | None
    pid: int
    served_before: int
    retried_after: str | None = None


class _Ended(Exception):
    """The process closed its end of the pipe, or did not answer in time."""

    def __init__(self, *, timed_out: bool) -> None:
        super().__init__("timed out" if timed_out else "died")
        self.timed_out = timed_out


class _Gone(Exception):
    """The process ended (or timed out) before it answered: what the parent reports."""

    def __init__(self, reply: Reply, *, timed_out: bool) -> None:
        super().__init__(reply.failure)
        self.reply = reply
        self.timed_out = timed_out


class Worker:
    """One worker process: ``command`` (which calls ``serve``) in ``environment``, started at the first
    request, logs under ``folder``."""

    def __init__(self, command: list[str], environment: dict[str, str], folder: Path) -> None:
        self.command, self.environment, self.folder = command, environment, folder
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._buffer = b""
        self._served = 0
        self._starts = 0
        self._closing: list[subprocess.Popen[bytes]] = []

    @property
    def starts(self) -> int:
        """How many processes this worker has started."""
        return self._starts

    def request(self, args: Any, *, timeout: float) -> Reply:
        """Run one request; where the process dies in it after serving earlier ones, once more in a new one."""
        try:
            return self._request(args, timeout)
        except _Gone as gone:
            if gone.reply.served_before == 0 or gone.timed_out:
                return gone.reply
            first = gone.reply.failure
        try:
            reply = self._request(args, timeout)
        except _Gone as gone:
            reply = gone.reply
        reply.retried_after = first
        return reply

    def _request(self, args: Any, timeout: float) -> Reply:
        deadline = time.monotonic() + timeout
        start_log = self._start(deadline) if self._process is None else ""
        assert self._process is not None and self._process.stdin is not None
        pid, served = self._process.pid, self._served
        fd, log = tempfile.mkstemp(prefix="request-", suffix=".log", dir=self.folder)
        os.close(fd)
        try:
            try:
                self._process.stdin.write((json.dumps({"args": args, "log": log}) + "\n").encode())
                self._process.stdin.flush()
                answer = json.loads(self._read_line(deadline))
            except (_Ended, OSError) as error:
                timed_out = isinstance(error, _Ended) and error.timed_out
                self.close(kill=timed_out)
                text = start_log + Path(log).read_text(errors="replace")
                failure = f"worker process {pid} {'timed out' if timed_out else 'died'} in its request {served + 1}"
                raise _Gone(Reply(None, text, failure, pid, served), timed_out=timed_out) from None
            text = start_log + Path(log).read_text(errors="replace")
        finally:
            Path(log).unlink(missing_ok=True)
        self._served += 1
        if not answer["usable"]:
            self.close(wait=False)
        return Reply(answer.get("result"), text, answer.get("failure"), pid, served)

    def _start(self, deadline: float) -> str:
        """Start the process and wait until it is ready; what it wrote until then."""
        fd, log = tempfile.mkstemp(prefix="process-", suffix=".log", dir=self.folder)
        self._log = Path(log)
        self._served, self._buffer = 0, b""
        self._starts += 1
        try:
            self._process = subprocess.Popen(
                self.command, env=self.environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd
            )
        finally:
            os.close(fd)
        try:
            json.loads(self._read_line(deadline))["ready"]
        except (_Ended, ValueError, KeyError) as error:
            pid = self._process.pid
            timed_out = isinstance(error, _Ended) and error.timed_out
            self.close(kill=timed_out, keep_log=True)
            text = self._log.read_text(errors="replace")
            self._log.unlink(missing_ok=True)
            raise _Gone(Reply(None, text, f"worker process {pid} did not start", pid, 0), timed_out=timed_out) from None
        return self._log.read_text(errors="replace")

    def _read_line(self, deadline: float) -> str:
        assert self._process is not None and self._process.stdout is not None
        out = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Ended(timed_out=True)
            ready, _, _ = select.select([out], [], [], left)
            if ready:
                chunk = os.read(out, 1 << 16)
                if not chunk:
                    raise _Ended(timed_out=False)
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self, *, wait: bool = True, kill: bool = False, keep_log: bool = False) -> None:
        """End the process: its stdin closed (it exits when it reads the end), then, with ``wait``, it and any
        closed before without waiting waited for, and killed if one has not ended within 60 s; at once with
        ``kill``, for one that stopped answering."""
        process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None
            if kill:
                process.kill()
            with contextlib.suppress(OSError):
                process.stdin.close()
            self._closing.append(process)
            if self._log is not None and not keep_log:
                self._log.unlink(missing_ok=True)
        if not wait:
            return
        for closing in self._closing:
            try:
                closing.wait(timeout=60)
            except subprocess.TimeoutExpired:
                closing.kill()
                closing.wait()
            assert closing.stdout is not None
            closing.stdout.close()
        self._closing.clear()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Workers:
    """The worker processes of a session, one per (command, environment), and those of their own; ``close``
    (or the end of a ``with`` block) ends them all, and removes their logs."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="scalar-scales-workers-"))
        self._shared: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], Worker] = {}
        self._own: list[Worker] = []

    def shared(self, command: list[str], environment: dict[str, str]) -> Worker:
        """The one worker of this command and environment."""
        key = tuple(command), tuple(sorted(environment.items()))
        if key not in self._shared:
            self._shared[key] = Worker(command, environment, self.folder)
        return self._shared[key]

    def own(self, command: list[str], environment: dict[str, str]) -> Worker:
        """A worker no other request shares (close it, or leave it to ``close``)."""
        self._own.append(worker := Worker(command, environment, self.folder))
        return worker

    @property
    def starts(self) -> int:
        """How many processes the workers have started."""
        return sum(worker.starts for worker in [*self._shared.values(), *self._own])

    def close(self) -> None:
        """End every process: all told to first, then each waited for."""
        workers = [*self._shared.values(), *self._own]
        for worker in workers:
            worker.close(wait=False)
        for worker in workers:
            worker.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
