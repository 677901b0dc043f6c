"""vLLM's engine on the CPU, started the same way by the engine tests and the serving benchmark.

One rank runs in the calling process. More ranks run vLLM's own
distributed engine: the multiprocess executor, a worker process per rank,
each rank's OpenMP threads bound to its own core, the ranks talking over
gloo and shared memory.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KV_CACHE_BYTES", "engine_environment", "parallel_arguments"]

KV_CACHE_BYTES = 64 << 20
"""Set, not derived: the CPU backend otherwise sizes the cache from free memory minus this process's RSS, which a
compiled engine on a loaded machine can push below zero."""


def engine_environment(tensor_parallel: int = 1, *, multiprocessing: bool = False) -> dict[str, str]:
    """The environment variables a process starting ``vllm.LLM`` needs: the engine core in that process unless
    ``multiprocessing`` (or more than one rank, which needs the multiprocess executor), and one core per rank."""
    environment = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1" if multiprocessing or tensor_parallel > 1 else "0"}
    if tensor_parallel > 1:
        environment["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(map(str, range(tensor_parallel)))
    return environment


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
