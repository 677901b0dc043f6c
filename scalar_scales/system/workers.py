"""Work on many shards in worker processes, on every operating system, with no worker outliving its run.

- **Linux:** forked workers. They start at once and share the parent's
  memory and its string hashing. Each asks the kernel for SIGKILL when the
  parent's thread ends (``prctl(PR_SET_PDEATHSIG)``), and closes the locks it
  inherited (:func:`scalar_scales.system.lock.held_descriptors`) at once.
  The calling process is one of the run's processes: once it asks for the
  results, it takes items too. Each process takes the next items not yet
  taken, from a pipe of numbers they share, so that one slowed down (by a
  large shard, or by the parent's own work on the same cores) takes fewer.
  Each worker sends each result, pickled, down a pipe of its own, which the
  parent reads between its own items: ``os.fork`` and pipes, where a process
  pool's queues, threads and imports cost a check of a large checkpoint a
  tenth of its time.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
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
    """How many processes work at once: for ``fork``, this one and the workers it forks."""

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
    """``job`` on every item in ``processes`` processes, this one and forked workers, each taking the next share
    of items from a pipe.

    The parent writes every share's number to the pipe, in order, before
    the first fork, and closes its end for writing, so that a read returns
    the next number or, once all are taken, nothing. The workers start at
    once; this process takes shares too once it asks for the results, so
    that its own results need no pickling, and between its items it takes
    in what the workers have sent (:class:`_Sent`), so that little is left
    to unpickle once the last item is done. Each process stops at its first
    error and keeps it with its index; the smallest index is the first
    failing item, since items are taken in order and a process works on
    every item it takes until it fails. Whatever ends the parent's wait (an
    error, an interrupt), every worker is killed and reaped.
    """

    def __init__(self, job: Callable[[Any], _T], items: Sequence[Any], processes: int) -> None:
        self._job, self._items = job, items
        self._results: list[Any] = [None] * len(items)
        self._failures: list[tuple[int, BaseException]] = []
        self._workers: list[_Sent] = []
        self._numbers: int | None = _shares_pipe(len(items))
        parent, locks = os.getpid(), held_descriptors()
        try:
            for _ in range(processes - 1):
                read, write = _results_pipe()
                try:
                    pid = os.fork()
                except OSError:
                    os.close(read)
                    os.close(write)
                    raise
                if pid == 0:  # the worker: it never returns into the parent's code, even on a Ctrl-C this early
                    try:
                        os.close(read)
                        for sibling in self._workers:
                            os.close(sibling.read)
                        _worker(job, items, self._numbers, write, parent, locks)
                    finally:
                        os._exit(1)
                os.close(write)
                self._workers.append(_Sent(pid, read))
        except BaseException:
            self.cancel()
            raise

    def results(self) -> list[_T]:
        assert self._numbers is not None, "a run's results are asked for once"
        try:
            for worker in self._workers:
                os.set_blocking(worker.read, False)
            self._end(*_take_shares(self._job, self._items, self._numbers, Exception, self._keep, self._take_sent))
            for worker in self._workers:
                os.set_blocking(worker.read, True)
                while not worker.ended:
                    self._take_from(worker)
        finally:
            self.cancel()
        if self._failures:
            raise min(self._failures, key=lambda failure: failure[0])[1]
        return self._results

    def _keep(self, index: int, result: Any) -> None:
        self._results[index] = result

    def _end(self, index: int, error: BaseException | None) -> None:
        """A process's end: the index of its last item, and the error that item raised, if one did."""
        if error is not None:
            self._failures.append((index, error))

    def _take_sent(self) -> None:
        """Whatever the workers have sent so far, without waiting."""
        for worker in self._workers:
            if not worker.ended:
                self._take_from(worker)

    def _take_from(self, worker: _Sent) -> None:
        try:
            for is_end, index, value in worker.receive():
                if is_end:
                    self._end(index, value)
                else:
                    self._keep(index, value)
        except BlockingIOError:
            pass

    def cancel(self) -> None:
        """Kill and reap every worker (one that has sent its results and ended is only reaped)."""
        if self._numbers is not None:
            os.close(self._numbers)
            self._numbers = None
        for worker in self._workers:
            os.close(worker.read)
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(worker.pid, 0)
        self._workers = []


class _Sent:
    """What a forked worker has sent down its pipe: frames of an 8-byte length and a pickled ``(is_end, index,
    value)``, a result for each item and, last, the end: the index of its last item and the error it raised, or
    None."""

    def __init__(self, pid: int, read: int) -> None:
        self.pid, self.read = pid, read
        self.ended = False
        self._buffer = bytearray()

    def receive(self) -> Iterator[tuple[bool, int, Any]]:
        """The frames whole in what one read brings, after those before it; ``BlockingIOError`` where nothing
        came yet from a worker read without waiting."""
        data = os.read(self.read, _READ_BYTES)
        if not data:
            raise ChildProcessError(f"worker process {self.pid} ended without sending its results")
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= _LENGTH_BYTES:
            body = start + _LENGTH_BYTES
            end = body + int.from_bytes(buffer[start:body], "little")
            if end > len(buffer):
                break
            frame = pickle.loads(memoryview(buffer)[body:end])
            start = end
            self.ended = frame[0]
            yield frame
        del buffer[:start]


_LENGTH_BYTES = 8
_READ_BYTES = 1 << 20
_RESULTS_PIPE_BYTES = 1 << 20
"""What a worker's pipe is asked to hold, so that a worker seldom waits for the parent, busy with an item of its
own, to take in what it sent; Linux grants up to 1 MiB to any process, and a pipe keeps 64 KiB where it refuses."""


def _results_pipe() -> tuple[int, int]:
    import fcntl  # Linux only, as forked runs are

    read, write = os.pipe()
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, _RESULTS_PIPE_BYTES)
    except OSError:
        pass  # a smaller pipe only makes the worker wait more
    return read, write


_SHARE_NUMBER_BYTES = 2
_SHARES = 2048
"""Shares of the items a forked run's processes take: 4 KiB of numbers, which a pipe holds even on a system short
of pipe memory (one page, at least), so the parent writes them all before any worker reads, and never waits."""


def _shares_pipe(count: int) -> int:
    """The read end of a pipe that holds the numbers of the shares of ``count`` items, 0, 1, ..., its write end
    closed; share k is the items from k times :func:`_share_size` on."""
    read, write = os.pipe()
    try:
        numbers = range(-(-count // _share_size(count)))
        os.write(write, b"".join(number.to_bytes(_SHARE_NUMBER_BYTES, "little") for number in numbers))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def _share_size(count: int) -> int:
    return max(1, -(-count // _SHARES))


def _take_shares(
    job: Callable[[Any], Any],
    items: Sequence[Any],
    numbers: int,
    caught: type[BaseException],
    keep: Callable[[int, Any], None],
    between: Callable[[], None] = lambda: None,
) -> tuple[int, BaseException | None]:
    """``job`` on each share of items taken from ``numbers``, each result given to ``keep`` with its index and
    ``between`` called after each, until none is left or an item raises ``caught``: the last item's index, and
    its error or None.

    A read of a few bytes from a pipe is atomic, and the pipe was full
    before any worker started, so each read takes one whole share number.
    """
    size = _share_size(len(items))
    index = -1
    while number := os.read(numbers, _SHARE_NUMBER_BYTES):
        share = int.from_bytes(number, "little") * size
        for index in range(share, min(share + size, len(items))):
            try:
                keep(index, job(items[index]))
            except caught as error:
                return index, error
            between()
    return index, None


def _worker(
    job: Callable[[Any], Any],
    items: Sequence[Any],
    numbers: int,
    write: int,
    parent: int,
    locks: tuple[int, ...],
) -> None:
    """A worker of a :class:`_ForkedRun`: each result, then the end, down ``write`` (:class:`_Sent`); any error
    it meets is the parent's to raise."""
    try:
        _start_forked(parent, locks)
        with os.fdopen(write, "wb") as pipe:

            def send(*frame: Any) -> None:
                try:
                    data = pickle.dumps(frame, pickle.HIGHEST_PROTOCOL)
                except Exception as exc:  # the item's error, for the parent to raise
                    what = "error" if frame[0] else "result"
                    raise RuntimeError(f"a worker's {what} does not pickle: {exc!r}") from None
                pipe.write(len(data).to_bytes(_LENGTH_BYTES, "little"))
                pipe.write(data)
                pipe.flush()

            index, error = _take_shares(job, items, numbers, BaseException, partial(send, False))
            try:
                send(True, index, error)
            except RuntimeError as unsent:
                send(True, index, unsent)
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
