"""The suites as a graph, run over the machine's cores: each environment is built, and each suite started, once
what it needs is there; the suite with the longest chain of work after it first.

Every node runs as its own process group, its output kept whole in a log of its own: a node that fails is
printed whole, one at a time, never interleaved with another's. Ctrl-C or SIGTERM ends every process group
still running, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Node", "Outcome", "run_graph"]


@dataclass
class Outcome:
    status: str  # passed, failed, skipped, not run
    seconds: float = 0.0
    lane: int = 0
    note: str = ""


@dataclass
class Node:
    """A unit of work: ``work(log_path, register)`` returns (status, note); ``register(process)`` records a child
    process so that an interrupt can end it."""

    name: str
    work: Callable[[Path, Callable[[subprocess.Popen[bytes]], None]], tuple[str, str]]
    needs: set[str] = field(default_factory=set)
    seconds: float = 60.0
    show: bool = True


def _priorities(nodes: dict[str, Node]) -> dict[str, float]:
    """Each node's own seconds plus the longest chain of nodes that need it, transitively."""
    needed_by: dict[str, set[str]] = {name: set() for name in nodes}
    for node in nodes.values():
        for need in node.needs:
            needed_by[need].add(node.name)
    memo: dict[str, float] = {}

    def chain(name: str) -> float:
        if name not in memo:
            memo[name] = nodes[name].seconds + max((chain(n) for n in needed_by[name]), default=0.0)
        return memo[name]

    return {name: chain(name) for name in nodes}


def run_graph(
    nodes: dict[str, Node], jobs: int, logs: Path, report: Callable[[Node, Outcome, Path], None]
) -> dict[str, Outcome]:
    """Run every node whose needs passed; a node whose need failed is not run. ``report`` is called once per
    node as it ends, under a lock (so what it prints is never interleaved)."""
    for node in nodes.values():
        unknown = node.needs - set(nodes)
        if unknown:
            raise ValueError(f"{node.name}: needs {sorted(unknown)}, which is no node")
    priority = _priorities(nodes)
    order = {name: number for number, name in enumerate(nodes)}
    outcomes: dict[str, Outcome] = {}
    running: set[str] = set()
    processes: dict[int, subprocess.Popen[bytes]] = {}
    lanes = list(range(jobs, 0, -1))
    lock = threading.Condition()
    stopping = threading.Event()
    logs.mkdir(parents=True, exist_ok=True)

    def register(process: subprocess.Popen[bytes]) -> None:
        with lock:
            processes[process.pid] = process
        if stopping.is_set():
            _end(process)

    def worker(node: Node, lane: int) -> None:
        log = logs / f"{order[node.name]:03d}-{_slug(node.name)}.log"
        started = time.monotonic()
        try:
            status, note = node.work(log, register)
        except Exception as error:  # a runner bug or an OS error: the node failed, the run goes on
            status, note = "failed", f"{type(error).__name__}: {error}"
            with log.open("a") as f:
                f.write(f"\n{note}\n")
        outcome = Outcome(status, time.monotonic() - started, lane, note)
        with lock:
            running.discard(node.name)
            outcomes[node.name] = outcome
            lanes.append(lane)
            report(node, outcome, log)
            lock.notify_all()

    def ready() -> list[str]:
        waiting = [n for n in nodes if n not in outcomes and n not in running]
        out = []
        for name in waiting:
            needs = nodes[name].needs
            if any(outcomes.get(n) and outcomes[n].status not in ("passed", "skipped") for n in needs):
                outcomes[name] = Outcome("not run", note="needs " + ", ".join(sorted(needs)))
                report(nodes[name], outcomes[name], logs / "none")
                continue
            if all(n in outcomes for n in needs):
                out.append(name)
        return sorted(out, key=lambda n: -priority[n])

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum: int, frame: object) -> None:
        stopping.set()
        with lock:
            for process in processes.values():
                _end(process)
        raise KeyboardInterrupt

    for s in previous:
        signal.signal(s, interrupted)
    threads: list[threading.Thread] = []
    try:
        with lock:
            while len(outcomes) < len(nodes):
                for name in ready():
                    if not lanes:
                        break
                    running.add(name)
                    thread = threading.Thread(target=worker, args=(nodes[name], lanes.pop()), daemon=True)
                    threads.append(thread)
                    thread.start()
                if len(outcomes) < len(nodes):
                    lock.wait(timeout=1.0)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if stopping.is_set():
            for thread in threads:
                thread.join(timeout=30)
    return outcomes


def _end(process: subprocess.Popen[bytes]) -> None:
    """End ``process`` and its whole group (it was started in a session of its own)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:60]
