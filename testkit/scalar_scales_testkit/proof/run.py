"""The test command (scripts/test.sh): the table's suites over the machine's cores, then one table of what ran.

    scripts/test.sh [--jobs N] [--fresh] [PYTEST ARGUMENTS ...]

Without pytest arguments everything runs: every suite, the generated docs' checks, the upstream patches'
checks and the manifest comparison. With them (``-k NAME``), they go to every pytest suite, the rest of that
kind is left out, and a suite where nothing is selected is reported as skipped. ``--jobs`` is how many suites
run at once (the cores this process may run on, at most 2, unless given); ``--fresh`` takes nothing from the
cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scalar_scales_testkit.proof import environments
from scalar_scales_testkit.proof.cache import ENTRIES, Cache
from scalar_scales_testkit.proof.manifest import compare, read_outcomes
from scalar_scales_testkit.proof.schedule import Node, Outcome, run_graph
from scalar_scales_testkit.proof.table import PROJECT, Suite, Table, load

__all__ = ["main"]

TIMINGS = ENTRIES.parent / "timings.json"
FIXED = {
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTEST_PLUGINS": "scalar_scales_testkit.proof.collected",
}


class Run:
    """One run of the test command: its work folder, its cache and what each suite reported."""

    def __init__(self, table: Table, work: Path, cache: Cache, pytest_args: list[str]) -> None:
        self.table = table
        self.work = work
        self.cache = cache
        self.pytest_args = pytest_args
        self.counts: dict[str, tuple[int, int, int]] = {}
        self.cached: dict[str, str] = {}
        for folder in ("artifacts", "results", "manifest", "logs", "tmp"):
            (work / folder).mkdir(parents=True, exist_ok=True)

    def environment(self, suite: Suite) -> dict[str, str]:
        return {
            **os.environ,
            **FIXED,
            "SCALAR_SCALES_ARTIFACTS": str(self.work / "artifacts"),
            "SCALAR_SCALES_RESULTS": str(self.work / "results"),
            "SCALAR_SCALES_WHEEL": str(self.work / "wheel"),
            "SCALAR_SCALES_MANIFEST_OUT": str(self.work / "manifest" / f"{suite.slug}.jsonl"),
            "SCALAR_SCALES_MANIFEST_GROUP": suite.manifest_group,
        }

    def commands(self, suite: Suite) -> list[list[str]]:
        python = str(environments.python_of(suite.env))
        if suite.is_pytest:
            # A temporary folder of its own: pytest's shared one is cleaned by whichever run starts next.
            basetemp = self.work / "tmp" / str(self.table.suites.index(suite))
            options = ["-p", "no:cacheprovider", "-q", f"--basetemp={basetemp}"]
            return [[python, "-m", "pytest", *options, *suite.pytest, *self.pytest_args]]
        values = {
            "artifacts": str(self.work / "artifacts"),
            "results": str(self.work / "results"),
            "work": str(self.work),
            "wheel": str(self.work / "wheel"),
            "python": python,
        }
        out = []
        for command in suite.run:
            words = [word.format(**values) for word in command]
            out.append(["bash", *words] if words[0].endswith(".sh") else [python, *words])
        return out

    def environment_node(self, name: str) -> Node:
        def work(log: Path, register: Callable[[subprocess.Popen[bytes]], None]) -> tuple[str, str]:
            lines: list[str] = []
            try:
                _, built = environments.build(self.table, name, lines)
            finally:
                log.write_text("\n".join(lines) + "\n")
            return "passed", "built" if built else "cached"

        environment = self.table.environments[name]
        needs = set() if environment.is_new else {f"env:{environment.base}"}
        return Node(f"env:{name}", work, needs, seconds=1.0, show=False)

    def suite_node(self, suite: Suite, needs: set[str]) -> Node:
        def work(log: Path, register: Callable[[subprocess.Popen[bytes]], None]) -> tuple[str, str]:
            venv = environments.VENVS / suite.env
            key = self.cache.key(suite, venv, self.work) if suite.cached else None
            if key is not None:
                why = self.cache.restore(suite, key, self.work)
                if why is None:
                    self.cached[suite.name] = f"reused {key[:12]}"
                    log.write_text(f"reused cache entry {key}\n")
                    return "passed", self.cached[suite.name]
                self.cached[suite.name] = f"built ({why})"
            status = 0
            with log.open("wb") as out:
                for command in self.commands(suite):
                    out.write(f"$ {' '.join(command)}\n".encode())
                    out.flush()
                    process = subprocess.Popen(
                        command,
                        cwd=PROJECT,
                        env=self.environment(suite),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                    register(process)
                    status = process.wait()
                    if status:
                        break
            recorded = self.work / "manifest" / f"{suite.slug}.jsonl"
            if suite.is_pytest or recorded.is_file():
                self.counts[suite.name] = _counts(recorded)
            if suite.is_pytest and status == 5 and self.pytest_args:
                return "skipped", "nothing selected"
            if status:
                return "failed", f"exit {status}"
            if key is not None:
                self.cache.store(suite, key, self.work)
            return "passed", ""

        return Node(suite.name, work, needs, seconds=suite.seconds)


def _counts(path: Path) -> tuple[int, int, int]:
    """(passed, skipped, failed) from a suite's manifest lines."""
    outcomes = [json.loads(line)["outcome"] for line in path.read_text().splitlines()] if path.is_file() else []
    return outcomes.count("passed"), outcomes.count("skipped"), outcomes.count("failed")


def _writers(suites: tuple[Suite, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for suite in suites:
        for write in suite.writes:
            out.setdefault(write, []).append(suite.name)
    return out


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def graph(run: Run, suites: tuple[Suite, ...]) -> dict[str, Node]:
    """The environments the suites need, and the suites, each needing its environment and its ``reads``'
    writers."""
    nodes: dict[str, Node] = {}
    for suite in suites:
        for environment in run.table.chain(suite.env):
            nodes.setdefault(f"env:{environment.name}", run.environment_node(environment.name))
    writers = _writers(suites)
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
    for suite in suites:
        needs = {f"env:{suite.env}"}
        for read in suite.reads:
            found = [name for write, names in writers.items() if _overlaps(read, write) for name in names]
            if not found:
                raise SystemExit(f"suites.toml: {suite.name!r} reads {read}, which no suite writes")
            needs.update(n for n in found if n != suite.name)
        node = run.suite_node(suite, needs)
        node.seconds = float(timings.get(suite.name, suite.seconds))
        nodes[suite.name] = node
    return nodes


def _printer(run: Run) -> Callable[[Node, Outcome, Path], None]:
    def report(node: Node, outcome: Outcome, log: Path) -> None:
        if not node.show and outcome.status == "passed" and outcome.note != "built":
            return
        counts = run.counts.get(node.name)
        tally = f", {counts[0]} passed, {counts[1]} skipped, {counts[2]} failed" if counts else ""
        note = f", {outcome.note}" if outcome.note else ""
        print(f"== {node.name}: {outcome.status} ({outcome.seconds:.0f} s, lane {outcome.lane}{tally}{note})")
        if outcome.status == "failed" and log.is_file():
            print(f"---- {node.name}: its whole output ----")
            print(log.read_text(errors="replace").rstrip())
            print(f"---- end of {node.name} ----")
        sys.stdout.flush()

    return report


def summary(run: Run, suites: tuple[Suite, ...], outcomes: dict[str, Outcome], elapsed: float) -> list[str]:
    rows = [("suite", "lane", "seconds", "passed", "skipped", "cache")]
    for suite in suites:
        outcome = outcomes.get(suite.name, Outcome("not run"))
        counts = run.counts.get(suite.name)
        rows.append(
            (
                suite.name if outcome.status in ("passed", "skipped") else f"{suite.name} [{outcome.status.upper()}]",
                str(outcome.lane or "-"),
                f"{outcome.seconds:.0f}",
                str(counts[0]) if counts else "-",
                str(counts[1]) if counts else "-",
                run.cached.get(suite.name, "-"),
            )
        )
    built = [n.removeprefix("env:") for n, o in outcomes.items() if n.startswith("env:") and o.note == "built"]
    envs = sum(o.seconds for n, o in outcomes.items() if n.startswith("env:"))
    rows.append((f"environments ({len(built)} built: {', '.join(built) or 'none'})", "-", f"{envs:.0f}", "", "", ""))
    passed = sum(c[0] for c in run.counts.values())
    skipped = sum(c[1] for c in run.counts.values())
    rows.append(("total (wall clock)", "", f"{elapsed:.0f}", str(passed), str(skipped), ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/test.sh", description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--jobs", type=int, default=min(2, len(os.sched_getaffinity(0))))
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--help-runner", action="help")
    ours, pytest_args = parser.parse_known_args(argv)
    table = load()
    full = not pytest_args
    suites = table.selected(full=full)
    if not full:
        suites = tuple(s for s in suites if s.is_pytest or s.writes)
    work = Path(tempfile.mkdtemp(prefix="scalar-scales-test.", dir=os.environ.get("TMPDIR")))
    started = time.monotonic()
    try:
        run = Run(table, work, Cache(fresh=ours.fresh), pytest_args)
        nodes = graph(run, suites)
        print(f"== {len(suites)} suites over {ours.jobs} lanes; work folder {work}")
        outcomes = run_graph(nodes, max(1, ours.jobs), work / "logs", _printer(run))
        elapsed = time.monotonic() - started
        measured = {
            s.name: round(outcomes[s.name].seconds, 1)
            for s in suites
            if outcomes[s.name].status == "passed" and not run.cached.get(s.name, "").startswith("reused")
        }
        if measured and not run.pytest_args:
            previous = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
            TIMINGS.parent.mkdir(parents=True, exist_ok=True)
            TIMINGS.write_text(json.dumps({**previous, **measured}, indent=1))
        print("\n".join(summary(run, suites, outcomes, elapsed)))
        failed = [n for n, o in outcomes.items() if o.status in ("failed", "not run")]
        if full:
            comparison = compare(read_outcomes(work / "manifest"))
            print("\n".join(comparison.lines()))
            if not comparison.clean:
                failed.append("the manifest comparison")
            subprocess.run([sys.executable, str(PROJECT / "scripts" / "upstream_status.py")], check=False)
        skipped = [s.name for s in suites if outcomes[s.name].status == "skipped"]
        if skipped:
            print(f"SKIPPED (nothing selected): {'; '.join(skipped)}")
        total = [sum(c[i] for c in run.counts.values()) for i in range(3)]
        if failed:
            print(f"FAILED: {'; '.join(failed)}")
        else:
            print("all suites passed")
        print(f"{total[0]} passed, {total[2]} failed, {total[1]} skipped")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
