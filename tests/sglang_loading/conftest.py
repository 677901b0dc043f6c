"""Fixtures for loading the round trip's MLA toys with SGLang's own model loader (sglang environment).

Loads run in loader processes (load_artifact.py ``--serve``), as SGLang's
scheduler loads a model in a process of its own, through ``get_model`` on the
CPU (``scalar_scales_testkit.sglang_cpu`` says what the CPU is given). What a
load shares with the next in one process is what is process-global, so there
is one loader process per set of it: with the plugin loaded or not (SGLang
loads plugins once per process, and the patch acts at import) and the
environment (which holds the ``PYTHONPATH`` of a patched SGLang). Between two
loads the process takes down what the first set up, and each load's log is
its own (``scalar_scales_testkit.worker``); a test whose claim is about a
process's first load asks for a process of its own. The
artifacts are the DeepSeek-V3 and GLM-4-MoE-Lite toys' (``scalar_scales_testkit.toys``)
as SGLang serves those models, ``kv_b_proj`` in bf16 (scripts/make_artifacts.py
``--ignore``; scripts/test.sh writes them under toys/NAME-sglang), written by
compressed-tensors 0.19.0.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sglang.srt", reason="SGLang tests run in the sglang environment")

from scalar_scales_testkit.roundtrip import Artifact, Result, artifacts_root, installed_versions
from scalar_scales_testkit.sglang_cpu import MLA_A_PROJECTIONS, MODELS
from scalar_scales_testkit.vllm_layers import free_port
from scalar_scales_testkit.worker import Worker, Workers

LOAD = Path(__file__).with_name("load_artifact.py")
PRODUCER = "0.19.0"
SCHEME = "NVFP4"
FIXES = {False: "none", True: "sglang_patch plugin"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.sglang)


@pytest.fixture(scope="session")
def artifact() -> Callable[[str, str], Path]:
    """``artifact("deepseek-v3", "legacy")``: that toy's NVFP4 artifact of that form."""
    return lambda toy, form: artifacts_root() / "toys" / f"{toy}-sglang" / f"ct-{PRODUCER}" / f"{SCHEME}-{form}"


def _loader(workers: Workers, plugins: bool, env: dict[str, str] | None, *, own: bool) -> Worker:
    """The loader process of that plugin setting and environment, pytest's name of the running test aside (it
    changes with every test, and only test utilities read it)."""
    command = [sys.executable, str(LOAD), "--serve", *(["--plugins"] if plugins else [])]
    inherited = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}
    environment = {**inherited, "OMP_NUM_THREADS": "1", **(env or {})}
    return workers.own(command, environment) if own else workers.shared(command, environment)


def _load_in(worker: Worker, path: Path, draft: bool = False, weights: bool = False) -> dict[str, Any]:
    request = {"artifact": str(path), "port": free_port(), "draft": draft, "weights": weights}
    reply = worker.request(request, timeout=600)
    if reply.retried_after:  # a load that ends a process only after others is state they leave: say so
        warnings.warn(f"{path}: loaded again in a new process: {reply.retried_after}", stacklevel=2)
    assert reply.failure is None and reply.result is not None, f"{reply.failure}\n{reply.log[-3000:]}"
    return {**reply.result, "log": reply.log, "process": reply.pid, "loads_before": reply.served_before}


@pytest.fixture(scope="session")
def loaders() -> Iterator[Workers]:
    """The session's loader processes, all ended when it ends."""
    with Workers() as workers:
        yield workers


@pytest.fixture(scope="session")
def load(loaders: Workers) -> Callable[..., dict[str, Any]]:
    """``load(path, plugins=False, env={}, draft=False, weights=False)``: what SGLang did with the artifact (as a
    draft model where ``draft``; with how far the weights it computes with are from the reference's where
    ``weights``), as load_artifact.py prints it, and its log as ``log``; loaded in the session's loader process of
    that plugin setting and environment, named as ``process``, after its ``loads_before`` loads."""
    return lambda path, plugins=False, env=None, draft=False, weights=False: _load_in(
        _loader(loaders, plugins, env, own=False), path, draft, weights
    )


@pytest.fixture
def loader_process(loaders: Workers) -> Iterator[Callable[..., Callable[[Path], dict[str, Any]]]]:
    """``loader_process(plugins=False, env={})``: ``load`` in a new loader process of the test's own, told to end
    after the test (and waited for with the session's); its first load is the process's first, and its log
    begins with what the process wrote as it started."""
    started: list[Worker] = []

    def start(plugins: bool = False, env: dict[str, str] | None = None) -> Callable[[Path], dict[str, Any]]:
        started.append(worker := _loader(loaders, plugins, env, own=True))
        return lambda path: _load_in(worker, path)

    yield start
    for worker in started:
        worker.close(wait=False)


@pytest.fixture(scope="session")
def observed(
    load: Callable[..., dict[str, Any]], artifact: Callable[[str, str], Path]
) -> Callable[..., dict[str, Any]]:
    """``observed("deepseek-v3", "legacy", plugins=False)``: what SGLang did with that artifact, and how far the
    weights it computes with are from the reference's where it loads, loaded once per session and recorded for
    docs/compatibility.md."""
    cache: dict[tuple[str, str, bool], dict[str, Any]] = {}

    def get(toy: str, form: str, plugins: bool = False) -> dict[str, Any]:
        if (toy, form, plugins) not in cache:
            path = artifact(toy, form)
            cache[toy, form, plugins] = found = load(path, plugins=plugins, weights=True)
            consumer = f"SGLang {version('sglang')} {MODELS[toy]}"
            error = found["error"].splitlines()[0] if found["error"] else None
            result = Result(consumer, FIXES[plugins], Artifact(PRODUCER, SCHEME, form, path), found["loaded"], error)
            result.details = {"architecture": MODELS[toy], "fused": list(MLA_A_PROJECTIONS), **found.get("weights", {})}
            result.record("sglang", versions=installed_versions() | {"sglang": version("sglang")})
        return cache[toy, form, plugins]

    return get


@pytest.fixture(scope="session")
def loader_checkpoint(
    tmp_path_factory: pytest.TempPathFactory, artifact: Callable[[str, str], Path]
) -> Callable[[str, str], tuple[Path, dict[str, float]]]:
    """``loader_checkpoint("kimi-k3", "legacy, differing")``: that loader's checkpoint of that form
    (``scalar_scales_testkit.sglang_loaders``), written once per session, and its first attention's global
    scales by name."""
    from scalar_scales_testkit.sglang_loaders import LOADERS, NVFP4_DROPPED, write_checkpoint

    loaders = LOADERS | NVFP4_DROPPED
    root = tmp_path_factory.mktemp("loaders")
    cache: dict[tuple[str, str], tuple[Path, dict[str, float]]] = {}

    def get(name: str, form: str) -> tuple[Path, dict[str, float]]:
        if (name, form) not in cache:
            loader, shape = loaders[name], form.split(",")[0]
            out = root / f"{name}-{form.replace(', ', '-')}"
            toy = artifact(loader.toy, shape) if loader.toy else None
            factor = 2.0 if form.endswith("differing") else 1.0
            cache[name, form] = (
                out,
                write_checkpoint(out, artifact("deepseek-v3", shape), loader, toy=toy, kv_a_factor=factor),
            )
        return cache[name, form]

    return get


@pytest.fixture(scope="session")
def loader_observed(
    load: Callable[..., dict[str, Any]], loader_checkpoint: Callable[[str, str], tuple[Path, dict[str, float]]]
) -> Callable[[str, str, bool], tuple[dict[str, Any], dict[str, float]]]:
    """``loader_observed("kimi-k3", "legacy", plugins)``: what SGLang did with that loader's checkpoint of that
    form (as a draft where the loader's model is one), loaded once per session, and the checkpoint's scales;
    recorded for ``check`` and ``migrate`` where :func:`_recorded` says."""
    from scalar_scales_testkit.sglang_loaders import LOADERS, NVFP4_DROPPED

    loaders = LOADERS | NVFP4_DROPPED
    cache: dict[tuple[str, str, bool], tuple[dict[str, Any], dict[str, float]]] = {}

    def get(name: str, form: str, plugins: bool) -> tuple[dict[str, Any], dict[str, float]]:
        if (name, form, plugins) not in cache:
            path, scales = loader_checkpoint(name, form)
            cache[name, form, plugins] = found = (load(path, plugins=plugins, draft=loaders[name].draft), scales)
            if _recorded(name, form):
                _record_loader(name, Artifact(PRODUCER, SCHEME, form, path), plugins, *found)
        return cache[name, form, plugins]

    return get


def _recorded(name: str, form: str) -> bool:
    """Which loads of the loaders' checkpoints are observations of SGLang as released or with the plugin: those of
    the loaders in ``LOADERS`` (LongCat's NextN drops an NVFP4 layer before it fuses) but the toys' own classes,
    whose whole artifacts ``observed`` records in every form, and of the forms whose parts' scales are equal (an
    observation is about a shape of scale); none where SGLang is the one patched upstream, which is neither."""
    from scalar_scales_testkit.sglang_loaders import LOADERS

    return name in LOADERS and name not in MODELS and form in ("legacy", "format2") and not UPSTREAM


UPSTREAM = bool(os.environ.get("SCALAR_SCALES_SGLANG_UPSTREAM"))
"""SGLang patched with upstream/sglang.patch (scripts/verify_sglang_patch.sh)."""


def _record_loader(
    name: str, artifact: Artifact, plugins: bool, found: dict[str, Any], scales: dict[str, float]
) -> None:
    """A loader's load as docs/compatibility.md's SGLang rows record theirs, as the model class SGLang loaded it
    as (a draft's NextN class, which is no class config.json names); ``loader`` marks it one of
    ``scalar_scales_testkit.sglang_loaders``', whose rows docs/sglang.md shows."""
    from scalar_scales_testkit.sglang_loaders import LOADERS, LOADS, outcome

    architecture = found["architecture"]
    error = found["error"].splitlines()[0] if found["error"] else None
    result = Result(f"SGLang {version('sglang')} {architecture}", FIXES[plugins], artifact, found["loaded"], error)
    result.scales_equal_disk = outcome(found, scales) == LOADS if found["loaded"] else None
    result.details = {
        "architecture": architecture,
        "fused": list(MLA_A_PROJECTIONS),
        "loader": LOADERS[name].function,
        "draft": LOADERS[name].draft,
    }
    result.record("sglang", versions=installed_versions() | {"sglang": version("sglang")})


@pytest.fixture
def copied(tmp_path: Path) -> Callable[[Path], Path]:
    """A copy of an artifact, to change."""
    return lambda path: Path(shutil.copytree(path, tmp_path / path.name))
