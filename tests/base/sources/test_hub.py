"""`scalar-scales check hf://ORG/NAME[@REVISION]` against a local server that answers as the Hub does."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales.sources import shard_name
from scalar_scales_testkit.broken import CORPUS, MODELOPT_CORPUS, clean_checkpoint
from scalar_scales_testkit.cli import corrupt_header, make_checkpoint, run_cli, run_cli_in_process, shards
from scalar_scales_testkit.diffusion import wan_transformer
from scalar_scales_testkit.hub_server import HubRepository, client_environment, serve_hub
from scalar_scales_testkit.modelopt_exports import copy_of_export
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

pytest.importorskip("huggingface_hub")


def comparable(result) -> list[tuple]:
    """A check's findings, with each file named relative to its checkpoint (a path here, an address there)."""
    return [
        (f["code"], f["severity"], f["tensor"], shard_name(f["file"]), f["message"])
        for f in json.loads(result.stdout)["findings"]
    ]


def check_both(checkpoint: Path, tmp_path: Path, *args: str):
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, served):
        remote = run_cli("check", "hf://org/model", "--json", *args, env=client_environment(endpoint, tmp_path))
    local = run_cli_in_process("check", checkpoint, "--json", *args)
    return local, remote, served


CASES = [
    pytest.param(clean, layout, case, id=f"{layout.producer}-{name}")
    for clean, layout, corpus in (
        (clean_checkpoint, COMPRESSED_TENSORS_LAYOUT, CORPUS),
        (partial(copy_of_export, name="nvfp4-sharded"), MODELOPT_LAYOUT, MODELOPT_CORPUS),
    )
    for name, case in [("clean", None), *corpus.items()]
]


@pytest.mark.parametrize(("clean", "layout", "case"), CASES)
def test_a_remote_check_finds_what_the_local_check_finds(tmp_path, clean, layout, case):
    checkpoint = clean(tmp_path / "checkpoint")
    if case is not None:
        case.make(checkpoint, layout)
    local, remote, _ = check_both(checkpoint, tmp_path)
    assert remote.returncode == local.returncode != 2, remote.stderr
    assert comparable(remote) == comparable(local)
    assert {f["file"].rpartition("/")[0] for f in json.loads(remote.stdout)["findings"]} <= {"hf://org/model"}


def test_a_diffusers_repository_is_read_by_its_index_and_shard_names_as_a_folder_is(tmp_path):
    checkpoint = wan_transformer(tmp_path / "transformer", weight_global={"blocks.0.attn1.to_k": 2000.0})
    local, remote, _ = check_both(checkpoint, tmp_path)
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert comparable(remote) == comparable(local) != []


def test_the_report_counts_the_bytes_the_server_sent(tmp_path):
    _, remote, served = check_both(make_checkpoint(tmp_path / "ckpt"), tmp_path)
    summary = json.loads(remote.stdout)["summary"]
    assert summary["bytes_fetched"] == served.file_bytes > 0
    assert summary["bytes_total"] == sum(p.stat().st_size for p in (tmp_path / "ckpt").iterdir())


def test_a_v4_flash_sized_checkpoint_is_checked_from_under_1_percent_of_its_bytes(tmp_path):
    checkpoint = write_synthetic_checkpoint(tmp_path / "v4", data_bytes=3_800_000_000, sparse=True)
    local, remote, served = check_both(checkpoint, tmp_path)
    summary = json.loads(remote.stdout)["summary"]
    size = sum(p.stat().st_size for p in checkpoint.iterdir())
    assert summary["scales"] == 66_048
    assert summary["bytes_fetched"] == served.file_bytes
    assert served.file_bytes < 0.01 * size
    assert comparable(remote) == comparable(local)
    assert all(range_ is not None for path, range_ in served.requests if path.endswith(".safetensors"))


def test_the_text_summary_says_how_many_bytes_were_fetched(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, served):
        result = run_cli("check", "hf://org/model", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("hf://org/model")
    assert f"Fetched {served.file_bytes} of the files' " in result.stdout.splitlines()[-1]


def test_a_revision_after_the_at_sign_is_the_one_checked(tmp_path):
    legacy = make_checkpoint(tmp_path / "legacy")
    clean = clean_checkpoint(tmp_path / "clean")
    with serve_hub({"org/model": HubRepository({"main": clean, "v1.0": legacy})}) as (endpoint, _):
        env = client_environment(endpoint, tmp_path)
        assert "(0 (1,), 48 0-D)" in run_cli("check", "hf://org/model", env=env).stdout.splitlines()[0]
        assert "(48 (1,), 0 0-D)" in run_cli("check", "hf://org/model@v1.0", env=env).stdout.splitlines()[0]
        missing = run_cli("check", "hf://org/model@v2.0", env=env)
    assert missing.returncode == 2
    assert missing.stderr == "scalar-scales: error: hf://org/model@v2.0: revision not found (HTTP 404)\n"


def test_a_private_repository_needs_the_token_huggingface_hub_reads(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    with serve_hub({"org/private": HubRepository({"main": checkpoint}, token="hf_secret")}) as (endpoint, _):
        refused = run_cli("check", "hf://org/private", env=client_environment(endpoint, tmp_path))
        allowed = run_cli("check", "hf://org/private", env=client_environment(endpoint, tmp_path, token="hf_secret"))
    assert refused.returncode == 2
    assert refused.stderr == (
        "scalar-scales: error: hf://org/private: repository not found, or private and this token has no access "
        "(HTTP 401)\n"
    )
    assert allowed.returncode == 0, allowed.stderr


def test_a_corrupt_remote_shard_is_one_line_naming_its_address(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    victim = shards(checkpoint)[1]
    corrupt_header(victim)
    local, remote, _ = check_both(checkpoint, tmp_path)
    assert remote.returncode == local.returncode == 2
    assert remote.stderr == local.stderr.replace(str(victim), f"hf://org/model/{victim.name}")


def test_a_server_that_ignores_ranges_is_refused_without_reading_the_file(tmp_path):
    """A 256 MB shard answered whole (200): the client hangs up at the status line, so the server gets out
    no more than the connection buffers (a few MB), never the file."""
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=256 << 20, layers=1, shards=1, sparse=True)
    (shard,) = shards(checkpoint)
    small = sum(p.stat().st_size for p in checkpoint.iterdir() if p != shard)
    with serve_hub({"org/model": HubRepository({"main": checkpoint}, ranges=False)}) as (endpoint, served):
        result = run_cli("check", "hf://org/model", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 2
    assert result.stderr.endswith("the server answered a range request with HTTP 200, not 206\n")
    assert len(result.stderr.splitlines()) == 1
    assert shard.stat().st_size > 256 << 20
    assert served.file_bytes - small < 0.1 * shard.stat().st_size


def test_an_address_that_is_neither_org_slash_name_nor_org_is_refused(tmp_path):
    result = run_cli("check", "hf://org/name/extra")
    assert result.returncode == 2
    assert "the forms are hf://ORG/NAME, hf://ORG/NAME@REVISION and hf://ORG" in result.stderr


def test_the_fix_a_remote_check_prints_is_migrate_on_a_local_copy(tmp_path):
    with serve_hub({"org/model": HubRepository({"main": make_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        result = run_cli("check", "hf://org/model@main", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 0
    assert result.stdout.splitlines()[2].endswith(
        "; fix: scalar-scales migrate DIR, on a local copy (hf download org/model --revision main --local-dir DIR)"
    )


def test_migrate_refuses_a_hub_address():
    result = run_cli("migrate", "hf://org/model")
    assert result.returncode == 2
    assert result.stderr.startswith("scalar-scales: error: hf://org/model: migrate edits files in place")


def test_an_empty_remote_shard_is_refused_as_truncated(tmp_path):
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    victim = shards(checkpoint)[0]
    victim.write_bytes(b"")
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, _):
        result = run_cli("check", "hf://org/model", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 2
    assert result.stderr == f"scalar-scales: error: hf://org/model/{victim.name}: truncated: the file is empty\n"


def test_a_repository_of_one_model_safetensors_and_no_index_is_checked_as_the_local_folder(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=1)
    (checkpoint / "model.safetensors.index.json").unlink()
    (only,) = checkpoint.glob("*.safetensors")
    only.rename(checkpoint / "model.safetensors")
    local, remote, _ = check_both(checkpoint, tmp_path)
    assert remote.returncode == local.returncode != 2, remote.stderr
    assert comparable(remote) == comparable(local) != []


def test_hf_org_checks_every_model_the_hub_lists_of_it_page_after_page(tmp_path):
    legacy, migrated = make_checkpoint(tmp_path / "legacy"), make_checkpoint(tmp_path / "migrated")
    run_cli_in_process("migrate", migrated)
    repositories = {
        "org/legacy": HubRepository({"main": legacy}),
        "org/migrated": HubRepository({"main": migrated}),
        "other/model": HubRepository({"main": legacy}),
    }
    with serve_hub(repositories, page=1) as (endpoint, served):
        result = run_cli("check", "hf://org", "--json", env=client_environment(endpoint, tmp_path))
    assert [document["summary"]["checkpoint"] for document in json.loads(result.stdout)] == [
        "hf://org/legacy",
        "hf://org/migrated",
    ]
    assert served.count("/api/models") == 2  # a page a model: the second asked for by the first's Link header
    assert result.returncode == 0, result.stderr


def test_hf_org_takes_the_models_the_hub_lists_of_the_author_in_another_case(tmp_path):
    """The Hub's names are not case-sensitive (``hf://qwen`` lists Qwen's models): a listed id whose owner is the
    author in another case is the author's, and is checked by the name the Hub gives it."""
    repositories = {"Org/legacy": HubRepository({"main": make_checkpoint(tmp_path / "legacy")})}
    with serve_hub(repositories) as (endpoint, _):
        result = run_cli("check", "hf://org", "--json", env=client_environment(endpoint, tmp_path))
    assert result.returncode == 0, result.stderr
    assert [document["summary"]["checkpoint"] for document in json.loads(result.stdout)] == ["hf://Org/legacy"]


def test_an_author_the_hub_lists_no_model_of_is_refused_in_one_line(tmp_path):
    with serve_hub({}) as (endpoint, _):
        result = run_cli("check", "hf://nobody", env=client_environment(endpoint, tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "scalar-scales: error: hf://nobody: the Hub lists no model of nobody\n"
