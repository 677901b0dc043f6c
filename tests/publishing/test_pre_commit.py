"""The pre-commit hook (`.pre-commit-hooks.yaml`), run by real pre-commit on real git repositories.

pre-commit builds the hook's environment from a git repository at a commit, as it does for users: here, a commit
of the checkout's files as they are on disk (``project_snapshot``), so the test checks what is being changed. Its
environments are cached in one folder for the module (the first build pip-installs the project, a few seconds).
These tests install the project from source on purpose, not the run's wheel: pre-commit installs a Python hook
with ``pip install .`` in the hook's repository, and `try-repo` does so each time, in a store of its own.
The configuration users copy is docs/ci.md's own snippet, with its ``repo`` and ``rev`` pointed at the snapshot.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from scalar_scales.sources.staged import is_checkpoint_file
from scalar_scales_testkit.broken import clean_checkpoint
from scalar_scales_testkit.publishing import (
    PROJECT,
    broken_checkpoint,
    commit_all,
    git,
    git_repository,
    project_snapshot,
)

HOOK_ID = "scalar-scales-check"


@pytest.fixture(scope="module")
def hook_repository(tmp_path_factory) -> tuple[Path, str]:
    """The project as pre-commit fetches it: a git repository, and the commit to install the hook from."""
    repository = project_snapshot(tmp_path_factory.mktemp("project"))
    return repository, git(repository, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def pre_commit(repository: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=repository,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def documented_config(hook_repository: tuple[Path, str]) -> dict:
    """docs/ci.md's `.pre-commit-config.yaml` snippet, its ``repo`` and ``rev`` the snapshot's."""
    text = (PROJECT / "docs" / "ci.md").read_text()
    snippet = next(block for block in re.findall(r"```yaml\n(.*?)```", text, re.S) if "repos:" in block)
    config = yaml.safe_load(snippet)
    repository, commit = hook_repository
    config["repos"][0].update(repo=str(repository), rev=commit)
    return config


def checkpoint_repository(root: Path, broken: bool, config: dict | None = None, folder: str = ".") -> Path:
    """A model repository (config.json, index, three shards) committed in git, with ``config`` as its
    `.pre-commit-config.yaml`; the checkpoint broken (NV301, an error) or clean."""
    repository = git_repository(root)
    target = repository / folder
    if broken:
        broken_checkpoint(target)
    else:
        clean_checkpoint(target)
    if config is not None:
        (repository / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    commit_all(repository, "checkpoint")
    return repository


def shows_the_finding(output: str) -> bool:
    """The report names the rule, and on one line the shard, the tensor and its value (its layout is check's)."""
    tensor = "model.layers.1.mlp.experts.2.down_proj.input_global_scale"
    return "NV301" in output and any(
        "model-00003-of-00003.safetensors" in line and tensor in line and "is 0" in line for line in output.splitlines()
    )


def test_the_hook_is_what_docs_ci_md_says():
    """The hook's shape is a promise to every repository that uses it: one id, the checkpoint as one unit, as the
    commit holds it, on every commit (pre-commit never passes a hook the files a commit deletes, and with
    `always_run` a `files` pattern would change nothing)."""
    (hook,) = yaml.safe_load((PROJECT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == HOOK_ID
    assert (hook["entry"], hook["language"], hook["args"]) == ("scalar-scales check --staged", "python", ["."])
    assert hook["pass_filenames"] is False and hook["require_serial"] is True and hook["always_run"] is True
    assert "files" not in hook


@pytest.mark.parametrize(
    ("path", "runs"),
    [
        ("model-00001-of-00003.safetensors", True),
        ("model.safetensors", True),
        ("model.safetensors.index.json", True),
        ("config.json", True),
        ("hf_quant_config.json", True),
        ("models/llama/config.json", True),
        ("models/llama/model-00002-of-00003.safetensors", True),
        ("README.md", False),
        ("generation_config.json", False),
        ("tokenizer.json", False),
        ("model.safetensors.bak", False),
        ("myconfig.json", False),
    ],
)
def test_the_hook_runs_for_the_files_check_reads_and_no_other(path, runs):
    """The hook runs on every commit, and `check --staged` checks the checkpoint folder's files where the staged
    changes touch one of them that `check` reads (a file of that folder: its name decides), and no other."""
    assert is_checkpoint_file(PurePosixPath(path).name) is runs


def test_try_repo_fails_on_a_broken_checkpoint_showing_the_finding(tmp_path, hook_repository, pre_commit_home):
    repository = checkpoint_repository(tmp_path / "model", broken=True)
    result = pre_commit(repository, pre_commit_home, "try-repo", str(hook_repository[0]), HOOK_ID, "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Failed" in result.stdout
    assert shows_the_finding(result.stdout)


def test_try_repo_passes_a_clean_checkpoint(tmp_path, hook_repository, pre_commit_home):
    repository = checkpoint_repository(tmp_path / "model", broken=False)
    result = pre_commit(repository, pre_commit_home, "try-repo", str(hook_repository[0]), HOOK_ID, "--all-files")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"scalar-scales check .*Passed", result.stdout)


def test_the_documented_config_refuses_a_commit_that_breaks_the_checkpoint(tmp_path, hook_repository, pre_commit_home):
    """As users have it: docs/ci.md's config, `pre-commit install`, then `git commit` of a shard that breaks it."""
    repository = checkpoint_repository(tmp_path / "model", broken=False, config=documented_config(hook_repository))
    assert pre_commit(repository, pre_commit_home, "install").returncode == 0
    head = git(repository, "rev-parse", "HEAD")
    clean = repository / "model-00003-of-00003.safetensors"
    broken, _ = broken_checkpoint(tmp_path / "broken")
    clean.write_bytes((broken / clean.name).read_bytes())
    git(repository, "add", clean.name)
    env = {**os.environ, "PRE_COMMIT_HOME": str(pre_commit_home), "PRE_COMMIT_COLOR": "never"}
    commit = subprocess.run(
        ["git", "-C", str(repository), "commit", "-m", "break it"], env=env, capture_output=True, text=True, timeout=300
    )
    assert commit.returncode != 0
    assert "NV301" in commit.stdout + commit.stderr
    assert git(repository, "rev-parse", "HEAD") == head


def test_the_hook_is_skipped_when_no_checkpoint_file_changed(tmp_path, hook_repository, pre_commit_home):
    """A commit of the README of a repository whose checkpoint is broken is not held up by the hook, nor does it
    cost a check: the hook runs on every commit, and reads no shard of one that cannot change the checkpoint."""
    config = documented_config(hook_repository)
    config["repos"][0]["hooks"][0]["verbose"] = True  # the hook's output, shown though it passes
    repository = checkpoint_repository(tmp_path / "model", broken=True, config=config)
    assert pre_commit(repository, pre_commit_home, "install").returncode == 0
    head = git(repository, "rev-parse", "HEAD")
    (repository / "README.md").write_text("# a model card\n")
    git(repository, "add", "README.md")
    commit = git_commit(repository, pre_commit_home, "a model card")
    output = commit.stdout + commit.stderr
    assert commit.returncode == 0, output
    assert ".: nothing to check: the staged changes touch none of its files" in output
    assert git(repository, "rev-parse", "HEAD") != head


def test_args_point_the_hook_at_a_checkpoint_in_a_subfolder(tmp_path, hook_repository, pre_commit_home):
    """docs/ci.md: a checkpoint in a subfolder is named by `args`, and its files are read from the staging area
    of the repository around it."""
    config = documented_config(hook_repository)
    config["repos"][0]["hooks"][0].update(args=["models/moe"])
    repository = checkpoint_repository(tmp_path / "model", broken=True, config=config, folder="models/moe")
    result = pre_commit(repository, pre_commit_home, "run", "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert any(line.startswith("models/moe: 3 shard") for line in result.stdout.splitlines())
    assert shows_the_finding(result.stdout)


def git_commit(repository: Path, home: Path, message: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``git commit ARGS`` as a user runs it, its pre-commit hook installed by ``pre-commit install``."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run(
        ["git", "-C", str(repository), "commit", "-q", "-m", message, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("deleted", "commit_args", "refusal"),
    [
        (
            "model-00002-of-00003.safetensors",
            (),
            "model-00002-of-00003.safetensors: named in model.safetensors.index.json but ",
        ),
        ("model.safetensors.index.json", (), ".: holds neither model.safetensors.index.json nor model.safetensors"),
        (
            "model-00002-of-00003.safetensors",
            ("-a",),
            "model-00002-of-00003.safetensors: named in model.safetensors.index.json but ",
        ),
    ],
    ids=["shard", "index", "shard-commit-a"],
)
def test_a_commit_that_deletes_a_shard_or_the_index_is_refused(
    tmp_path, hook_repository, pre_commit_home, deleted, commit_args, refusal
):
    """pre-commit passes a hook the added and changed files only, so a commit that deletes a shard or the index
    ran nothing: the hook itself must see a deletion, staged (`git rm`) or staged by the commit (`git commit -a`
    stages it in an index of its own, which git names in GIT_INDEX_FILE)."""
    repository = checkpoint_repository(tmp_path / "model", broken=False, config=documented_config(hook_repository))
    assert pre_commit(repository, pre_commit_home, "install").returncode == 0
    head = git(repository, "rev-parse", "HEAD")
    if commit_args:
        (repository / deleted).unlink()
    else:
        git(repository, "rm", "-q", deleted)
    commit = git_commit(repository, pre_commit_home, "delete a file", *commit_args)
    output = commit.stdout + commit.stderr
    assert commit.returncode != 0, output
    assert f"scalar-scales: error: {refusal}" in output
    assert git(repository, "rev-parse", "HEAD") == head


def test_a_commit_holds_only_the_shards_that_are_staged(tmp_path, hook_repository, pre_commit_home):
    """A first commit of config.json, the index and one shard of three: the other two are on disk, untracked, and
    the commit would hold an index naming shards it lacks."""
    repository = git_repository(tmp_path / "model")
    clean_checkpoint(repository)
    (repository / ".pre-commit-config.yaml").write_text(yaml.safe_dump(documented_config(hook_repository)))
    assert pre_commit(repository, pre_commit_home, "install").returncode == 0
    staged = [".pre-commit-config.yaml", "config.json", "model.safetensors.index.json"]
    git(repository, "add", *staged, "model-00001-of-00003.safetensors")
    commit = git_commit(repository, pre_commit_home, "upload")
    output = commit.stdout + commit.stderr
    assert commit.returncode != 0, output
    assert "model-00002-of-00003.safetensors: named in model.safetensors.index.json but " in output
    assert git(repository, "rev-list", "--all") == ""


def test_pre_commit_run_checks_the_staged_checkpoint_not_the_working_tree(tmp_path, hook_repository, pre_commit_home):
    """`pre-commit run --all-files` (as CI runs it, outside a commit) leaves the working tree as it is: a shard
    staged broken and clean again on disk is still what a commit would hold."""
    repository = checkpoint_repository(tmp_path / "model", broken=False, config=documented_config(hook_repository))
    shard = repository / "model-00003-of-00003.safetensors"
    clean = shard.read_bytes()
    broken, _ = broken_checkpoint(tmp_path / "broken")
    shard.write_bytes((broken / shard.name).read_bytes())
    git(repository, "add", shard.name)
    shard.write_bytes(clean)
    result = pre_commit(repository, pre_commit_home, "run", "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert shows_the_finding(result.stdout)


def test_a_commit_of_a_path_checks_what_that_commit_holds(tmp_path, hook_repository, pre_commit_home):
    """`git commit README.md` commits the README onto the last commit, not what else is staged (a broken shard):
    git names that commit's index in GIT_INDEX_FILE, and the hook checks it, not the staging area's."""
    repository = checkpoint_repository(tmp_path / "model", broken=False, config=documented_config(hook_repository))
    assert pre_commit(repository, pre_commit_home, "install").returncode == 0
    shard = repository / "model-00003-of-00003.safetensors"
    broken, _ = broken_checkpoint(tmp_path / "broken")
    shard.write_bytes((broken / shard.name).read_bytes())
    git(repository, "add", shard.name)
    (repository / "README.md").write_text("# a model card\n")
    git(repository, "add", "README.md")
    commit = git_commit(repository, pre_commit_home, "a model card", "README.md")
    assert commit.returncode == 0, commit.stdout + commit.stderr
    assert git(repository, "show", "--name-only", "--format=", "HEAD").split() == ["README.md"]
