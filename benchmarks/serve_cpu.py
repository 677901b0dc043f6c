"""vLLM on the CPU: the toy MoE served as emulated NVFP4 against the same model unquantized, side by side.

    OMP_NUM_THREADS=1 python benchmarks/serve_cpu.py ARTIFACTS [--rounds 3] [--tokens 64] [--baseline TREE]

ARTIFACTS is a folder from scripts/make_artifacts.py (bf16/ and
ct-<version>/NVFP4-legacy, NVFP4A16-legacy) and
scripts/make_modelopt_artifacts.py (modelopt/nvfp4 and modelopt/w4a16:
NVIDIA's exporter on the same toy, whose unquantized weights are bf16/'s).
Run it in the serving environment. ModelOpt's exports run in bf16, the one
dtype of the two vLLM takes them in that the CPU runs well, against the
unquantized model and compressed-tensors' NVFP4 in bf16. NVFP4 is also served with tensor parallelism 2 (vLLM's
multiprocess executor, a worker per core). Each measurement is a fresh process, as a server would be:
engine start-up (the ``vllm.LLM`` constructor, after imports) and decode
throughput (4 prompts, greedy, ``--tokens`` new tokens each, EOS ignored).
Rounds rotate the order of the models; figures are medians, and ratios are
emulated / unquantized. One more NVFP4 row runs its linear layers on vLLM's
own NVFP4 emulation (``EmulationNvFp4LinearKernel``, registered for the CPU
with vLLM's ``register_linear_kernel``), its experts on the plugin's, against
the plugin's for both (docs/vllm.md says why the plugin keeps its own).
``--baseline TREE`` also serves NVFP4 and NVFP4A16 with the plugin of another
checkout of this project (an earlier commit, from ``git worktree add TREE
REV``), in the same rounds, and prints this tree's throughput over TREE's.

The ratio is taken in float32: in a sandbox of this project the unquantized
bf16 baseline died with SIGILL in vLLM's AMX MoE kernel (the CPU reported AMX,
the OS did not grant it). W4A4 does not use that kernel, and NVFP4A16 only
where the OS grants AMX; an emulated W4A4 bf16 row is printed for reference.
ModelOpt's ratios need the unquantized bf16 row, so a CPU that reports AMX
its OS does not grant cannot take them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scalar_scales_testkit.engine import KV_CACHE_BYTES, engine_arguments, engine_environment

PROMPTS = [[5 + i, 6 + i, 7 + i, 8 + i] for i in range(4)]
RESULT = "serve_cpu result: "
"""Marks the measurement among what the engine's worker processes also print."""


def one(model: str, dtype: str, tokens: int, tensor_parallel: int, linear: str) -> dict[str, float]:
    """Start an engine and decode; runs in its own process. ``linear="vllm"``: linear layers run vLLM's own NVFP4
    emulation (``EmulationNvFp4LinearKernel``, registered for the CPU as vLLM offers), the experts the plugin's."""
    from vllm import LLM, SamplingParams

    if linear == "vllm":
        from vllm.model_executor.kernels import linear as kernels
        from vllm.platforms import PlatformEnum

        kernels.register_linear_kernel(kernels.EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")

    start = time.perf_counter()
    llm = LLM(
        model=model,
        dtype=dtype,
        max_model_len=256,
        max_num_seqs=4,
        enforce_eager=True,
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        **engine_arguments(tensor_parallel),
    )
    started = time.perf_counter() - start
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"startup_s": started, "tokens_per_s": generated / elapsed}


def measure(
    model: Path, dtype: str, tokens: int, tensor_parallel: int = 1, linear: str = "ours", tree: Path | None = None
) -> dict[str, float]:
    """One engine in a fresh process: in-process for one rank; for more, vLLM's multiprocess executor, a worker
    per rank, each bound to its own core. ``tree``: the plugin of that checkout instead of this one."""
    env = {**os.environ, **engine_environment(tensor_parallel), **({"PYTHONPATH": str(tree)} if tree else {})}
    command = [
        sys.executable,
        __file__,
        "--one",
        str(model),
        "--dtype",
        dtype,
        "--tokens",
        str(tokens),
        "--tensor-parallel",
        str(tensor_parallel),
        "--linear",
        linear,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"{model} ({dtype}) failed:\n{result.stderr[-3000:]}")
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(line.removeprefix(RESULT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--tensor-parallel", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--linear", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, help="another checkout of this project, served in the same rounds")
    args = parser.parse_args()
    if args.one:
        print(
            RESULT + json.dumps(one(args.one, args.dtype, args.tokens, args.tensor_parallel, args.linear)), flush=True
        )
        return

    producer = sorted(args.artifacts.glob("ct-*"))[0]
    cases = {
        "unquantized float32": (args.artifacts / "bf16", "float32"),
        "NVFP4 emulated float32": (producer / "NVFP4-legacy", "float32"),
        "NVFP4A16 emulated float32": (producer / "NVFP4A16-legacy", "float32"),
        "unquantized bf16": (args.artifacts / "bf16", "bfloat16"),
        "NVFP4 emulated bf16": (producer / "NVFP4-legacy", "bfloat16"),
        "ModelOpt NVFP4 emulated bf16": (args.artifacts / "modelopt" / "nvfp4", "bfloat16"),
        "ModelOpt W4A16 emulated bf16": (args.artifacts / "modelopt" / "w4a16", "bfloat16"),
        "NVFP4 emulated float32 TP=2": (producer / "NVFP4-legacy", "float32", 2),
        "NVFP4 vLLM linear emulation": (producer / "NVFP4-legacy", "float32", 1, "vllm"),
    }
    if args.baseline is not None:
        cases["NVFP4 baseline float32"] = (producer / "NVFP4-legacy", "float32", 1, "ours", args.baseline)
        cases["NVFP4A16 baseline float32"] = (producer / "NVFP4A16-legacy", "float32", 1, "ours", args.baseline)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    names = list(cases)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            model, dtype, *parallel = cases[name]
            runs[name].append(measure(model, dtype, args.tokens, *parallel))

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    base = "unquantized float32"
    print(f"toy Qwen3-MoE, vLLM CPU, {args.rounds} rounds, 4 prompts x {args.tokens} tokens, medians")
    print("ratios against the unquantized model; TP=2 also against NVFP4 emulated float32 at TP=1 (below)")
    print(f"{'model':32} {'start-up s':>10} {'tokens/s':>9} {'start ratio':>11} {'tok/s ratio':>11}")
    for name in names:
        startup, rate = median(name, "startup_s"), median(name, "tokens_per_s")
        print(
            f"{name:32} {startup:10.2f} {rate:9.1f} {startup / median(base, 'startup_s'):11.2f} "
            f"{rate / median(base, 'tokens_per_s'):11.2f}"
        )
    single, split = "NVFP4 emulated float32", "NVFP4 emulated float32 TP=2"
    startup, rate = (median(split, key) / median(single, key) for key in ("startup_s", "tokens_per_s"))
    print(f"TP=2 / TP=1 (NVFP4 emulated float32): start-up {startup:.2f}, tokens/s {rate:.2f}")
    for name, other in (
        ("ModelOpt NVFP4 emulated bf16", "unquantized bf16"),
        ("ModelOpt W4A16 emulated bf16", "unquantized bf16"),
        ("ModelOpt NVFP4 emulated bf16", "NVFP4 emulated bf16"),
    ):
        startup, rate = (median(name, key) / median(other, key) for key in ("startup_s", "tokens_per_s"))
        print(f"{name} / {other}: start-up {startup:.2f}, tokens/s {rate:.2f}")
    theirs, ours = "NVFP4 vLLM linear emulation", "NVFP4 emulated float32"
    rate = median(theirs, "tokens_per_s") / median(ours, "tokens_per_s")
    print(
        f"vLLM's linear emulation / the plugin's (NVFP4 float32, experts emulated by the plugin): tokens/s {rate:.2f}"
    )


if __name__ == "__main__":
    main()
