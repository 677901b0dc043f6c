"""Serve one checkpoint with ``vllm.LLM`` and write what it produced as JSON (run as a script by the tests).

    python serve_artifact.py MODEL OUT.json --dtype bfloat16 --prompts '[[5, 6, 7], ...]' --max-tokens 16
        [--compiled] [--tensor-parallel-size 2 [--expert-parallel]] [--max-num-seqs 1]
        [--tokenizer DIR]

With a tensor-parallel size above 1, vLLM's own distributed engine runs: the
multiprocess executor, one worker process per rank, the ranks talking over
gloo and shared memory (the environment: scalar_scales_testkit.engine).

Writes this process's id, the greedy token ids of each prompt and, per prompt position after
the first, the centred prompt log-probabilities over the whole vocabulary
(log-probabilities minus their mean: the logits minus their mean, because
log-softmax only shifts logits by a constant per position).
"""

from __future__ import annotations

import argparse
import json
import os

from scalar_scales_testkit.engine import KV_CACHE_BYTES, parallel_arguments


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--compiled", action="store_true", help="let vLLM compile the model (default: eager)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--expert-parallel", action="store_true", help="vLLM's enable_expert_parallel")
    parser.add_argument("--max-num-seqs", type=int, default=4, help="1: one request at a time, never batched")
    parser.add_argument("--tokenizer", help="where the tokenizer is, for a checkpoint written without one")
    args = parser.parse_args()

    from vllm import LLM, SamplingParams

    prompts = json.loads(args.prompts)
    llm = LLM(
        model=args.model,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        max_model_len=128,
        max_num_seqs=args.max_num_seqs,
        enforce_eager=not args.compiled,
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        max_logprobs=-1,
        **parallel_arguments(args.tensor_parallel_size, args.expert_parallel),
    )
    vocab = llm.llm_engine.model_config.get_vocab_size()
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, prompt_logprobs=vocab)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    result = {"pid": os.getpid(), "tokens": [], "centred_logprobs": []}
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
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
