"""Helpers for the command-line tests: small synthetic NVFP4 checkpoints, byte snapshots, the command run in a
process of its own or in this one, file leases that make a process's opens events a test can wait on."""

from __future__ import annotations

import gc
import hashlib
import io
import json
import locale
import os
import signal
import struct
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

__all__ = [
    "Lease",
    "assert_migrate_refuses",
    "corrupt_header",
    "data_digest",
    "edit_header_text",
    "header_bytes",
    "header_changed",
    "holding_the_lock",
    "let_edits_through",
    "make_checkpoint",
    "no_process_left",
    "processes_running",
    "renamed",
    "rewrite_header",
    "run_cli",
    "run_cli_in_process",
    "shard_writes_held",
    "shards",
    "signals_taken_over",
    "snapshot",
    "until",
    "write_scales_natively_0_d",
]


def make_checkpoint(directory: Path, *, shards: int = 3, experts: int = 4, layers: int = 2) -> Path:
    """A small checkpoint shaped like the V4-Flash synthetic: legacy (1,) scales, an index, a config."""
    return write_synthetic_checkpoint(
        directory, data_bytes=layers * experts * 3 * 400, layers=layers, experts=experts, shards=shards
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links followed), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def data_digest(path: Path) -> str:
    """SHA-256 of the data section (everything after the header)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return hashlib.sha256(raw[8 + length :]).hexdigest()


def renamed(checkpoint: Path, old: str, new: str) -> None:
    """Rename every tensor whose name starts with ``old`` to start with ``new``, in its shard's header
    (JSON-escaped, as the reference reader accepts it) and in the index."""
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())

    def name(tensor: str) -> str:
        return new + tensor.removeprefix(old) if tensor.startswith(old) else tensor

    for shard in shards(checkpoint):
        rewrite_header(shard, lambda header: {name(tensor): entry for tensor, entry in header.items()})
    document["weight_map"] = {name(tensor): file for tensor, file in document["weight_map"].items()}
    index.write_text(json.dumps(document))


def rewrite_header(path: Path, change: Callable[[dict], object]) -> None:
    """Replace a shard's header with ``change(header)`` (compact JSON), keeping its data bytes."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    new = change(header)
    encoded = json.dumps(header if new is None else new, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def write_scales_natively_0_d(checkpoint: Path) -> None:
    """Rewrite every shard's header with its global scales 0-D, compact, as a writer of 0-D scales writes them:
    (1,) then needs a longer header, so ``migrate --to legacy`` rewrites each shard to a new file."""
    for shard in shards(checkpoint):
        rewrite_header(
            shard, lambda h: {n: (s | {"shape": []} if n.endswith("_global_scale") else s) for n, s in h.items()}
        )


def edit_header_text(path: Path, change: Callable[[str], str]) -> None:
    """Replace a shard's header with ``change(text)``, as raw text (any layout, valid or not), keeping its data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    encoded = change(raw[8 : 8 + length].decode("utf-8")).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def corrupt_header(path: Path) -> None:
    """Make a shard's header JSON that no reader parses (its second character a ``[``), keeping its length."""
    edit_header_text(path, lambda text: text[:1] + "[" + text[2:])


def processes_running(marker: str) -> list[int]:
    """Pids of live processes whose command line holds ``marker`` (zombies have an empty one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            found.append(int(entry.name))
    return found


def no_process_left(checkpoint: Path, grace: float = 60.0) -> bool:
    """No live process (a worker, say) still works on ``checkpoint``; workers get up to ``grace`` seconds to receive
    their signal (a bound on waiting for that event, generous so that a loaded machine cannot fail it)."""
    deadline = time.monotonic() + grace
    while processes_running(str(checkpoint)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _environment(env: dict[str, str | None] | None) -> dict[str, str] | None:
    if env is None:
        return None
    return {key: value for key, value in {**os.environ, **env}.items() if value is not None}


def run_cli(
    *args: str | Path, env: dict[str, str | None] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``scalar-scales ARGS`` in a new process (``python -m scalar_scales``); ``env`` adds to (or, with None values,
    removes from) the environment. For what only a process shows: its exit status, signals, its streams' bytes,
    the environment read when an interpreter starts, huggingface_hub (which reads its own at import)."""
    return subprocess.run(
        [sys.executable, "-m", "scalar_scales", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_environment(env),
        cwd=cwd,
    )


READ_AT_START = ("PYTHON", "LC_", "LANG", "HF_", "HUGGINGFACE_")
"""Prefixes of the environment variables read once, when an interpreter starts (its encoding, its flags, the
locale) or when huggingface_hub is imported (``huggingface_hub.constants``): a command run in this process would
not see them changed. :func:`run_cli_in_process` refuses them."""


def run_cli_in_process(
    *args: str | Path, env: dict[str, str | None] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``scalar-scales ARGS`` run in this process, through the function the console script runs
    (:func:`scalar_scales.cli.main`, given the arguments), for a test of what the command decides: its report, its
    exit code, its refusals. The same result as :func:`run_cli`'s, without an interpreter's start.

    ``env`` is applied for the call (None removes a variable) and, with every other variable, put back after; so
    are ``sys.argv``, the standard streams, the signal handlers, the cyclic garbage collector's state, the umask,
    the warnings filters and the current folder (``cwd``, where given). What the command prints is captured as a
    process's pipes would hold it: encoded as a child's streams encode (this interpreter's locale encoding, or
    ``PYTHONIOENCODING``), decoded as :func:`run_cli` decodes (universal newlines). ``SystemExit`` is the exit
    code (a message in it goes to stderr, as the interpreter writes it, with code 1); an exception that escapes
    the command is its traceback on stderr and code 1, as the interpreter ends a process with one.

    Refused: an environment variable read only when an interpreter or huggingface_hub starts
    (:data:`READ_AT_START`), and a Hub address (``://``): huggingface_hub reads its environment once, at import,
    so a Hub check belongs in a process of its own (:func:`run_cli`)."""
    arguments = [str(argument) for argument in args]
    changes = dict(env or {})
    if at_start := [name for name in changes if name.upper().startswith(READ_AT_START)]:
        raise ValueError(f"{at_start[0]} is read when a process starts, not by the command: use run_cli")
    if hub := [argument for argument in arguments if "://" in argument]:
        raise ValueError(f"{hub[0]}: a Hub address; huggingface_hub reads its environment at import: use run_cli")
    hub_imported = "huggingface_hub" in sys.modules
    encoding, _, errors = (os.environ.get("PYTHONIOENCODING") or "").partition(":")
    encoding = encoding or locale.getpreferredencoding(False)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors or "strict", write_through=True)
    stderr = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="backslashreplace", write_through=True)
    with _this_process_restored(), warnings.catch_warnings():
        _interpreter_warnings()
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["scalar-scales", *arguments]
        sys.stdout, sys.stderr = stdout, stderr
        sys.__stdout__ = stdout  # shutil.get_terminal_size asks it: a pipe, as a process's stdout is here
        code = _exit_code_of(arguments)
        for stream in (stdout, stderr):
            stream.flush()
    if not hub_imported and "huggingface_hub" in sys.modules:
        raise AssertionError("the command imported huggingface_hub, which reads its environment once: use run_cli")
    return subprocess.CompletedProcess(
        ["scalar-scales", *arguments], code, _as_a_pipe_reads(stdout), _as_a_pipe_reads(stderr)
    )


def _exit_code_of(arguments: Sequence[str]) -> int:
    """The command's exit code, as the interpreter would end a process running it."""
    from scalar_scales.cli import main

    try:
        return main(arguments)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the test run's own Ctrl-C
        raise
    except BaseException:
        traceback.print_exc()
        return 1


def _as_a_pipe_reads(stream: io.TextIOWrapper) -> str:
    """What ``stream`` took, decoded as :func:`run_cli` decodes a pipe: the locale's encoding, universal newlines."""
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return io.TextIOWrapper(io.BytesIO(raw), encoding=locale.getpreferredencoding(False)).read()


def _interpreter_warnings() -> None:
    """The warnings a new interpreter shows (its default filters, then ``PYTHONWARNINGS``', which come first),
    written to ``sys.stderr`` as it writes them, in place of pytest's, which records them instead."""
    warnings.resetwarnings()
    warnings.simplefilter("ignore", ResourceWarning)
    warnings.simplefilter("ignore", ImportWarning)
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for option in os.environ.get("PYTHONWARNINGS", "").split(","):
        if option.strip():
            warnings._setoption(option.strip())  # type: ignore[attr-defined]  # how the interpreter reads them

    def shown(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: object = None,
        line: str | None = None,
    ) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = shown


@contextmanager
def _this_process_restored() -> Iterator[None]:
    """Put back after the block what a command run in this process may change of it."""
    argv, streams = sys.argv, (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    environment, folder, gc_enabled = dict(os.environ), os.getcwd(), gc.isenabled()
    umask = os.umask(0o022)
    os.umask(umask)
    handlers = {number: signal.getsignal(number) for number in _catchable_signals()}
    try:
        yield
    finally:
        sys.argv = argv
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = streams
        for name in set(os.environ) - set(environment):
            del os.environ[name]
        for name, value in environment.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        os.chdir(folder)
        os.umask(umask)
        (gc.enable if gc_enabled else gc.disable)()
        for number, handler in handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)


def _catchable_signals() -> list[signal.Signals]:
    uncatchable = {getattr(signal, name) for name in ("SIGKILL", "SIGSTOP") if hasattr(signal, name)}
    return [number for number in signal.valid_signals() if number not in uncatchable]


def assert_migrate_refuses(target: Path, watched: Path, *fragments: str) -> None:
    """``migrate target`` exits 2 with every fragment in its error, and no file under ``watched`` changes."""
    before = snapshot(watched)
    result = run_cli_in_process("migrate", target)
    assert result.returncode == 2
    assert all(fragment in result.stderr for fragment in fragments), result.stderr
    assert snapshot(watched) == before


@contextmanager
def holding_the_lock(checkpoint: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """Another process holds ``checkpoint``'s migrate lock for the block, as a running migrate does: it says so
    once it holds it, and holds it until the block ends (it reads its stdin to the end, which never comes)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from scalar_scales.sources import resolve_checkpoint\n"
            "from scalar_scales.migration import checkpoint_lock\n"
            "with checkpoint_lock(resolve_checkpoint(sys.argv[1])):\n"
            "    print('locked', flush=True)\n"
            "    sys.stdin.read()\n",
            str(checkpoint),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


# Events in another process: its opens of a file, held by a lease; a file's bytes as it changes them.

Process = subprocess.Popen[str] | subprocess.Popen[bytes]


def until(event: Callable[[], bool], process: Process) -> bool:
    """Wait for ``event`` (what ``process`` does, seen from outside: a lease waited on, a file changed), polling
    it; True once it happened, False if the process ended first. Bounded by the process: its opens that a lease
    holds wait at most the kernel's lease-break-time (``/proc/sys/fs/lease-break-time``, 45 s)."""
    while not event():
        if process.poll() is not None:
            return event()
        time.sleep(0.001)
    return True


class Lease:
    """A Linux file lease on ``path`` (``fcntl(2)``, ``F_SETLEASE``), held from outside a process under test so
    that its opens of the file are events a test can wait for and hold: under a ``read`` lease, another process's
    open of the file for writing waits; under a ``write`` lease, any open does; until the lease is released (or
    the kernel's lease-break-time passes). :meth:`waited_on` says that an open waits. Only the file's owner may
    take one, on a file no other process has open for writing (for a ``write`` lease, open at all):
    :class:`BlockingIOError` otherwise."""

    def __init__(self, path: Path, kind: Literal["read", "write"] = "read") -> None:
        import fcntl  # Linux's

        self.path = path
        self._fcntl = fcntl
        self._type = fcntl.F_RDLCK if kind == "read" else fcntl.F_WRLCK
        self._fd: int | None = os.open(path, os.O_RDONLY if kind == "read" else os.O_WRONLY)
        # The kernel makes the lease's taker the file's owner, which it sends SIGIO (by default, the end of this
        # process) when an open waits on the lease; the file is then given no owner, so no signal is sent.
        previous = signal.signal(signal.SIGIO, signal.SIG_IGN)
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETLEASE, self._type)
            fcntl.fcntl(self._fd, fcntl.F_SETOWN, 0)
        except BaseException:
            os.close(self._fd)
            raise
        finally:
            signal.signal(signal.SIGIO, previous)

    def waited_on(self) -> bool:
        """Another process's open of the file waits for this lease (the kernel is breaking it)."""
        return self._fd is not None and self._fcntl.fcntl(self._fd, self._fcntl.F_GETLEASE) != self._type

    def release(self) -> None:
        """Let the opens that wait, and every later one, go on."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._fcntl.fcntl(fd, self._fcntl.F_SETLEASE, self._fcntl.F_UNLCK)
            finally:
                os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def header_bytes(path: Path) -> bytes:
    """A safetensors file's length prefix and header, as they are on disk now."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return struct.pack("<Q", length) + f.read(length)


@contextmanager
def shard_writes_held(checkpoint: Path, start: Callable[[], Process]) -> Iterator[tuple[Process, list[Lease]]]:
    """Start a migrate of ``checkpoint`` (``start()``) and hold it at its first write: from the block's start,
    each of its opens of a shard for writing waits on that shard's lease until the block releases it
    (:meth:`Lease.release`, :func:`let_edits_through`) or ends.

    config.json's lease is taken before the process starts; the shards' while the migration waits on
    config.json's check, the last file it checks before it writes (so it must have a marker to change). The block
    starts once a writer waits on a shard: the migration has checked every file, removed stale temporary files,
    and written nothing. Yields the process and the leases, in the order of :func:`shards`."""
    leases: list[Lease] = []
    try:
        with Lease(checkpoint / "config.json") as checked:
            process = start()
            assert until(checked.waited_on, process), "the migration ended before it checked config.json"
            leases = [Lease(shard) for shard in shards(checkpoint)]
        assert until(lambda: any(lease.waited_on() for lease in leases), process), "no shard was opened to write"
        yield process, leases
    finally:
        for lease in leases:
            lease.release()


def let_edits_through(leases: list[Lease], process: Process, count: int) -> Callable[[], bool]:
    """Let ``count`` shard edits of a migration held by :func:`shard_writes_held` go on, one at a time, each of a
    shard a writer already waits to open, so that no other shard changes; return the event of the last one's
    header changing on disk."""
    edited = None
    for _ in range(count):
        waiting: list[Lease] = []

        def a_writer_waits(found: list[Lease] = waiting) -> bool:
            found.extend(lease for lease in leases if lease.waited_on())
            return bool(found)

        assert until(a_writer_waits, process), "the migration ended with shards it had not edited"
        edited = header_changed(waiting[0].path)
        waiting[0].release()
    assert edited is not None, "no edit let through"
    return edited


def header_changed(path: Path) -> Callable[[], bool]:
    """The event of ``path``'s header (a shard's) changing on disk from what it is now."""
    before = header_bytes(path)
    return lambda: header_bytes(path) != before


def signals_taken_over(process: Process) -> Callable[[], bool]:
    """The event of the command's taking over SIGTERM (``/proc``'s ``SigCgt``; scalar_scales.start takes SIGINT
    just before it), after which a signal is the command's to handle, not the interpreter's default."""

    def caught() -> bool:
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
        except OSError:
            return False
        mask = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(mask.split()[1], 16) & (1 << (signal.SIGTERM - 1)))

    return caught
