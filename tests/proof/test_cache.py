"""The content-keyed cache of what the test command makes at some cost: a key covers everything that produced an
entry, and an entry is used only whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scalar_scales_testkit.proof.cache import Cache
from scalar_scales_testkit.proof.table import PROJECT, load

SUITE = "artifacts, compressed-tensors 0.19.0"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the code the artifacts suite's key covers."""
    suite = next(s for s in load().suites if s.name == SUITE)
    root = tmp_path / "project"
    for path in [suite.run[0][0], *(suite.cache or ())]:
        source = PROJECT / path
        if source.is_dir():
            shutil.copytree(source, root / path, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / path)
    return root


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    folder = tmp_path / "venv"
    (folder / "lib" / "python3.11" / "site-packages" / "torch-2.13.0+cpu.dist-info").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("version = 3.11.7\n")
    return folder


def suite():
    return next(s for s in load().suites if s.name == SUITE)


def key(project: Path, venv: Path, work: Path) -> str:
    return Cache(project.parent / "entries", project=project).key(suite(), venv, work)


def test_a_change_to_the_producer_patch_misses_the_cache(project, venv, tmp_path):
    before = key(project, venv, tmp_path)
    patch = project / "compressed_tensors_patch" / "scales.py"
    patch.write_text(patch.read_text() + "\n# changed\n")
    assert key(project, venv, tmp_path) != before


def test_a_change_to_the_recipe_or_the_seeds_misses_the_cache(project, venv, tmp_path):
    before = key(project, venv, tmp_path)
    toy = project / "compressed_tensors_patch" / "toy_moe.py"
    text = toy.read_text()
    assert "seed: int = 0" in text
    toy.write_text(text.replace("seed: int = 0", "seed: int = 1", 1))
    assert key(project, venv, tmp_path) != before


def test_another_torch_build_misses_the_cache(project, venv, tmp_path):
    before = key(project, venv, tmp_path)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0+cpu.dist-info").rename(site / "torch-2.13.0+cu130.dist-info")
    assert key(project, venv, tmp_path) != before


def test_the_same_code_and_packages_hit_the_same_key(project, venv, tmp_path):
    assert key(project, venv, tmp_path) == key(project, venv, tmp_path)


def stored(tmp_path: Path) -> tuple[Cache, str, Path]:
    work = tmp_path / "work"
    for write in suite().writes:
        (work / write).mkdir(parents=True)
        (work / write / "model.safetensors").write_bytes(b"weights")
    cache = Cache(tmp_path / "entries")
    cache.store(suite(), "k" * 32, work)
    shutil.rmtree(work)
    return cache, "k" * 32, work


def test_an_entry_restores_every_file_it_holds(tmp_path):
    cache, entry, work = stored(tmp_path)
    assert cache.restore(suite(), entry, work) is None
    assert all((work / write / "model.safetensors").read_bytes() == b"weights" for write in suite().writes)


def test_a_corrupt_entry_is_detected_removed_and_not_used(tmp_path):
    cache, entry, work = stored(tmp_path)
    (tmp_path / "entries" / entry / "data" / suite().writes[0] / "model.safetensors").write_bytes(b"weightz")
    assert cache.restore(suite(), entry, work) == "corrupt entry, removed"
    assert not (tmp_path / "entries" / entry).exists() and not work.exists()


def test_a_partial_entry_without_its_manifest_is_removed_and_not_used(tmp_path):
    cache, entry, work = stored(tmp_path)
    (tmp_path / "entries" / entry / "MANIFEST.json").unlink()
    assert cache.restore(suite(), entry, work) == "partial entry, removed"


def test_a_missing_file_makes_an_entry_corrupt(tmp_path):
    cache, entry, work = stored(tmp_path)
    (tmp_path / "entries" / entry / "data" / suite().writes[-1] / "model.safetensors").unlink()
    assert cache.restore(suite(), entry, work) == "corrupt entry, removed"


def test_fresh_takes_nothing_from_the_cache(tmp_path):
    _, entry, work = stored(tmp_path)
    assert Cache(tmp_path / "entries", fresh=True).restore(suite(), entry, work) == "--fresh"
