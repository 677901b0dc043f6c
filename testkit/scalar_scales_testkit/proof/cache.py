"""A cache keyed by content, for what the test command makes deterministically and at some cost: the quantized
artifacts, the reference logits, the real ModelOpt exports.

A suite's key is the SHA-256 of everything that produced its output: its command, the content of its script and
of the code paths it names (``cache`` in the table), the content of what it reads, and its environment's
interpreter and installed distributions (names and versions, the torch build among them). A change to any of
them is a miss. An entry is a folder holding the suite's ``writes`` and ``MANIFEST.json`` (each file's size and
SHA-256), written last and renamed into place whole: an entry without it, or whose files do not match it, is
partial or corrupt, and is removed and rebuilt, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from scalar_scales_testkit.proof.table import PROJECT, Suite

__all__ = ["ENTRIES", "Cache", "file_digests", "tree_digest"]

ENTRIES = Path(os.environ.get("SCALAR_SCALES_CACHE", Path.home() / ".cache" / "scalar-scales")) / "outputs"
MANIFEST = "MANIFEST.json"
SKIPPED = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED)
        for name in sorted(names):
            if not name.endswith(".pyc"):
                yield Path(folder) / name


def file_digests(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` (or ``root`` itself): its path relative to ``root``, size and SHA-256."""
    out: dict[str, tuple[int, str]] = {}
    for path in _files(root):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[path.relative_to(root).as_posix() if path != root else path.name] = (
            path.stat().st_size,
            digest.hexdigest(),
        )
    return out


def tree_digest(root: Path) -> str:
    return hashlib.sha256(json.dumps(file_digests(root), sort_keys=True).encode()).hexdigest()


def environment_digest(venv: Path) -> str:
    """The interpreter and every installed distribution of ``venv``, by name and version."""
    config = (venv / "pyvenv.cfg").read_text() if (venv / "pyvenv.cfg").is_file() else ""
    version = [line for line in config.splitlines() if line.startswith("version")]
    dists = sorted(p.name for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    overlays = sorted(p.name for p in venv.glob("overlays/*"))
    return hashlib.sha256(json.dumps([version, dists, overlays]).encode()).hexdigest()


class Cache:
    """Entries under ``root``; ``fresh`` reads none (and still writes what it builds)."""

    def __init__(self, root: Path = ENTRIES, *, fresh: bool = False, project: Path = PROJECT) -> None:
        self.root = root
        self.fresh = fresh
        self.project = project

    def key(self, suite: Suite, venv: Path, work: Path) -> str:
        parts: list[object] = [suite.name, suite.run, environment_digest(venv)]
        scripts = [self.project / c[0] for c in suite.run if c and (self.project / c[0]).is_file()]
        parts += [
            (path.relative_to(self.project).as_posix(), tree_digest(path) if path.exists() else None)
            for path in [*scripts, *(self.project / p for p in suite.cache or ())]
        ]
        parts += [(read, tree_digest(work / read) if (work / read).exists() else None) for read in suite.reads]
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=list).encode()).hexdigest()[:32]

    def _entry(self, key: str) -> Path:
        return self.root / key

    def restore(self, suite: Suite, key: str, work: Path) -> str | None:
        """Copy the entry's ``writes`` into ``work``; return why it was not used (None: it was)."""
        if self.fresh:
            return "--fresh"
        entry = self._entry(key)
        if not entry.is_dir():
            return "not cached"
        manifest = entry / MANIFEST
        try:
            expected = {k: tuple(v) for k, v in json.loads(manifest.read_text()).items()}
        except (OSError, ValueError):
            shutil.rmtree(entry, ignore_errors=True)
            return "partial entry, removed"
        found = {
            f"{write}/{name}": value
            for write in suite.writes
            if (entry / "data" / write).exists()
            for name, value in file_digests(entry / "data" / write).items()
        }
        if found != expected:
            shutil.rmtree(entry, ignore_errors=True)
            return "corrupt entry, removed"
        for write in suite.writes:
            target = work / write
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(entry / "data" / write, target)
        return None

    def store(self, suite: Suite, key: str, work: Path) -> None:
        """Keep the suite's ``writes``, whole or not at all."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.root, prefix=".incoming-"))
        try:
            manifest: dict[str, tuple[int, str]] = {}
            for write in suite.writes:
                source = work / write
                if not source.exists():
                    raise FileNotFoundError(f"{suite.name}: wrote no {write}")
                shutil.copytree(source, staging / "data" / write)
                for name, value in file_digests(staging / "data" / write).items():
                    manifest[f"{write}/{name}"] = value
            (staging / MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
            entry = self._entry(key)
            shutil.rmtree(entry, ignore_errors=True)
            os.rename(staging, entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
