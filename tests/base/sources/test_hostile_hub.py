"""``check hf://`` against a hostile server, each defect reproduced as it was found: timeouts, replies checked
against what was asked, bounded memory, one line for every malformed reply, one commit, no byte twice. The server
is the test kit's Hub stand-in, misbehaving on request."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalar_scales_testkit.broken import clean_checkpoint, rewrite_shard
from scalar_scales_testkit.cli import corrupt_header, make_checkpoint, run_cli, run_cli_in_process, shards, until
from scalar_scales_testkit.hub_server import HubRepository, client_environment, scatter_scales, serve_hub
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint

pytest.importorskip("huggingface_hub")


def one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


# A server that never answers: its timeout, or Ctrl-C, ends the check with one line.


def hub_check(tmp_path: Path, repository: HubRepository, *args: str, **env: str | None):
    with serve_hub({"org/model": repository}) as (endpoint, served):
        result = run_cli("check", "hf://org/model", *args, env={**client_environment(endpoint, tmp_path), **env})
    return result, served


def test_a_server_that_never_answers_model_info_times_out_as_huggingface_hub_says(tmp_path):
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave="hang")
    line = one_line(hub_check(tmp_path, repository, HF_HUB_ETAG_TIMEOUT="1")[0])
    assert line.startswith("scalar-scales: error: hf://org/model: the Hub did not answer in time")


def test_a_server_that_never_answers_a_range_read_times_out_as_huggingface_hub_says(tmp_path):
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave="hang-files")
    line = one_line(hub_check(tmp_path, repository, HF_HUB_DOWNLOAD_TIMEOUT="1")[0])
    assert line.startswith("scalar-scales: error: hf://org/model/")
    assert "the Hub did not answer in time" in line


def test_ctrl_c_during_a_hung_read_ends_the_check_at_once_with_one_line(tmp_path, sigint_reaches_children):
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave="hang-files")
    with serve_hub({"org/model": repository}) as (endpoint, served):
        env = {**os.environ, **client_environment(endpoint, tmp_path), "HF_HUB_DOWNLOAD_TIMEOUT": "600"}
        process = subprocess.Popen(
            [sys.executable, "-m", "scalar_scales", "check", "hf://org/model"],
            env={k: v for k, v in env.items() if v is not None},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The server has a file's request (config.json's, the first read) and holds it, as it holds every
            # file's: the check is inside a read that never ends.
            reading = until(lambda: any("/resolve/" in path for path, _ in served.requests), process)
            assert reading, process.communicate()
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=120)  # at once: the read's own timeout is 600 s
        finally:
            process.kill()
    assert process.returncode == 130
    assert stderr.splitlines() == ["scalar-scales: interrupted (SIGINT); nothing was changed"]


# A 206 reply's body is checked against the range asked for.


def scales_beyond_the_first_read(folder: Path) -> Path:
    """A legacy checkpoint whose shards hold a 70 kB tensor before their scales: the scales come in a second
    range request, as in a real shard, whose weights fill the file."""
    checkpoint = make_checkpoint(folder)
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for number, shard in enumerate(shards(checkpoint)):
        name = f"model.padding_{number}"

        def padding_first(tensors: dict, name: str = name) -> None:
            rest = dict(tensors)
            tensors.clear()
            tensors[name] = {"dtype": "U8", "shape": [70_000], "data": bytes(70_000)}
            tensors.update(rest)

        rewrite_shard(shard, padding_first)
        index["weight_map"][name] = shard.name
    index_path.write_text(json.dumps(index))
    return checkpoint


def limited_memory() -> None:
    """What a child may map: enough for the command, not for a gigabyte it should never hold."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def check_in_limited_memory(repository: HubRepository, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``check hf://org/model`` served ``repository``, in a process that may map no more than :func:`limited_memory`."""
    with serve_hub({"org/model": repository}) as (endpoint, _):
        env = {k: v for k, v in {**os.environ, **client_environment(endpoint, tmp_path)}.items() if v is not None}
        return subprocess.run(
            [sys.executable, "-m", "scalar_scales", "check", "hf://org/model"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=limited_memory,
        )


@pytest.mark.parametrize(
    ("misbehave", "problem"),
    [
        ("from-zero", "the server sent bytes 0-"),
        ("oversized", "the server sent more than the "),
        ("gzip-bomb", "gzip-encoded, where none was asked for"),
        ("short", "bytes of the "),
    ],
)
def test_a_range_reply_that_is_not_the_range_asked_for_is_refused_in_bounded_memory(tmp_path, misbehave, problem):
    """As found: from offset 0 it invented NV301-NV303; oversized and inflated bodies were accepted into memory
    (725 MB, 6.3 GB); a short one gave a struct.error traceback."""
    repository = HubRepository({"main": scales_beyond_the_first_read(tmp_path / "ckpt")}, misbehave=misbehave)
    result = check_in_limited_memory(repository, tmp_path)
    line = one_line(result)
    assert line.startswith("scalar-scales: error: hf://org/model/model-0000") and problem in line


def test_an_error_reply_that_inflates_to_900_mib_is_read_in_bounded_memory(tmp_path):
    """As found when requests moved to huggingface_hub's async session: its response hook reads an error reply's
    body whole where its Content-Length is under 1 MB, and 933 kB of gzip inflated to 900 MiB (3.8 GB of memory).
    The hook is taken off the session, and an error's body is read up to 1 MiB."""
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave="error-gzip-bomb")
    result = check_in_limited_memory(repository, tmp_path)
    assert one_line(result) == (
        "scalar-scales: error: hf://org/model: repository not found, or private and this token has no access (HTTP 404)"
    )


# Memory stays bounded however a header places its scales.


def test_scales_every_4000_bytes_are_read_in_ranges_of_at_most_the_span_cap():
    """As found: gaps under 4,096 bytes were merged past the cap, so a header with a scale every 4,000 bytes
    made one 381 MiB range."""
    from scalar_scales.sources.hub import SPAN_CAP, coalesce

    ranges = coalesce([(i * 4000, i * 4000 + 4) for i in range(100_000)])
    assert max(end - begin for begin, end in ranges) <= SPAN_CAP
    assert ranges[0][0] == 0 and ranges[-1][1] == 99_999 * 4000 + 4


def test_a_shards_first_read_is_capped_however_many_tensors_the_index_names():
    from scalar_scales.sources.hub import FIRST_READ_CAP, header_estimate

    weight_map = {
        f"model.layers.{i}.mlp.experts.{j}.weight": "model-00001.safetensors" for i in range(60) for j in range(4000)
    }
    assert header_estimate(weight_map) == {"model-00001.safetensors": FIRST_READ_CAP}


def test_scales_spread_over_more_than_the_span_cap_are_read_in_several_ranges_with_the_local_values(tmp_path):
    from scalar_scales.sources.hub import SPAN_CAP

    checkpoint = scatter_scales(write_synthetic_checkpoint(tmp_path / "v4", data_bytes=40_000_000, layers=2, shards=1))
    (shard,) = checkpoint.glob("*.safetensors")
    with serve_hub({"org/model": HubRepository({"main": checkpoint})}) as (endpoint, served):
        remote = run_cli("check", "hf://org/model", "--json", "--list", env=client_environment(endpoint, tmp_path))
    local = run_cli_in_process("check", checkpoint, "--json", "--list")
    assert remote.returncode == local.returncode, remote.stderr
    lengths = [
        int(last) - int(first) + 1
        for first, last in (r.removeprefix("bytes=").split("-") for _, r in served.requests if r)
    ]
    assert served.ranges()[shard.name] > 2 and max(lengths) <= SPAN_CAP
    values = [(s["name"], s["value"]) for s in json.loads(remote.stdout)["scales"]]
    assert values == [(s["name"], s["value"]) for s in json.loads(local.stdout)["scales"]]


# One failing read ends the check at once: the others' reads are given up, not waited for.


def test_a_broken_shard_ends_the_check_at_once_while_the_others_trickle(tmp_path):
    """As found: the error waited for every other shard's read to reach its 60 s deadline."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    victim = shards(checkpoint)[-1]
    corrupt_header(victim)
    slow = frozenset(shard.name for shard in shards(checkpoint) if shard != victim)
    repository = HubRepository({"main": checkpoint}, misbehave="trickle-body", misbehave_files=slow)
    start = time.monotonic()
    result, _ = hub_check(tmp_path, repository)
    elapsed = time.monotonic() - start
    assert one_line(result).startswith(f"scalar-scales: error: hf://org/model/{victim.name}: ")
    assert elapsed < 30  # half the others' 60 s deadline, with room for a loaded machine's process start


# A malformed reply, repository id or endpoint is one line, exit 2.


@pytest.mark.parametrize(
    ("misbehave", "problem"),
    [
        ("html", "the Hub's model-info reply is refused: not valid JSON"),
        ("siblings-text", "has no list of files"),
        ("no-rfilename", "has no list of files"),
        ("a-list", "the Hub's model-info reply is refused: not a JSON object"),
        ("huge-integer", "the Hub's model-info reply is refused: holds an integer of more than 4300 digits"),
    ],
)
def test_a_malformed_model_info_reply_is_one_line(tmp_path, misbehave, problem):
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave=misbehave)
    line = one_line(hub_check(tmp_path, repository)[0])
    assert line == f"scalar-scales: error: hf://org/model: {problem}" or problem in line


@pytest.mark.parametrize("repo", ["org/a..b", "-x/y", "org/" + "n" * 97, "org/na\x01me"])
def test_a_repository_id_huggingface_hub_rejects_is_one_line(tmp_path, repo):
    line = one_line(run_cli("check", f"hf://{repo}", env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "0"}))
    assert "not a repository id huggingface_hub accepts" in line


ENDPOINT_PORT = "is not an address huggingface_hub can use: its port is not a number from 1 to 65535"
NO_TIMEOUT = "is not a timeout: a whole number of seconds up to 1000000 is (0: huggingface_hub's default, 10)"


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        ("HF_ENDPOINT", "http://127.0.0.1:99999", ENDPOINT_PORT),
        ("HF_ENDPOINT", "http://127.0.0.1:abc", ENDPOINT_PORT),
        ("HF_ENDPOINT", "http://127.0.0.1:-1", ENDPOINT_PORT),
        ("HF_ENDPOINT", "http://[::1]:70000", ENDPOINT_PORT),
        ("HF_ENDPOINT", "http://[::1", "is not an address huggingface_hub can use: it is not a URL (Invalid IPv6 URL)"),
        ("HF_HUB_ETAG_TIMEOUT", "abc", NO_TIMEOUT),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "-1", NO_TIMEOUT),
        ("HF_HUB_ETAG_TIMEOUT", "9" * 23, NO_TIMEOUT),
    ],
)
def test_a_setting_huggingface_hub_reads_at_import_is_refused_in_one_line_naming_it(tmp_path, setting, value, problem):
    """As found: huggingface_hub 2's ``_http`` raised ValueError on an endpoint's port as it was imported, outside
    the guarded start (a traceback, exit 1, even with --exit-zero), and 1.x tried 6 times to reach it; a timeout
    of ``abc`` was blamed on HF_ENDPOINT, one of -1 s ended the check at once ("took over -6 s"), one of 10**23 s
    was an OverflowError. Each is now refused before huggingface_hub is imported, so nothing is requested."""
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})
    result, served = hub_check(tmp_path, repository, **{setting: value})
    assert one_line(result) == f"scalar-scales: error: {setting}: {value!r} {problem}"
    assert served.requests == []


def test_a_refused_setting_is_named_for_the_endpoints_page_address_too(tmp_path):
    """As found: huggingface_hub, refusing ``HF_HUB_ETAG_TIMEOUT=abc`` as it was imported, left the endpoint's host
    unknown, so a mirror's page address was "not a Hub address"."""
    with serve_hub({"org/model": HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})}) as (endpoint, _):
        env = {**client_environment(endpoint, tmp_path), "HF_HUB_ETAG_TIMEOUT": "abc"}
        result = run_cli("check", f"{endpoint}/org/model", env=env)
    assert one_line(result) == f"scalar-scales: error: HF_HUB_ETAG_TIMEOUT: 'abc' {NO_TIMEOUT}"


def client_setting(tmp_path: Path, setting: str) -> tuple[str, str]:
    """A value of ``setting`` that huggingface_hub's session, headers or token cannot use, and the start of the
    problem its refusal names."""
    settings = {
        "HTTPS_PROXY": ("socks5://user:secret@127.0.0.1:1080", "huggingface_hub's HTTP client cannot use it"),
        "HTTP_PROXY": ("bogus://x", "huggingface_hub's HTTP client cannot use it (ValueError: "),
        "all_proxy": ("http://[::1", "huggingface_hub's HTTP client cannot use it ("),
        "NO_PROXY": ("\x01", "huggingface_hub's HTTP client cannot use it ("),
        "SSL_CERT_FILE": (str(tmp_path / "missing.pem"), "huggingface_hub's HTTP client cannot use it ("),
        "HF_TOKEN": ("hf_t\u00f6ken", "it cannot be sent in an HTTP header (authorization)"),
        "HF_HUB_USER_AGENT_ORIGIN": ("a\nb", "it cannot be sent in an HTTP header (user-agent)"),
        "HF_OIDC_RESOURCE": ("org/model", "huggingface_hub cannot get a token for it (OIDCError: "),
        "HF_HOME": (str(tmp_path / "ckpt" / "config.json"), "huggingface_hub cannot read its saved login, "),
    }
    return settings[setting]


@pytest.mark.parametrize(
    "setting",
    [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "all_proxy",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "HF_TOKEN",
        "HF_HUB_USER_AGENT_ORIGIN",
        "HF_OIDC_RESOURCE",
        "HF_HOME",
    ],
)
def test_a_setting_huggingface_hubs_session_cannot_use_is_one_line_naming_it(tmp_path, setting):
    """As found: ``get_session()`` raised ImportError (a SOCKS proxy without socksio), ValueError (a proxy scheme
    httpx does not know) or InvalidURL (a proxy's port, a control character in NO_PROXY) with a traceback, exit 1;
    a missing SSL_CERT_FILE was "error: No such file or directory"; a token or user agent that is no header value
    was an "unexpected reply" of the server's; HF_OIDC_RESOURCE with no id token was a traceback. A proxy's value
    is never shown: it may hold a password."""
    if setting == "HTTPS_PROXY" and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed here, so httpx can use a SOCKS proxy")
    from huggingface_hub import errors

    if setting == "HF_OIDC_RESOURCE" and not hasattr(errors, "OIDCError"):
        pytest.skip("this huggingface_hub has no OIDC login, so it does not read HF_OIDC_RESOURCE")
    value, problem = client_setting(tmp_path, setting)
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})
    # GITHUB_ACTIONS: in a GitHub Actions job, huggingface_hub would ask the runner for an OIDC id token.
    environment = {setting: value, "GITHUB_ACTIONS": None, "HF_OIDC_ID_TOKEN": None}
    result, served = hub_check(tmp_path, repository, **environment)
    if setting == "NO_PROXY" and result.returncode == 0:
        pytest.skip("this huggingface_hub's HTTP client (httpx2) takes a control character in NO_PROXY")
    line = one_line(result)
    assert line.startswith(f"scalar-scales: error: {setting}: {problem}"), line
    assert "secret" not in result.stderr
    assert not any(path.startswith("/api/models/") for path, _ in served.requests)


@pytest.mark.parametrize("output_format", ["text", "json", "github", "sarif"])
def test_a_refused_setting_is_exit_2_with_exit_zero_in_every_output_format(tmp_path, output_format):
    """Exit 1 means error findings, and --exit-zero turns findings' exit codes to 0: a refusal is neither."""
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")})
    args = ("--exit-zero", "--output-format", output_format)
    result, _ = hub_check(tmp_path, repository, *args, HF_ENDPOINT="http://127.0.0.1:99999")
    assert one_line(result).startswith("scalar-scales: error: HF_ENDPOINT: ")
    assert result.stdout == ""


# One commit, and no byte twice.


def test_every_read_of_a_check_is_pinned_to_the_commit_model_info_named(tmp_path):
    """A push lands between model info and the reads: the files read are still the commit's."""
    clean = clean_checkpoint(tmp_path / "clean")
    legacy = make_checkpoint(tmp_path / "legacy")

    def push(repository: HubRepository) -> None:
        repository.revisions["main"] = legacy

    repository = HubRepository({"main": clean}, after_model_info=push)
    result, served = hub_check(tmp_path, repository, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["findings"] == []
    assert not any("/resolve/main/" in path for path, _ in served.requests)


def test_no_byte_is_fetched_twice(tmp_path):
    """Small shards: each one's first read holds its scale bytes, so every file is fetched once, whole."""
    checkpoint = clean_checkpoint(tmp_path / "ckpt")
    result, served = hub_check(tmp_path, HubRepository({"main": checkpoint}), "--json")
    assert result.returncode == 0, result.stderr
    assert served.file_bytes == sum(p.stat().st_size for p in checkpoint.iterdir())
    assert json.loads(result.stdout)["summary"]["bytes_fetched"] == served.file_bytes


# A real deadline on every request: connecting, redirects, headers and body together.


@pytest.mark.parametrize("misbehave", ["trickle-body", "trickle-headers", "slow-redirects"])
def test_a_server_that_trickles_its_reply_ends_the_request_at_its_deadline(tmp_path, misbehave):
    """With a 1 s timeout, every request ends within 6 s (docs/check.md), however slowly the server sends: a
    byte of the body every 0.3 s, a byte of the headers every 0.5 s, or 20 redirects each after 0.8 s."""
    repository = HubRepository({"main": clean_checkpoint(tmp_path / "ckpt")}, misbehave=misbehave)
    line = one_line(hub_check(tmp_path, repository, HF_HUB_DOWNLOAD_TIMEOUT="1")[0])
    assert line.startswith("scalar-scales: error: hf://org/model/") and "took over 6 s to reply" in line


@pytest.mark.parametrize(
    ("listing", "problem"),
    [
        ("elsewhere", "the Hub's listing names its next page on another host: 'http://127.0.0.2:9/api/models?"),
        ("not-a-list", "the Hub's listing of models is not a list of models, each with an id"),
        ("other-author", "the Hub's listing of org's models names 'someone-else/model'"),
        ("bad-id", "the Hub's listing of org's models names 'org/model@main'"),
        ("endless", "the Hub's listing names a model twice"),
    ],
)
def test_a_hostile_listing_of_an_authors_models_is_one_line_and_nothing_is_checked(tmp_path, listing, problem):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    repositories = {"org/a": HubRepository({"main": checkpoint}), "org/b": HubRepository({"main": checkpoint})}
    with serve_hub(repositories, page=1, listing=listing) as (endpoint, served):
        result = run_cli("check", "hf://org", env=client_environment(endpoint, tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"scalar-scales: error: hf://org: {problem}")
    assert result.stderr.count("\n") == 1
    assert not any(path.startswith("/org/") for path, _ in served.requests)  # no model was read
