"""`check --staged`: the checkpoint as git's staging area holds it (:mod:`scalar_scales.sources.staged`).

tests/publishing/test_pre_commit.py runs it as the pre-commit hook, in real commits. These run it, with real git,
where a commit cannot take it: a shard staged as a Git LFS pointer (what git stages for a file Git LFS tracks; the
pointer and the object are written here as git-lfs writes them, so no git-lfs is needed), and a merge conflict.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.publishing import broken_checkpoint, commit_all, git, git_repository

BROKEN_SHARD = "model-00003-of-00003.safetensors"
"""The shard of :func:`broken_checkpoint` that holds its finding (NV301)."""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository whose one commit holds the broken checkpoint."""
    repository = git_repository(tmp_path / "model")
    broken_checkpoint(repository)
    commit_all(repository, "checkpoint")
    return repository


def stage_as_lfs_pointer(repository: Path, name: str, store: Path | None) -> str:
    """Stage the file ``name`` as Git LFS does, its pointer (which the working tree then holds too, as a clone not
    pulled does), its content put in ``store``'s ``objects`` (none where ``store`` is None); its oid."""
    shard = repository / name
    content = shard.read_bytes()
    oid = hashlib.sha256(content).hexdigest()
    if store is not None:
        stored = store / "objects" / oid[:2] / oid[2:4] / oid
        stored.parent.mkdir(parents=True)
        stored.write_bytes(content)
    shard.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n")
    git(repository, "add", name)
    return oid


@pytest.mark.parametrize("storage", [None, "lfs-elsewhere"])
def test_a_shard_staged_as_a_git_lfs_pointer_is_read_from_the_lfs_store(repository, tmp_path, storage):
    """A commit of a Git LFS file holds its pointer, and publishes the object in the clone's store (``.git/lfs``,
    or where ``lfs.storage`` says): that object is the shard checked, not the pointer."""
    store = repository / ".git" / "lfs"
    if storage is not None:
        store = tmp_path / storage
        git(repository, "config", "lfs.storage", str(store))
    stage_as_lfs_pointer(repository, BROKEN_SHARD, store)
    result = run_cli_in_process("check", "--staged", repository)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "NV301" in result.stdout
    assert any(BROKEN_SHARD in line and "is 0" in line for line in result.stdout.splitlines())


def test_a_staged_git_lfs_pointer_whose_object_is_not_in_the_store_is_refused_saying_to_fetch(repository):
    """A clone made without fetching Git LFS objects stages pointers whose objects it lacks: the file the commit
    publishes cannot be read, and the line says how to get it."""
    oid = stage_as_lfs_pointer(repository, BROKEN_SHARD, None)
    result = run_cli_in_process("check", "--staged", repository)
    store = repository / ".git" / "lfs" / "objects"
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales: error: {repository / BROKEN_SHARD}: is staged as a Git LFS pointer, and its object "
        f"(sha256:{oid[:12]}...) is not in {store}: run git lfs fetch\n"
    )


def test_a_file_in_a_merge_conflict_is_refused_naming_it(repository):
    """A conflicted file has three entries in the staging area and none a commit would hold."""
    config = repository / "config.json"
    text = config.read_text()
    git(repository, "checkout", "-q", "-b", "other")
    config.write_text(text.replace("{", '{"note": "other", ', 1))
    commit_all(repository, "other")
    git(repository, "checkout", "-q", "main")
    config.write_text(text.replace("{", '{"note": "main", ', 1))
    commit_all(repository, "main")
    with pytest.raises(RuntimeError):  # the merge stops on the conflict
        git(repository, "merge", "-q", "other")
    result = run_cli_in_process("check", "--staged", repository)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"scalar-scales: error: {config}: has a merge conflict in git's staging area: resolve it, then git add it\n"
    )


@pytest.mark.parametrize("output", [["--json"], ["--output-format", "sarif"]])
def test_nothing_to_check_is_said_on_stderr_where_stdout_holds_a_document(repository, output):
    (repository / "README.md").write_text("changed\n")
    git(repository, "add", "README.md")
    result = run_cli_in_process("check", "--staged", *output, repository)
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == f"{repository}: nothing to check: the staged changes touch none of its files\n"
