"""Helpers for the publishing tests: the project as a git repository holding what is on disk, checkpoint repositories.

pre-commit installs a hook from a git repository at a commit, and GitHub runs an Action from a checkout of one:
neither sees a working tree's uncommitted or untracked files. The tests must check the files as they are, so
:func:`project_snapshot` commits a copy of them (what git would track: ``ls-files -co --exclude-standard``) in a
repository of its own, and never touches the checkout's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT
from scalar_scales_testkit.broken import CORPUS, clean_checkpoint

__all__ = ["PROJECT", "broken_checkpoint", "commit_all", "git", "git_repository", "project_snapshot"]

PROJECT = Path(__file__).resolve().parents[2]
"""The checkout under test (testkit/ lives at its root)."""

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


def project_snapshot(directory: Path) -> Path:
    """A git repository at ``directory`` whose one commit holds the checkout's files as they are on disk, committed
    or not (ignored files left out, as a clone would have them)."""
    listed = git(PROJECT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for relative in filter(None, listed):
        source = PROJECT / relative
        if source.is_file():  # a tracked file deleted on disk is not in the snapshot either
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git_repository(directory)
    commit_all(directory)
    return directory


def broken_checkpoint(directory: Path) -> tuple[Path, str]:
    """The clean synthetic checkpoint with one expert's input global scale 0 (NV301, an error: vLLM's output holds
    NaN): a checkpoint ``check`` fails without ``--strict``. Returns it and the tensor the finding names."""
    checkpoint = clean_checkpoint(directory)
    tensor = CORPUS["uncalibrated-expert"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    return checkpoint, tensor
