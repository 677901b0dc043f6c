"""Helpers for the publishing tests: the project as a git repository holding what is on disk, its wheel, checkpoint
repositories.

pre-commit installs a hook from a git repository at a commit, and GitHub runs an Action from a checkout of one:
neither sees a working tree's uncommitted or untracked files. The tests must check the files as they are, so
:func:`project_snapshot` commits a copy of them (what git would track: ``ls-files -co --exclude-standard``) in a
repository of its own, and never touches the checkout's.

The wheel is built from such a copy too (:func:`build_wheel`): once per run of the test command
(scripts/build_wheel.py, into ``$SCALAR_SCALES_WHEEL``), and every test that installs or inspects it takes that one
(:func:`project_wheel`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = [
    "PROJECT",
    "WHEEL_ENV",
    "broken_checkpoint",
    "build_wheel",
    "commit_all",
    "copy_project",
    "git",
    "git_repository",
    "project_snapshot",
    "project_wheel",
]

PROJECT = Path(__file__).resolve().parents[2]
"""The checkout under test (testkit/ lives at its root)."""

WHEEL_ENV = "SCALAR_SCALES_WHEEL"
"""A folder holding the project's wheel, and nothing else named ``scalar_scales-*.whl``: the test command's."""

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "scalar-scales tests",
    "GIT_AUTHOR_EMAIL": "tests@scalar-scales.invalid",
    "GIT_COMMITTER_NAME": "scalar-scales tests",
    "GIT_COMMITTER_EMAIL": "tests@scalar-scales.invalid",
}


def git(repository: Path, *args: str) -> str:
    """Run git in ``repository`` with a fixed identity and no user or system configuration (no hooks, no signing,
    no template a developer's machine adds), and return its output."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    result = subprocess.run(["git", "-C", str(repository), *args], env=env, capture_output=True, text=True, timeout=60)
    if result.returncode:
        raise RuntimeError(f"git {' '.join(args)} in {repository}: {result.stderr.strip()}")
    return result.stdout


def git_repository(directory: Path) -> Path:
    """A new git repository at ``directory`` (made if missing), with a user name and e-mail of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    git(directory, "init", "-q", "-b", "main")
    git(directory, "config", "user.email", GIT_IDENTITY["GIT_AUTHOR_EMAIL"])
    git(directory, "config", "user.name", GIT_IDENTITY["GIT_AUTHOR_NAME"])
    return directory


def commit_all(repository: Path, message: str = "snapshot") -> str:
    """Commit every file in ``repository``; return the commit."""
    git(repository, "add", "-A")
    git(repository, "commit", "-q", "--no-verify", "-m", message)
    return git(repository, "rev-parse", "HEAD").strip()


def copy_project(directory: Path) -> Path:
    """A copy at ``directory`` of the checkout's files as they are on disk, committed or not (ignored files left
    out, as a clone would have them: no build/, *.egg-info or __pycache__)."""
    listed = git(PROJECT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for relative in filter(None, listed):
        source = PROJECT / relative
        if source.is_file():  # a tracked file deleted on disk is not in the copy either
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return directory


def project_snapshot(directory: Path) -> Path:
    """A git repository at ``directory`` whose one commit holds the checkout's files as they are on disk
    (:func:`copy_project`)."""
    copy_project(directory)
    git_repository(directory)
    commit_all(directory)
    return directory


def build_wheel(out: Path) -> Path:
    """Build the project's wheel into ``out`` and return it; any other ``scalar_scales-*.whl`` there is removed.

    Built from a copy of the project's files (:func:`copy_project`; a build writes build/ and *.egg-info beside
    its sources, and takes what it finds there), by this interpreter's pip and setuptools: ``pip wheel --no-deps
    --no-build-isolation``, so nothing is fetched."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scalar-scales-wheel-") as temporary:
        source, built = copy_project(Path(temporary) / "source"), Path(temporary) / "wheel"
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        result = subprocess.run([*command, "-w", str(built), str(source)], capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"pip wheel {PROJECT} failed:\n{result.stdout}{result.stderr}")
        (wheel,) = built.glob("scalar_scales-*.whl")
        for stale in out.glob("scalar_scales-*.whl"):
            stale.unlink()
        return Path(shutil.move(wheel, out / wheel.name))


def project_wheel(build_dir: Path) -> Path:
    """The project's wheel: the one in ``$SCALAR_SCALES_WHEEL`` where it is set (the test command builds it once
    per run, with scripts/build_wheel.py), else one built into ``build_dir`` (:func:`build_wheel`)."""
    folder = os.environ.get(WHEEL_ENV)
    if not folder:
        return build_wheel(build_dir)
    found = sorted(Path(folder).glob("scalar_scales-*.whl"))
    if len(found) != 1:
        raise RuntimeError(
            f"{WHEEL_ENV}={folder} holds {len(found)} scalar_scales-*.whl, not one: run scripts/build_wheel.py "
            f"{folder}, or unset {WHEEL_ENV} to build one"
        )
    return found[0]


def broken_checkpoint(directory: Path) -> tuple[Path, str]:
    """The clean synthetic checkpoint with one expert's input global scale 0 (NV301, an error: vLLM's output holds
    NaN): a checkpoint ``check`` fails without ``--strict``. Returns it and the tensor the finding names."""
    from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT  # the product and the corpus: not for build_wheel
    from scalar_scales_testkit.broken import CORPUS, clean_checkpoint

    checkpoint = clean_checkpoint(directory)
    tensor = CORPUS["uncalibrated-expert"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    return checkpoint, tensor
