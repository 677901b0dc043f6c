"""Fixtures that quantize the toy MoE with real llm-compressor, once per session, or take what the run wrote.

The test command writes the round trip's artifacts once per producer environment (scripts/make_artifacts.py):
the toy in bf16, and its NVFP4 presets, legacy and format 2, through ``RUN_SAVE_PATH``. Where
``SCALAR_SCALES_ARTIFACTS`` holds this environment's (``scalar_scales_testkit.producer.run_artifacts``), those
are the artifacts these fixtures hand out, and the tests check them; anything else (another save path) is
quantized here, from the same bf16 folder. Without them (pytest run by hand) everything is quantized here.

Artifacts are built on first request and cached by (scheme, patched, save path). Two quantizations of the same
bf16 checkpoint with the same data are deterministic on the CPU, which the tests rely on (and check, through the
byte-identity assertions). The run's folders are read by other suites at the same time: every folder handed out is
read only (a test that changes files works on a copy), and the session fails if one changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("llmcompressor", reason="producer tests run in the producer environments")

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.producer import RUN_SAVE_PATH, RunArtifacts, quantize_to, run_artifacts

Quantize = Callable[..., Path]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.producer)


@pytest.fixture(autouse=True)
def _unpatched_between_tests():
    """Every test starts and ends with compressed-tensors unpatched."""
    compressed_tensors_patch.revert()
    yield
    compressed_tensors_patch.revert()


def _digests(folders: list[Path]) -> dict[str, str]:
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="session")
def run_written() -> Iterator[RunArtifacts | None]:
    """What the run wrote in this environment, or None; held unchanged to the end of the session."""
    written = run_artifacts()
    if written is None:
        yield None
        return
    before = _digests(written.folders())
    yield written
    after = _digests(written.folders())
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    if changed:
        pytest.fail(f"the run's artifacts are read only, and a test changed them: {', '.join(changed)}")


@pytest.fixture(scope="session")
def bf16_dir(run_written: RunArtifacts | None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy in bf16: the one the run's artifacts were quantized from (read only), or one built here."""
    if run_written is not None:
        return run_written.bf16
    return toy_moe.build_toy_checkpoint(tmp_path_factory.mktemp("toy") / "bf16")


@pytest.fixture(scope="session")
def artifact(bf16_dir: Path, run_written: RunArtifacts | None, tmp_path_factory: pytest.TempPathFactory) -> Quantize:
    """``artifact(scheme, patched=..., save_path=...)``: a cached quantized checkpoint folder, read only.

    The default save path is the one scripts/make_artifacts.py writes through (``RUN_SAVE_PATH``): the run's
    artifact where it wrote it, else one quantized here."""
    cache: dict[tuple[str, bool, str], Path] = {}
    root = tmp_path_factory.mktemp("artifacts")

    def get(scheme: str, *, patched: bool, save_path: str = RUN_SAVE_PATH) -> Path:
        key = (scheme, patched, save_path)
        if key not in cache:
            written = run_written.folder(scheme, patched=patched) if run_written is not None else None
            if written is not None and save_path == RUN_SAVE_PATH:
                cache[key] = written
                return written
            out = root / f"{scheme}-{'format2' if patched else 'legacy'}-{save_path}"
            was_applied = compressed_tensors_patch.is_applied()
            compressed_tensors_patch.revert()
            try:
                cache[key] = quantize_to(bf16_dir, out, scheme, patched=patched, save_path=save_path)
            finally:
                if was_applied:
                    compressed_tensors_patch.apply()
        return cache[key]

    return get
