"""The test kit of scalar-scales: what the tests, scripts and benchmarks share, and the product's wheel does not ship.

- ``checkpoints``: artifacts read through the product's torch-free header reader.
- ``cli``: small synthetic checkpoints, byte snapshots and a runner for the command line.
- ``synthetic``: a DeepSeek-V4-Flash-shaped NVFP4 checkpoint written without torch.
- ``producer``: the toy quantized through each llm-compressor save path, and loaded for reference.
- ``roundtrip``: the round trip's artifacts, its fixed prompts and the results it records.
- ``vllm_layers``: real vLLM MoE layers on the CPU, and loading into them.

Each module imports only what its side needs (``producer`` needs llm-compressor, ``vllm_layers`` vLLM),
so import the modules, not this package's names.
"""

__all__ = ["checkpoints", "cli", "producer", "roundtrip", "synthetic", "vllm_layers"]
