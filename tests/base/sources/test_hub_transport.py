"""How ``check`` reaches a Hub repository: the names it takes, its offline cache, retries of what fails for a
moment, how few requests it makes, and its progress bar; against the test kit's Hub stand-in on 127.0.0.1."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from scalar_scales.errors import CheckpointError
from scalar_scales.sources.hub_address import is_hub_address, parse_hub_address
from scalar_scales_testkit.broken import clean_checkpoint
from scalar_scales_testkit.cli import (
    corrupt_header,
    make_checkpoint,
    run_cli,
    run_cli_in_process,
    shards,
    signals_taken_over,
    until,
)
from scalar_scales_testkit.hub_server import (
    HubRepository,
    client_environment,
    commit_of,
    scatter_scales,
    serve_hub,
)
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

pytest.importorskip("huggingface_hub")


def findings(result: subprocess.CompletedProcess[str]) -> list[tuple]:
    return [(f["code"], f["tensor"], f["file"].rpartition("/")[2]) for f in json.loads(result.stdout)["findings"]]


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


# How a repository can be named.


@pytest.mark.parametrize(
    ("address", "repo_id", "revision"),
    [
        ("https://huggingface.co/org/model", "org/model", None),
        ("https://huggingface.co/org/model/", "org/model", None),
        ("https://hf.co/org/model/tree/v1.0", "org/model", "v1.0"),
        ("https://huggingface.co/org/model/tree/refs%2Fpr%2F1", "org/model", "refs/pr/1"),
        ("https://huggingface.co/org/model/tree/refs/pr/1", "org/model", "refs/pr/1"),
        ("hf://org/model@refs/pr/1", "org/model", "refs/pr/1"),
    ],
)
def test_a_hub_page_address_names_its_repository_and_revision(address, repo_id, revision):
    assert is_hub_address(address)
    parsed = parse_hub_address(address)
    assert (parsed.repo_id, parsed.revision) == (repo_id, revision)


DOT_DOT = "the revision '..' can name no branch, tag or commit: it has a '.' or '..' segment"


@pytest.mark.parametrize(
    "address",
    [
        "hf://org/model@..",
        "https://huggingface.co/org/model/tree/..",
        "https://huggingface.co/org/model/tree/%2E%2E",
    ],
)
def test_a_dot_dot_revision_is_refused_not_read_as_the_default_branch(tmp_path, address):
    """As found: the HTTP client removed the dot segment from ``/api/models/org/model/revision/..``, so the default
    branch was checked and reported as ``@..``. Nothing is requested now."""
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, served):
        result = run_cli("check", address, env=client_environment(endpoint, tmp_path))
    assert one_line(result) == f"scalar-scales: error: {address}: {DOT_DOT}"
    assert served.requests == []


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("hf://org/model@.", "it has a '.' or '..' segment"),
        ("hf://org/model@main/..", "it has a '.' or '..' segment"),
        ("hf://org/model@../../../refs/main", "it has a '.' or '..' segment"),
        ("https://huggingface.co/org/model/tree/main/%2E", "it has a '.' or '..' segment"),
        ("hf://org/model@main/", "it has an empty segment"),
        ("hf://org/model@refs//pr/1", "it has an empty segment"),
        ("hf://org/model@ma\x00in", "it holds a control character"),
        ("https://huggingface.co/org/model/tree/ma%7Fin", "it holds a control character"),
        ("hf://org/model@..\\..\\refs\\main", "it holds a backslash"),
    ],
)
def test_a_revision_no_branch_tag_or_commit_can_be_named_is_refused(address, problem):
    """Git's rules for ref names, where what they forbid would change what is read: a dot segment (removed from
    the address, or a ``refs/`` file outside the repository's offline), an empty one, a control character (a NUL
    ends a path), a backslash (a separator of Windows paths)."""
    with pytest.raises(CheckpointError) as refused:
        parse_hub_address(address)
    assert refused.value.path == address
    assert f"can name no branch, tag or commit: {problem}" in refused.value.problem


def test_an_address_of_another_host_is_refused_in_one_line_naming_it(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        result = run_cli("check", "https://example.com/org/model", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith("scalar-scales: error: https://example.com/org/model: not a Hub address"), line


def test_the_endpoint_pages_address_is_checked_at_its_revision(tmp_path):
    legacy, clean = make_checkpoint(tmp_path / "legacy"), clean_checkpoint(tmp_path / "clean")
    with serve_hub({"org/model": HubRepository({"main": clean, "v1.0": legacy})}) as (endpoint, _):
        env = client_environment(endpoint, tmp_path)
        page = run_cli("check", f"{endpoint}/org/model/tree/v1.0", "--json", env=env)
        address = run_cli("check", "hf://org/model@v1.0", "--json", env=env)
    assert page.returncode == address.returncode == 0, page.stderr
    assert findings(page) == findings(address) != []
    assert json.loads(page.stdout)["summary"]["checkpoint"] == "hf://org/model@v1.0"


def test_an_opened_repository_knows_its_hub_address_whichever_form_was_given(tmp_path):
    script = (
        "from scalar_scales.sources import open_checkpoint; "
        "print(open_checkpoint('https://huggingface.co/org/model/tree/main').hub.canonical)"
    )
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        env = {k: v for k, v in {**os.environ, **client_environment(endpoint, tmp_path)}.items() if v is not None}
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "hf://org/model@main", result.stderr


def test_a_repository_is_checked_from_inside_a_running_event_loop(tmp_path):
    """As a notebook's cell calls it, in an event loop, where another cannot be run: the check's requests run on a
    loop of their own, in a thread of their own."""
    script = (
        "import asyncio\n"
        "from scalar_scales.scan import scan_shards\n"
        "from scalar_scales.sources import open_checkpoint\n"
        "async def cell():\n"
        "    return len(scan_shards(open_checkpoint('hf://org/model')).shards)\n"
        "print(asyncio.run(cell()))\n"
    )
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        env = {k: v for k, v in {**os.environ, **client_environment(endpoint, tmp_path)}.items() if v is not None}
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "3", result.stderr


def test_a_huggingface_co_address_is_read_through_the_configured_endpoint(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, served):
        result = run_cli("check", "https://huggingface.co/org/model", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 0, result.stderr
    assert served.count("/api/models/org/model") == 1


@pytest.mark.parametrize("kind", ["blob", "resolve"])
def test_a_files_address_is_refused_with_the_repositorys(kind):
    result = run_cli("check", f"https://huggingface.co/org/model/{kind}/main/model.safetensors")
    assert one_line(result).endswith("names one file, not a checkpoint; check the repository: hf://org/model@main")


def test_a_datasets_address_is_refused():
    assert one_line(run_cli("check", "https://huggingface.co/datasets/org/data")).endswith(
        "names a dataset, not a model repository"
    )


def test_a_bare_repository_id_that_is_no_path_suggests_the_hub_address():
    result = run_cli("check", "some-org/some-model")
    assert one_line(result) == (
        "scalar-scales: error: some-org/some-model: no such file or folder; for the Hub repository, write "
        "hf://some-org/some-model"
    )


# Offline: the snapshot in huggingface_hub's cache.


def cache_snapshot(cache: Path, repo_id: str, folder: Path, revision: str = "main") -> str:
    """Lay ``folder`` out in huggingface_hub's cache as ``hf download`` does: blobs, a snapshot of links to them,
    and the revision's ref; return the commit."""
    commit = commit_of(folder)
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs" / revision).parent.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "snapshots" / commit).mkdir(parents=True)
    for number, file in enumerate(sorted(folder.iterdir())):
        blob = repo / "blobs" / f"{commit[:8]}{number:032x}"
        blob.write_bytes(file.read_bytes())
        (repo / "snapshots" / commit / file.name).symlink_to(os.path.relpath(blob, repo / "snapshots" / commit))
    return commit


def offline_environment(tmp_path: Path) -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_CACHE": str(tmp_path / "cache")}


def test_offline_the_cached_snapshot_is_checked_as_the_local_folder_is(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    cache_snapshot(tmp_path / "cache", "org/model", checkpoint)
    offline = run_cli("check", "hf://org/model", "--json", env=offline_environment(tmp_path))
    local = run_cli_in_process("check", checkpoint, "--json")
    assert offline.returncode == local.returncode == 0, offline.stderr
    assert findings(offline) == findings(local) != []


@pytest.mark.parametrize("revision", ["v1.0", "refs/pr/1"])
def test_offline_the_check_knows_the_commit_the_cache_names(tmp_path, revision):
    """A pull request's ref lies in a folder of ``refs/`` (``refs/refs/pr/1``), as ``hf download`` writes it."""
    commit = cache_snapshot(tmp_path / "cache", "org/model", clean_checkpoint(tmp_path / "ckpt"), revision=revision)
    script = (
        f"from scalar_scales.sources import open_checkpoint; print(open_checkpoint('hf://org/model@{revision}').commit)"
    )
    env = {**os.environ, **offline_environment(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == commit, result.stderr


def test_offline_the_report_names_the_hub_address_not_the_cache_folder(tmp_path):
    commit = cache_snapshot(tmp_path / "cache", "org/model", clean_checkpoint(tmp_path / "ckpt"), revision="v1.0")
    env = offline_environment(tmp_path)
    text = run_cli("check", "https://huggingface.co/org/model/tree/v1.0", env=env)
    document = run_cli("check", "hf://org/model@v1.0", "--json", env=env)
    assert text.stdout.startswith(f"hf://org/model@v1.0 (commit {commit}): "), text.stderr
    assert json.loads(document.stdout)["summary"]["checkpoint"] == "hf://org/model@v1.0"


def test_offline_without_a_cached_snapshot_is_one_line_saying_how_to_go_online(tmp_path):
    line = one_line(run_cli("check", "hf://org/model", env=offline_environment(tmp_path)))
    assert line.startswith("scalar-scales: error: hf://org/model: HF_HUB_OFFLINE is set and huggingface_hub's cache")
    assert line.endswith(
        "unset HF_HUB_OFFLINE to check it over the network, or download it first (hf download org/model)"
    )


def repository_in(cache: Path) -> Path:
    return cache / "models--org--model"


def ref_out_of_the_cache(cache: Path, commit: str) -> None:
    """As found: ``refs/main`` names a folder outside the cache, which holds a checkpoint of its own."""
    make_checkpoint(cache.parent.parent / "outside")
    (repository_in(cache) / "refs" / "main").write_text("../../../../outside")


def ref_of_no_commit(cache: Path, commit: str) -> None:
    (repository_in(cache) / "refs" / "main").write_text(commit[:7])


def ref_to_a_device(cache: Path, commit: str) -> None:
    """huggingface_hub reads a ref whole: ``/dev/zero`` was a MemoryError."""
    ref = repository_in(cache) / "refs" / "main"
    ref.unlink()
    ref.symlink_to("/dev/zero")


def snapshot_out_of_the_cache(cache: Path, commit: str) -> None:
    snapshot = repository_in(cache) / "snapshots" / commit
    shutil.rmtree(snapshot)
    snapshot.symlink_to(make_checkpoint(cache.parent / "elsewhere"), target_is_directory=True)


def shard_out_of_the_cache(cache: Path, commit: str) -> None:
    elsewhere = make_checkpoint(cache.parent / "elsewhere")
    shard = repository_in(cache) / "snapshots" / commit / "model-00001-of-00003.safetensors"
    shard.unlink()
    shard.symlink_to(elsewhere / shard.name)


def snapshot_that_is_a_file(cache: Path, commit: str) -> None:
    snapshot = repository_in(cache) / "snapshots" / commit
    shutil.rmtree(snapshot)
    snapshot.write_bytes(b"")


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (ref_out_of_the_cache, "refs/main, in huggingface_hub's cache, holds '../../../../outside', not a commit"),
        (ref_of_no_commit, "refs/main, in huggingface_hub's cache, holds '"),
        (ref_to_a_device, "huggingface_hub's cache names the revision in "),
        (snapshot_out_of_the_cache, "elsewhere, out of the repository's "),
        (shard_out_of_the_cache, "the cached snapshot's model-00001-of-00003.safetensors is a link to "),
        (snapshot_that_is_a_file, " is not a folder"),
    ],
)
def test_offline_a_snapshot_that_is_not_the_repositorys_own_is_refused_in_one_line(tmp_path, tamper, problem):
    """As found: a ``refs/main`` of ``../../../../outside`` had a folder outside the cache checked, exit 0,
    reported as ``hf://org/model`` with a null commit; a snapshot, or a shard of it, that links out of the cache was
    checked as the commit's. What the cache names is checked before it is followed."""
    cache = tmp_path / "home" / "cache"
    commit = cache_snapshot(cache, "org/model", make_checkpoint(tmp_path / "ckpt"))
    tamper(cache, commit)
    result = run_cli(
        "check", "hf://org/model", "--json", env={**offline_environment(tmp_path), "HF_HUB_CACHE": str(cache)}
    )
    line = one_line(result)
    assert line.startswith("scalar-scales: error: hf://org/model: ") and problem in line, line
    assert result.stdout == ""


def materialized_snapshot(tmp_path: Path) -> str:
    """A legacy checkpoint cached as ``hf download`` caches it, then migrated in the cache with ``--materialize``:
    its shards and config.json are files of their own, edited, where the commit's blobs were linked; its index is
    still a link. Returns the commit."""
    commit = cache_snapshot(tmp_path / "cache", "org/model", make_checkpoint(tmp_path / "ckpt"))
    snapshot = repository_in(tmp_path / "cache") / "snapshots" / commit
    assert run_cli_in_process("migrate", "--materialize", snapshot).returncode == 0
    return commit


CHANGED = (
    "config.json, model-00001-of-00003.safetensors, model-00002-of-00003.safetensors, model-00003-of-00003.safetensors"
)


def test_offline_a_snapshot_changed_locally_is_said_so_in_the_text_heading_and_summary(tmp_path):
    """As found: after `migrate --materialize` in the cache, the check reported the snapshot as the commit and found
    it clean, though its files were no longer the commit's blobs."""
    commit = materialized_snapshot(tmp_path)
    lines = run_cli("check", "hf://org/model", env=offline_environment(tmp_path)).stdout.splitlines()
    assert lines[0].startswith(f"hf://org/model (commit {commit}; the cached snapshot was changed locally): ")
    assert lines[-1].endswith(
        f" The cached snapshot was changed locally: {CHANGED} are not links to the cache's blobs, as huggingface_hub "
        f"caches a commit's files, so what was checked may differ from commit {commit}."
    )


def test_offline_statistics_summary_line_says_the_snapshot_was_changed_locally(tmp_path):
    materialized_snapshot(tmp_path)
    result = run_cli("check", "hf://org/model", "--statistics", env=offline_environment(tmp_path))
    (line,) = result.stdout.splitlines()
    assert f" The cached snapshot was changed locally: {CHANGED} are not links" in line


def test_offline_json_lists_the_snapshot_s_files_changed_locally(tmp_path):
    materialized_snapshot(tmp_path)
    document = json.loads(run_cli("check", "hf://org/model", "--json", env=offline_environment(tmp_path)).stdout)
    assert document["summary"]["changed_locally"] == CHANGED.split(", ")


def test_offline_the_github_notice_of_the_commit_says_the_snapshot_was_changed_locally(tmp_path):
    commit = materialized_snapshot(tmp_path)
    lines = run_cli("check", "hf://org/model", "--output-format", "github", env=offline_environment(tmp_path))
    (notice,) = (line for line in lines.stdout.splitlines() if line.startswith("::notice "))
    assert notice.startswith(f"::notice title=hf%3A//org/model at commit {commit}%2C changed locally::")
    assert "The cached snapshot was changed locally: " in notice


def test_offline_sarif_s_run_lists_the_snapshot_s_files_changed_locally(tmp_path):
    materialized_snapshot(tmp_path)
    log = json.loads(
        run_cli("check", "hf://org/model", "--output-format", "sarif", env=offline_environment(tmp_path)).stdout
    )
    (run,) = log["runs"]
    assert run["properties"]["changedLocally"] == CHANGED.split(", ")
    assert "The cached snapshot was changed locally: " in run["properties"]["summary"]


def test_offline_a_snapshot_of_links_to_its_blobs_lists_nothing_changed_locally(tmp_path):
    cache_snapshot(tmp_path / "cache", "org/model", clean_checkpoint(tmp_path / "ckpt"))
    document = json.loads(run_cli("check", "hf://org/model", "--json", env=offline_environment(tmp_path)).stdout)
    assert document["summary"]["changed_locally"] == []


def test_offline_a_blob_edited_in_place_through_its_link_is_not_found(tmp_path):
    """What docs/check.md says the check cannot tell without reading every file whole."""
    commit = cache_snapshot(tmp_path / "cache", "org/model", make_checkpoint(tmp_path / "ckpt"))
    snapshot = repository_in(tmp_path / "cache") / "snapshots" / commit
    for linked in shards(snapshot):
        blob = linked.resolve()
        blob.write_bytes(blob.read_bytes().replace(b'"shape":[1]', b'"shape":[ ]', 1))  # as migrate edits in place
    document = json.loads(run_cli("check", "hf://org/model", "--json", env=offline_environment(tmp_path)).stdout)
    assert document["summary"]["changed_locally"] == []


def test_offline_a_cache_setting_that_names_a_file_is_refused_naming_it(tmp_path):
    """As found: ``HF_HUB_CACHE`` naming a file was "holds no snapshot of it", as if the cache were empty."""
    cache = make_checkpoint(tmp_path / "ckpt") / "config.json"
    result = run_cli("check", "hf://org/model", env={**offline_environment(tmp_path), "HF_HUB_CACHE": str(cache)})
    assert one_line(result) == f"scalar-scales: error: HF_HUB_CACHE: huggingface_hub's cache, {cache}, is not a folder"


# Retries: what fails for a moment is tried again, within the request's deadline; nothing else is.


@pytest.mark.parametrize(
    "misbehave",
    ["drop-once", "drop-mid-body-once", "503-once", "503-huge-once", "503-odd-retry-after-once", "429-once"],
)
def test_a_transient_failure_is_retried_and_the_check_matches_a_clean_one(tmp_path, misbehave):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    with serve_hub({"org/model": HubRepository({"main": checkpoint}, misbehave=misbehave)}) as (endpoint, served):
        flaky = run_cli("check", "hf://org/model", "--json", env=client_environment(endpoint, tmp_path))
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        clean = run_cli("check", "hf://org/model", "--json", env=client_environment(endpoint, tmp_path))
    assert flaky.returncode == clean.returncode == 0, flaky.stderr
    assert flaky.stderr == ""
    assert findings(flaky) == findings(clean) != []
    assert served.count("/api/models/org/model") == 2


def check_timed(
    env: dict[str, str | None], begun: Callable[[subprocess.Popen[str]], Callable[[], bool]]
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``check hf://org/model`` in its own process: its result, and the seconds from the event ``begun(process)``
    (seen from outside) to its end, so that what is timed is the check's, not the interpreter's start."""
    environment = {key: value for key, value in {**os.environ, **env}.items() if value is not None}
    process = subprocess.Popen(
        [sys.executable, "-m", "scalar_scales", "check", "hf://org/model"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert until(begun(process), process), "the check ended before the moment it is timed from"
        start = time.monotonic()
        stdout, stderr = process.communicate(timeout=300)
        elapsed = time.monotonic() - start
    finally:
        process.kill()
        process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), elapsed


def test_a_server_that_always_fails_ends_the_check_with_one_line_within_the_deadline(tmp_path):
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave="503-always")
    with serve_hub({"org/model": repository}) as (endpoint, served):
        env = {**client_environment(endpoint, tmp_path), "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
        result, elapsed = check_timed(env, lambda process: lambda: bool(served.requests))
    assert one_line(result).startswith("scalar-scales: error: hf://org/model: HTTP 503")
    assert "(after 3 tries)" in result.stderr
    assert served.count("/api/models/org/model") == 3
    assert elapsed < 6 + 5  # the 6 s deadline from the first request, and the process's end


def test_a_refused_connection_is_retried_and_ends_in_one_line_within_the_deadline(tmp_path):
    with socket.socket() as closed:  # a port nothing listens on: bound, then closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {
        **client_environment(f"http://127.0.0.1:{port}", tmp_path),
        "HF_HUB_ETAG_TIMEOUT": "1",
        "HF_HUB_DOWNLOAD_TIMEOUT": "1",
    }
    result, elapsed = check_timed(env, signals_taken_over)
    line = one_line(result)
    assert line.startswith("scalar-scales: error: hf://org/model: cannot reach the Hub"), line
    assert line.endswith("(after 3 tries)"), line
    # The 6 s deadline, and importing the command and huggingface_hub (however loaded the machine: no first
    # request is seen here to time from); without the deadline the waits between 6 tries alone take 23 s.
    assert elapsed < 6 + 14


def test_a_browsers_address_of_a_subfolder_says_it_is_not_supported_and_how_to_download_it(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        result = run_cli(
            "check", "https://huggingface.co/org/model/tree/main/nvfp4", env=client_environment(endpoint, tmp_path)
        )
    assert one_line(result) == (
        "scalar-scales: error: hf://org/model@main/nvfp4: revision not found (HTTP 404); if 'nvfp4' is a folder of "
        "revision 'main', a checkpoint in a subfolder is not supported: download it (hf download org/model "
        "--revision main --include 'nvfp4/*') and check the folder"
    )


def test_an_address_of_another_host_is_refused_as_such_without_huggingface_hub():
    script = (
        "import sys; sys.modules['huggingface_hub'] = None; sys.argv = ['scalar-scales', 'check', "
        "'https://example.com/org/model']; import runpy; runpy.run_module('scalar_scales', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    line = one_line(result)
    assert line.startswith("scalar-scales: error: https://example.com/org/model: not a Hub address"), line


def test_a_404_is_not_retried(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, served):
        result = run_cli("check", "hf://org/model@v2.0", env=client_environment(endpoint, tmp_path))
    assert one_line(result).endswith("revision not found (HTTP 404)")
    assert served.count("/api/models/org/model/revision/v2.0") == 1


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), ("86400", 30.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon", None), ("", None), ("²", None)],
)
def test_retry_after_is_read_as_seconds_or_a_date_and_capped(value, seconds):
    from scalar_scales.sources.hub_client import retry_after

    assert retry_after(SimpleNamespace(headers={"Retry-After": value})) == seconds


@pytest.mark.parametrize(
    ("value", "seconds"), [('"api";r=0;t=5', 5.0), ('"api";r=0;t=55', 30.0), ('"api";r=3;t=5', None), ("", None)]
)
def test_a_rate_limit_with_no_request_left_is_waited_out_and_capped(value, seconds):
    """A 429's ``RateLimit`` header, as huggingface_hub's ``http_backoff`` reads it and waits on first."""
    from scalar_scales.sources.hub_client import rate_limit_reset

    assert rate_limit_reset(SimpleNamespace(headers={"RateLimit": value})) == seconds


# Few requests: one range per shard where the scales lead the data section.


def test_a_sorted_shard_is_read_in_one_range_request(tmp_path):
    checkpoint = write_synthetic_checkpoint(tmp_path / "v4", data_bytes=40_000_000, layers=4, shards=4, sparse=True)
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, served):
        remote = run_cli("check", "hf://org/model", "--json", env=client_environment(endpoint, tmp_path))
    local = run_cli_in_process("check", checkpoint, "--json")
    assert remote.returncode == local.returncode, remote.stderr
    assert served.ranges() == {shard.name: 1 for shard in shards(checkpoint)}
    assert findings(remote) == findings(local)


def test_a_scattered_layout_is_read_in_two_range_requests_per_shard(tmp_path):
    """Scales among the weights: the header, then one merged range for the shard's scales, not one per scale."""
    checkpoint = scatter_scales(write_synthetic_checkpoint(tmp_path / "v4", data_bytes=4_000_000, layers=4, shards=4))
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, served):
        remote = run_cli("check", "hf://org/model", "--json", "--list", env=client_environment(endpoint, tmp_path))
    local = run_cli_in_process("check", checkpoint, "--json", "--list")
    assert remote.returncode == local.returncode, remote.stderr
    assert served.ranges() == {shard.name: 2 for shard in shards(checkpoint)}
    values = [(s["name"], s["value"]) for s in json.loads(remote.stdout)["scales"]]
    assert values == [(s["name"], s["value"]) for s in json.loads(local.stdout)["scales"]]


# Progress: on a terminal's stderr, huggingface_hub's bar; never on stdout, nor off a terminal.


def run_on_a_terminal(args: list[str], env: dict[str, str | None]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe: its exit code, stdout and terminal."""
    leader, follower = os.openpty()
    fcntl.ioctl(
        follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0)
    )  # a terminal's size: 0 columns shows no bar
    environment = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    process = subprocess.Popen(
        [sys.executable, "-m", "scalar_scales", *args], env=environment, stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    terminal = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 300)  # a bound on waiting for the end
            if not ready:
                break
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            terminal += chunk
        stdout = process.communicate(timeout=300)[0]
    finally:
        process.kill()
        process.wait()
        os.close(leader)
    return process.returncode, stdout.decode(), terminal.decode(errors="replace")


def test_progress_is_shown_on_a_terminals_stderr_and_stdout_stays_json(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        code, stdout, terminal = run_on_a_terminal(
            ["check", "hf://org/model", "--json"], client_environment(endpoint, tmp_path)
        )
    assert code == 0, terminal
    assert "Reading hf://org/model" in terminal and "/3 [" in terminal
    assert json.loads(stdout)["summary"]["shards"] == 3


def test_progress_honours_hf_hub_disable_progress_bars(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        env = {**client_environment(endpoint, tmp_path), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        code, _, terminal = run_on_a_terminal(["check", "hf://org/model", "--json"], env)
    assert code == 0
    assert terminal == ""


def test_no_progress_where_stderr_is_not_a_terminal(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        result = run_cli("check", "hf://org/model", "--json", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 0
    assert result.stderr == ""


def test_an_error_after_progress_starts_on_its_own_line(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    victim = shards(checkpoint)[-1]
    corrupt_header(victim)
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        code, _, terminal = run_on_a_terminal(["check", "hf://org/model"], client_environment(endpoint, tmp_path))
    assert code == 2
    last = terminal.replace("\r\n", "\n").split("\n")[-2]
    assert last.rpartition("\r")[2].startswith(f"scalar-scales: error: hf://org/model/{victim.name}")
