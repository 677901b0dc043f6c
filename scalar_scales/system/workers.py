"""Work on many shards in worker processes, on every operating system, with no worker outliving its run.

- **Linux:** forked workers. They start at once and share the parent's
  memory and its string hashing. Each asks the kernel for SIGKILL when the
  parent's thread ends (``prctl(PR_SET_PDEATHSIG)``), and closes the locks it
  inherited (:func:`scalar_scales.system.lock.held_descriptors`) at once.
  Each takes every n-th item and sends all its results back, pickled, down
  a pipe of its own: ``os.fork`` and a pipe, where a process pool's queues,
  threads and imports cost a check of a large checkpoint a tenth of its time.
- **Portable (macOS, Windows; Linux with ``SCALAR_SCALES_PORTABLE=1``):**
  spawned workers, a fresh interpreter each, which inherit no descriptor.
  Each runs a thread that waits on multiprocessing's sentinel for its parent
  and ends the worker when the parent is gone, however it ended.

Spawned workers hash strings with their own seed, so what a job hashes that
the parent must compare is hashed with :attr:`Workers.name_hash`: the
built-in ``hash`` where every process shares it, else a hash that any
process computes alike.

Ctrl-C reaches every process of a terminal's foreground group, so workers
ignore SIGINT and leave it to the parent. When the parent is interrupted
(or a job fails), the jobs not started are cancelled and it does not wait
for the ones under way: workers end with their parent, and a thread stuck
on a slow server ends at its request's timeout.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from scalar_scales.system.lock import held_descriptors
from scalar_scales.system.portable import portable_forced

__all__ = ["PARALLEL_MIN_ITEMS", "THREADS", "Workers", "stable_hash", "workers_for"]

PARALLEL_MIN_ITEMS = 8
"""Below this many items, starting worker processes costs more than it saves."""
THREADS = 8
"""Items worked on at once by a job that waits on the network."""
_MAX_PROCESSES = 8

_T = TypeVar("_T")
Kind = Literal["here", "threads", "fork", "spawn"]


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that every process computes alike (two 32-bit checksums, at C speed)."""
    data = text.encode("utf-8", "surrogatepass")
    return zlib.crc32(data) << 32 | zlib.adler32(data)


@dataclass(frozen=True)
class Workers:
    """How a batch of jobs runs: ``here`` (in this thread), ``threads``, ``fork`` or ``spawn`` processes."""

    kind: Kind
    processes: int = 1

    @property
    def name_hash(self) -> Callable[[str], int]:
        """The string hash a job and this process compute alike."""
        return stable_hash if self.kind == "spawn" else hash

    def map(self, job: Callable[[Any], _T], items: Sequence[Any]) -> list[_T]:
        """``job`` on every item, results in the items' order; the first item's error (in the items' order) is
        raised."""
        if self.kind == "here":
            return [job(item) for item in items]
        if self.kind == "fork":
            return _forked_map(job, items, self.processes)
        import multiprocessing  # only here: the pools' imports cost a check a tenth of its time
        from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

        if self.kind == "threads":
            pool: Executor = ThreadPoolExecutor(max_workers=THREADS)
            results = pool.map(job, items)
        else:
            pool = ProcessPoolExecutor(
                max_workers=self.processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start_spawned
            )
            results = pool.map(job, items, chunksize=max(1, len(items) // (4 * self.processes)))
        try:
            done = list(results)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return done


def workers_for(count: int, *, network: bool = False) -> Workers:
    """How to run ``count`` jobs: threads for a job that waits on the network; processes where that pays.

    Forking is only safe in a process with one thread, so a threaded caller
    runs its jobs here on Linux, unless it takes the portable path.
    """
    if network:
        return Workers("threads")
    processes = min(os.cpu_count() or 1, _MAX_PROCESSES)
    if count < PARALLEL_MIN_ITEMS or processes < 2:
        return Workers("here")
    if not sys.platform.startswith("linux") or portable_forced():
        return Workers("spawn", processes)
    if threading.active_count() > 1:
        return Workers("here")
    return Workers("fork", processes)


_PR_SET_PDEATHSIG = 1


def _forked_map(job: Callable[[Any], _T], items: Sequence[Any], processes: int) -> list[_T]:
    """``job`` on every item in ``processes`` forked workers, worker k taking items k, k + n, k + 2n...

    A worker stops at its first error and sends it with its index; the
    smallest index is the first failing item, since every worker reaches
    each of its items before a later one. Whatever ends the parent's wait
    (an error, an interrupt), every worker is killed and reaped before it
    returns.
    """
    parent, locks = os.getpid(), held_descriptors()
    workers: list[tuple[int, int]] = []
    try:
        for k in range(processes):
            read, write = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(read)
                os.close(write)
                raise
            if pid == 0:  # the worker: it never returns into the parent's code
                os.close(read)
                for _, sibling in workers:
                    os.close(sibling)
                _worker(k, job, items, processes, write, parent, locks)
            os.close(write)
            workers.append((pid, read))
        parts = []
        for pid, read in workers:
            with os.fdopen(read, "rb", closefd=False) as pipe:
                sent = pipe.read()
            if not sent:
                raise ChildProcessError(f"worker process {pid} ended without sending its results")
            parts.append(pickle.loads(sent))
    finally:
        for pid, read in workers:
            os.close(read)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    failures = [(index, error) for _, index, error in parts if error is not None]
    if failures:
        raise min(failures, key=lambda failure: failure[0])[1]
    results: list[Any] = [None] * len(items)
    for k, (done, _, _) in enumerate(parts):
        results[k::processes] = done
    return results


def _worker(
    k: int,
    job: Callable[[Any], Any],
    items: Sequence[Any],
    processes: int,
    write: int,
    parent: int,
    locks: tuple[int, ...],
) -> None:
    """Worker k of :func:`_forked_map`: its results, or its first error and that item's index, down ``write``."""
    try:
        _start_forked(parent, locks)
        done: list[Any] = []
        index, error = -1, None
        try:
            for index in range(k, len(items), processes):
                done.append(job(items[index]))
        except BaseException as exc:  # the parent raises it
            error = exc
        try:
            payload = pickle.dumps((done, index, error), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result or an error that does not pickle
            payload = pickle.dumps(([], index, RuntimeError(f"a worker's result does not pickle: {exc!r}")))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(0)


def _start_forked(parent: int, fds: tuple[int, ...]) -> None:
    """Die with the parent, on any signal, and let go of what it holds (a lock) at once.

    Linux sends the worker SIGKILL when the thread that forked it ends, so a
    killed run takes its workers with it. A parent already gone before that
    was set is caught by the ``getppid`` check.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    for fd in fds:
        os.close(fd)


def _start_spawned() -> None:
    """End this worker as soon as its parent is gone: its sentinel becomes ready when the parent's end of the
    pipe closes, which the OS does for a process that ends in any way."""
    import multiprocessing.connection  # a spawned worker's own import

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="scalar-scales parent watch", daemon=True).start()
