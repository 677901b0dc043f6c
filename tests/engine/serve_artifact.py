"""Serve checkpoints with ``vllm.LLM``, one request after another in this process (run as a script by the tests).

    python serve_artifact.py < requests

Each line of stdin is a JSON request::

    {"model": DIR, "out": OUT.json, "log": LOG, "dtype": "bfloat16", "prompts": [[5, 6, 7], ...],
     "max_tokens": 16, "compiled": false, "tensor_parallel": 1, "expert_parallel": false,
     "max_num_seqs": 4, "tokenizer": DIR or null}

and each is served in a new ``vllm.LLM``, deleted afterwards (``gc.collect()``,
as scripts/check_evidence.py's ``serve_from`` serves many checkpoints in one
process). While a request is served, file descriptors 1 and 2 point at its
``log`` file, so everything the request prints lands there and nowhere else:
vLLM's logger, tracebacks, native output, and the output of the worker
processes vLLM starts for it, which inherit them. vLLM's ``*_once`` log
lines are forgotten before each request, so each engine logs them as in a
process of its own (the tests count the emulation's warning line per engine),
and the environment variables vLLM's CPU platform sets while it configures
an engine (``LD_PRELOAD``, ``VLLM_WORKER_MULTIPROC_METHOD``...) are put back
after it, so each engine starts from the environment the process started with.
The process title names the model while it is served, as the command line of
a process serving one checkpoint would.

For each request one JSON line goes back on the stdout this process started
with: ``{"ok": true|false, "pid": PID}``. An engine that fails to start or to
generate has its traceback in its log, answers ``ok: false``, and the process
exits with status 1: nothing of a half-built engine is left to the next
request, which the caller serves in a new process.

With a tensor-parallel size above 1, vLLM's own distributed engine runs: the
multiprocess executor, one worker process per rank, the ranks talking over
gloo and shared memory (the environment: scalar_scales_testkit.engine).

Writes to ``out`` this process's id, the greedy token ids of each prompt
and, per prompt position after the first, the centred prompt
log-probabilities over the whole vocabulary (log-probabilities minus their
mean: the logits minus their mean, because log-softmax only shifts logits by
a constant per position).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import traceback
from typing import Any

from scalar_scales_testkit.engine import KV_CACHE_BYTES, engine_arguments


def generate(request: dict[str, Any]) -> dict[str, Any]:
    """Serve one request in a new engine, and delete the engine."""
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=request["model"],
        tokenizer=request.get("tokenizer"),
        dtype=request.get("dtype", "bfloat16"),
        max_model_len=128,
        max_num_seqs=request.get("max_num_seqs", 4),
        enforce_eager=not request.get("compiled", False),
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        max_logprobs=-1,
        **engine_arguments(request.get("tensor_parallel", 1), request.get("expert_parallel", False)),
    )
    try:
        vocab = llm.llm_engine.model_config.get_vocab_size()
        params = SamplingParams(max_tokens=request.get("max_tokens", 16), temperature=0.0, prompt_logprobs=vocab)
        outputs = llm.generate([{"prompt_token_ids": p} for p in request["prompts"]], params, use_tqdm=False)
    finally:
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1":
            llm.llm_engine.engine_core.shutdown()  # its processes end now, while this request's log is theirs
        del llm
        gc.collect()
    result: dict[str, Any] = {"pid": os.getpid(), "tokens": [], "centred_logprobs": []}
    for output in outputs:
        result["tokens"].append(list(output.outputs[0].token_ids))
        rows = []
        for position in output.prompt_logprobs[1:]:
            row = [0.0] * vocab
            for token, logprob in position.items():
                row[token] = logprob.logprob
            mean = sum(row) / vocab
            rows.append([value - mean for value in row])
        result["centred_logprobs"].append(rows)
    return result


LIBC = ctypes.CDLL(None)


def point_output_at(fd: int) -> None:
    """Descriptors 1 and 2 (Python's and native output alike) to ``fd``, after what was written so far, Python's
    buffers and libc's."""
    sys.stdout.flush()
    sys.stderr.flush()
    LIBC.fflush(None)
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def forget_once_lines() -> None:
    """vLLM's ``info_once``, ``warning_once``... remember what they logged for the life of the process."""
    from vllm import logger

    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once", "_print_error_once"):
        getattr(logger, name).cache_clear()


def set_title(title: str) -> None:
    try:
        import setproctitle
    except ImportError:  # vLLM depends on it; without it the title stays the command line
        return
    setproctitle.setproctitle(title)


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # the caller's pipe, before 1 and 2 are redirected
    idle = os.dup(2)  # the process's own log, for what it prints between requests
    point_output_at(idle)
    base_title = " ".join([sys.executable, *sys.argv])
    environment = dict(os.environ)  # vLLM's CPU platform sets variables while it configures an engine
    for line in sys.stdin:
        request = json.loads(line)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        point_output_at(log)
        set_title(f"{base_title} {request['model']}")
        ok = True
        try:
            forget_once_lines()
            result = generate(request)
            with open(request["out"], "w") as f:
                json.dump(result, f)
        except Exception:
            traceback.print_exc()
            ok = False
        point_output_at(idle)
        os.close(log)
        set_title(base_title)
        os.environ.clear()
        os.environ.update(environment)
        answers.write(json.dumps({"ok": ok, "pid": os.getpid()}) + "\n")
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
