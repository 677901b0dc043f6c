"""The test kit of scalar-scales: what the tests, scripts and benchmarks share, and the product's wheel does not ship.

- ``broken``: one broken checkpoint per ``check`` rule.
- ``checkpoints``: artifacts read through the product's torch-free header reader.
- ``cli``: small synthetic checkpoints, byte snapshots and a runner for the command line.
- ``engine``: how the engine tests and the serving benchmark start vLLM's engine, one rank or several.
- ``hub_server``: a local server that answers as the Hugging Face Hub does, for ``check hf://``.
- ``synthetic``: a DeepSeek-V4-Flash-shaped NVFP4 checkpoint written without torch.
- ``replicas``: tiny checkpoints written to a reported checkpoint's header layout.
- ``reported``: failures users reported in public threads, as replicas, with what ``check`` must say of each.
- ``refusals``: the engines' refusals ``check`` prints of a checkpoint, from the package's observations.
- ``producer``: the toy quantized through each llm-compressor save path, and loaded for reference.
- ``roundtrip``: the round trip's artifacts, its fixed prompts and the results it records.
- ``sglang_cpu``: SGLang's own ``get_model`` run on the CPU.
- ``sglang_loaders``: SGLang's loaders that fuse MLA a-projections, each given a checkpoint it loads.
- ``toys``: toy MoE architectures beyond the built-in Qwen3-MoE (OLMoE, Qwen2-MoE, DeepSeek-V3).
- ``vllm_layers``: real vLLM MoE layers on the CPU, and loading into them.

Each module imports only what its side needs (``producer`` needs llm-compressor, ``vllm_layers`` vLLM),
so import the modules, not this package's names.
"""

__all__ = [
    "broken",
    "checkpoints",
    "cli",
    "engine",
    "hub_server",
    "producer",
    "refusals",
    "replicas",
    "reported",
    "roundtrip",
    "sglang_cpu",
    "sglang_loaders",
    "synthetic",
    "toys",
    "vllm_layers",
]
