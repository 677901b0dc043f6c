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
the parent must compare is hashed with :attr:`Workers.pair_hash`: the
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
from typing import Any, Generic, Literal, Protocol, TypeVar

from scalar_scales.system.lock import held_descriptors
from scalar_scales.system.portable import portable_forced

__all__ = ["PARALLEL_MIN_ITEMS", "THREADS", "Run", "Workers", "stable_hash", "workers_for"]

PARALLEL_MIN_ITEMS = 8
"""Below this many items, starting worker processes costs more than it saves."""
THREADS = 8
"""Items worked on at once by a job that waits on the network."""
_MAX_PROCESSES = 8

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
Kind = Literal["here", "threads", "fork", "spawn"]


def stable_hash(pair: tuple[str, str]) -> int:
    """A 64-bit hash of a pair of strings, the second without NUL (a file name), that every process computes
    alike (two 32-bit checksums, at C speed)."""
    data = "\0".join(pair).encode("utf-8", "surrogatepass")
    return zlib.crc32(data) << 32 | zlib.adler32(data)


@dataclass(frozen=True)
class Workers:
    """How a batch of jobs runs: ``here`` (in this thread), ``threads``, ``fork`` or ``spawn`` processes."""

    kind: Kind
    processes: int = 1

    @property
    def pair_hash(self) -> Callable[[tuple[str, str]], int]:
        """The hash of a pair of strings that a job and this process compute alike."""
        return stable_hash if self.kind == "spawn" else hash

    def map(self, job: Callable[[Any], _T], items: Sequence[Any]) -> list[_T]:
        """``job`` on every item, results in the items' order; the first item's error (in the items' order) is
        raised."""
        return self.start(job, items).results()

    def start(self, job: Callable[[Any], _T], items: Sequence[Any]) -> Run[_T]:
        """Start ``job`` on every item, for the caller to do other work until it asks for the results (jobs that
        run here run then)."""
        if self.kind == "here":
            return _HereRun(job, items)
        if self.kind == "fork":
            return _ForkedRun(job, items, self.processes)
        return _PoolRun(job, items, self.kind, self.processes)


class Run(Protocol[_T_co]):
    """Jobs under way (:meth:`Workers.start`). Each run ends in :meth:`results` or :meth:`cancel`: either leaves
    no worker behind."""

    def results(self) -> list[_T_co]:
        """Every job's result in the items' order, once all are done; the first item's error is raised."""

    def cancel(self) -> None:
        """Stop every job, without waiting for the results."""


class _HereRun(Generic[_T]):
    def __init__(self, job: Callable[[Any], _T], items: Sequence[Any]) -> None:
        self._job, self._items = job, items

    def results(self) -> list[_T]:
        return [self._job(item) for item in self._items]

    def cancel(self) -> None:
        pass


class _PoolRun(Generic[_T]):
    """Threads, or spawned processes: a pool from ``concurrent.futures``."""

    def __init__(self, job: Callable[[Any], _T], items: Sequence[Any], kind: Kind, processes: int) -> None:
        import multiprocessing  # only here: the pools' imports cost a check a tenth of its time
        from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

        if kind == "threads":
            self._pool: Executor = ThreadPoolExecutor(max_workers=THREADS)
            self._pending = self._pool.map(job, items)
        else:
            self._pool = ProcessPoolExecutor(
                max_workers=processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start_spawned
            )
            self._pending = self._pool.map(job, items, chunksize=max(1, len(items) // (4 * processes)))

    def results(self) -> list[_T]:
        try:
            done = list(self._pending)
        except BaseException:
            self.cancel()
            raise
        self._pool.shutdown(wait=True)
        return done

    def cancel(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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


class _ForkedRun(Generic[_T]):
    """``job`` on every item in ``processes`` forked workers, worker k taking items k, k + n, k + 2n...

    A worker stops at its first error and sends it with its index; the
    smallest index is the first failing item, since every worker reaches
    each of its items before a later one. Whatever ends the parent's wait
    (an error, an interrupt), every worker is killed and reaped.
    """

    def __init__(self, job: Callable[[Any], _T], items: Sequence[Any], processes: int) -> None:
        self._count, self._processes = len(items), processes
        self._workers: list[tuple[int, int]] = []
        parent, locks = os.getpid(), held_descriptors()
        try:
            for k in range(processes):
                read, write = os.pipe()
                try:
                    pid = os.fork()
                except OSError:
                    os.close(read)
                    os.close(write)
                    raise
                if pid == 0:  # the worker: it never returns into the parent's code, even on a Ctrl-C this early
                    try:
                        os.close(read)
                        for _, sibling in self._workers:
                            os.close(sibling)
                        _worker(k, job, items, processes, write, parent, locks)
                    finally:
                        os._exit(1)
                os.close(write)
                self._workers.append((pid, read))
        except BaseException:
            self.cancel()
            raise

    def results(self) -> list[_T]:
        try:
            parts = []
            for pid, read in self._workers:
                with os.fdopen(read, "rb", closefd=False) as pipe:
                    sent = pipe.read()
                if not sent:
                    raise ChildProcessError(f"worker process {pid} ended without sending its results")
                parts.append(pickle.loads(sent))
        finally:
            self.cancel()
        failures = [(index, error) for _, index, error in parts if error is not None]
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        results: list[Any] = [None] * self._count
        for k, (done, _, _) in enumerate(parts):
            results[k :: self._processes] = done
        return results

    def cancel(self) -> None:
        """Kill and reap every worker (one that has sent its results and ended is only reaped)."""
        for pid, read in self._workers:
            os.close(read)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        self._workers = []


def _worker(
    k: int,
    job: Callable[[Any], Any],
    items: Sequence[Any],
    processes: int,
    write: int,
    parent: int,
    locks: tuple[int, ...],
) -> None:
    """Worker k of a :class:`_ForkedRun`: its results, or its first error and that item's index, down ``write``."""
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
