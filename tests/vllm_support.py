"""Real vLLM MoE layers on the CPU, for 0.23 (`FusedMoE`) and 0.32 (`RoutedExperts`), and loading into them.

Only the NVFP4 kernel selection is replaced: the CPU has no FP4 MoE kernel, so
``select_nvfp4_moe_backend`` would refuse to build the layer. Loading never
runs a kernel; the layer, its parameters, its quant method and its
``weight_loader`` are vLLM's own.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import torch


def select_cpu_platform() -> None:
    """vLLM 0.23 ignores VLLM_TARGET_DEVICE; pick the CPU platform before vllm.config is imported."""
    import vllm.platforms as platforms

    if getattr(platforms, "_current_platform", None) is None:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()


def init_single_process_distributed() -> None:
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(
        world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo"
    )
    initialize_model_parallel(1, 1)


def stub_nvfp4_backend_selection() -> None:
    """The CPU has no NVFP4 MoE kernel; choose the emulation backend so the layer can be built."""
    import vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w4a4_nvfp4 as nvfp4  # noqa: E501
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend

    nvfp4.select_nvfp4_moe_backend = lambda config, weight_key, activation_key: (NvFp4MoeBackend.EMULATION, None)


def is_routed_experts() -> bool:
    try:
        import vllm.model_executor.layers.fused_moe.routed_experts  # noqa: F401
    except ImportError:
        return False
    return True


def build_moe_layer(artifact: Path, layer_index: int, *, experts: int = 8) -> torch.nn.Module:
    """The MoE layer of the toy model, with the artifact's compressed-tensors quantization config."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    quantization_config = json.loads((artifact / "config.json").read_text())["quantization_config"]
    prefix = f"model.layers.{layer_index}.mlp.experts"
    with set_current_vllm_config(VllmConfig()):
        config = CompressedTensorsConfig.from_config(quantization_config)
        common = dict(num_experts=experts, top_k=2, hidden_size=128, intermediate_size=64, quant_config=config)
        if is_routed_experts():
            from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory

            return FusedMoEFactory(**common, params_dtype=torch.bfloat16, prefix=prefix).routed_experts
        from vllm.model_executor.layers.fused_moe.layer import FusedMoE

        return FusedMoE(**common, params_dtype=torch.bfloat16, prefix=prefix)


def expert_tensors(artifact: Path, layer_index: int, suffixes: tuple[str, ...]) -> Iterator[tuple[str, torch.Tensor]]:
    """Checkpoint tensors of one layer's experts whose names end in ``suffixes``, as on disk."""
    from safetensors import safe_open

    prefix = f"model.layers.{layer_index}.mlp.experts."
    for shard in sorted(artifact.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                if name.startswith(prefix) and name.endswith(suffixes):
                    yield name, f.get_tensor(name)


def load_into_layer(layer: torch.nn.Module, weights: list[tuple[str, torch.Tensor]], *, experts: int = 8) -> None:
    """Load checkpoint tensors the way vLLM's Qwen3-MoE model does, through the real ``weight_loader``.

    0.32: ``RoutedExperts.load_weights`` (names relative to the layer).
    0.23: ``FusedMoE.make_expert_params_mapping`` and ``param.weight_loader``.
    """
    if is_routed_experts():
        names = [name.removeprefix(f"{layer.layer_name}.") for name, _ in weights]
        list(layer.load_weights(zip(names, (tensor for _, tensor in weights), strict=True)))
        return
    mapping = type(layer).make_expert_params_mapping(
        model=layer,
        ckpt_gate_proj_name="gate_proj",
        ckpt_down_proj_name="down_proj",
        ckpt_up_proj_name="up_proj",
        num_experts=experts,
    )
    for name, tensor in weights:
        for param_name, weight_name, expert_id, shard_id in mapping:
            if weight_name not in name:
                continue
            attribute = name.replace(weight_name, param_name).rsplit("experts.", 1)[1]
            param = getattr(layer, attribute)
            param.weight_loader(param, tensor, name, shard_id=shard_id, expert_id=expert_id)
            break
        else:
            raise AssertionError(f"no vLLM expert mapping for {name}")
