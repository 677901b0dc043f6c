"""The loader processes the SGLang tests load in (``scalar_scales_testkit.worker``, load_artifact.py ``--serve``):
a load after others in one process finds it as the first did, each request's log is its own, and a process
that died or cannot be reset is started again."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scalar_scales_testkit.roundtrip import artifacts_root
from scalar_scales_testkit.sglang_cpu import with_kv_a_scale_doubled
from scalar_scales_testkit.worker import Workers

SERVER = """
import ctypes, os, sys
from scalar_scales_testkit.worker import serve

broken = []

def handle(args):
    if args.get("exit"):
        os._exit(3)
    print("python stdout", args["n"])
    print("python stderr", args["n"], file=sys.stderr)
    os.write(1, b"native 1\\n")
    os.write(2, b"native 2\\n")
    ctypes.CDLL(None).printf(b"libc printf\\n")
    seen = os.environ.get("SET_BY_A_REQUEST")
    os.environ["SET_BY_A_REQUEST"] = str(args["n"])
    if args.get("break"):
        broken.append(True)
    if args.get("raise"):
        raise ValueError("in the request")
    return {"seen": seen}

serve(handle, start=lambda: print("started"), reset=lambda: not broken)
"""


@pytest.fixture
def server(tmp_path: Path) -> list[str]:
    (script := tmp_path / "server.py").write_text(SERVER)
    return [sys.executable, str(script)]


def test_each_request_has_its_own_log_of_fds_1_and_2_and_finds_the_environment_as_the_process_started(server):
    with Workers() as workers:
        worker = workers.shared(server, dict(os.environ))
        first, second = (worker.request({"n": n}, timeout=60) for n in (1, 2))
    assert first.log.startswith("started\n") and "started" not in second.log
    for n, reply in ((1, first), (2, second)):
        assert reply.failure is None and reply.result == {"seen": None}
        assert sorted(reply.log.removeprefix("started\n").splitlines()) == sorted(
            [f"python stdout {n}", f"python stderr {n}", "native 1", "native 2", "libc printf"]
        )
    assert first.pid == second.pid and (first.served_before, second.served_before) == (0, 1)
    assert workers.starts == 1


def test_a_request_that_raises_fails_with_its_traceback_and_the_process_serves_the_next(server):
    with Workers() as workers:
        worker = workers.shared(server, dict(os.environ))
        failed, then = (worker.request(args, timeout=60) for args in ({"n": 1, "raise": True}, {"n": 2}))
    assert failed.result is None and "ValueError: in the request" in failed.failure
    assert then.result == {"seen": None} and then.pid == failed.pid and workers.starts == 1


def test_a_process_that_cannot_be_reset_answers_and_the_next_request_starts_a_new_one(server):
    with Workers() as workers:
        worker = workers.shared(server, dict(os.environ))
        broken, then = (worker.request(args, timeout=60) for args in ({"n": 1, "break": True}, {"n": 2}))
    assert broken.result == {"seen": None} and then.result == {"seen": None}
    assert then.pid != broken.pid and then.served_before == 0 and then.log.startswith("started\n")
    assert workers.starts == 2


def test_a_request_whose_process_dies_runs_once_more_in_a_new_one_and_fails_where_it_dies_there_too(server):
    with Workers() as workers:
        worker = workers.shared(server, dict(os.environ))
        before = worker.request({"n": 1}, timeout=60)
        died = worker.request({"n": 2, "exit": True}, timeout=60)
        after = worker.request({"n": 3}, timeout=60)
        assert workers.starts == 3
    assert died.result is None and died.failure.endswith("died in its request 1")
    assert died.retried_after == f"worker process {before.pid} died in its request 2"
    assert len({before.pid, died.pid, after.pid}) == 3 and died.served_before == 0
    assert after.result == {"seen": None} and after.served_before == 0


def test_closing_the_workers_ends_every_process(server):
    with Workers() as workers:
        pids = [workers.shared(server, {**os.environ, "KEY": key}).request({"n": 1}, timeout=60).pid for key in "ab"]
        pids.append(workers.own(server, dict(os.environ)).request({"n": 1}, timeout=60).pid)
        assert len(set(pids)) == 3 and workers.starts == 3
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _result(found: dict) -> dict:
    return {key: value for key, value in found.items() if key not in ("log", "process", "loads_before")}


def test_a_load_after_others_in_one_loader_process_is_as_its_first(loader_process, artifact, copied):
    """The same artifact, first in a new loader process (with the plugin) and again in the same process after
    loads that failed in the model's ``load_weights`` (fused scales that differ), that failed after loading, in
    post-processing (an NVFP4 ``kv_b_proj``), and that loaded another model: the same result."""
    with_kv_a_scale_doubled(differing := copied(artifact("deepseek-v3", "legacy")))
    load = loader_process(plugins=True)
    first = load(artifact("deepseek-v3", "format2"))
    others = [
        load(differing),
        load(artifacts_root() / "toys" / "deepseek-v3" / "ct-0.19.0" / "NVFP4-format2"),
        load(artifact("glm4-moe-lite", "legacy")),
    ]
    again = load(artifact("deepseek-v3", "format2"))
    assert first["loaded"] and [found["loaded"] for found in others] == [False, False, True]
    assert others[0]["error"].startswith("FusedScalesDifferError") and others[1]["error"].startswith("AttributeError")
    assert _result(again) == _result(first)
    assert again["process"] == first["process"] and (first["loads_before"], again["loads_before"]) == (0, 4)
