"""Real vLLM MoE layers on the CPU, for 0.23 (`FusedMoE`) and 0.32 (`RoutedExperts`), and loading into them.

Only the NVFP4 kernel selection is replaced: the CPU has no FP4 MoE kernel, so
``select_nvfp4_moe_backend`` would refuse to build the layer. Loading never
runs a kernel; the layer, its parameters, its quant method and its
``weight_loader`` are vLLM's own.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from scalar_scales_testkit.checkpoints import tensor_entries
from scalar_scales_testkit.roundtrip import checkpoint_tensors
from vllm_patch.nvfp4_emulation import MOE_PATCHES

__all__ = [
    "EXPERT_TENSOR",
    "SHARDS",
    "build_moe_layer",
    "build_router",
    "changed_vllm",
    "compressed_tensors_fake_quantize",
    "expert_tensors",
    "free_port",
    "init_distributed",
    "init_single_process_distributed",
    "is_routed_experts",
    "load_into_layer",
    "loaded_value",
    "moe_layers",
    "select_cpu_platform",
    "vllm_context",
]


def select_cpu_platform() -> None:
    """vLLM 0.23 ignores VLLM_TARGET_DEVICE; pick the CPU platform before vllm.config is imported."""
    import vllm.platforms as platforms

    if getattr(platforms, "_current_platform", None) is None:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()


def init_single_process_distributed() -> None:
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if not model_parallel_is_initialized():
        init_distributed(world_size=1, rank=0, port=free_port())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(*, world_size: int, rank: int, port: int) -> None:
    """Join a gloo group of ``world_size`` processes on 127.0.0.1:``port`` as ``rank``, all of them one
    tensor-parallel group (expert parallelism, when the vLLM config enables it, spans the same ranks)."""
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(
        world_size=world_size,
        rank=rank,
        local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    initialize_model_parallel(world_size, 1)


@contextlib.contextmanager
def vllm_context() -> Iterator[None]:
    """What building a real MoE layer needs on the CPU: a current vLLM config and a 1-process group."""
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        init_single_process_distributed()
        yield


def is_routed_experts() -> bool:
    try:
        import vllm.model_executor.layers.fused_moe.routed_experts  # noqa: F401
    except ImportError:
        return False
    return True


EXPERT_TENSOR = re.compile(r"^(?P<layer>.+\.experts)\.(?P<expert>\d+)\.(?P<projection>\w+)\.(?P<kind>\w+)$")
"""A per-expert checkpoint tensor, e.g. model.layers.0.mlp.experts.3.up_proj.weight_global_scale."""

SHARDS = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
"""Checkpoint projection -> vLLM shard, under the names vLLM's MoE models map by default."""


def moe_layers(artifact: Path) -> list[str]:
    """Every MoE layer of an artifact, as its checkpoint prefix (e.g. model.layers.0.mlp.experts)."""
    return sorted({match["layer"] for name in tensor_entries(artifact) if (match := EXPERT_TENSOR.match(name))})


def _quant_config(artifact: Path, config: dict[str, Any]) -> Any:
    """vLLM's quantization config of an artifact, from the file vLLM's ``get_quant_config`` reads: config.json's
    ``quantization_config`` where there is one (compressed-tensors', or ModelOpt's, which its exporter writes there
    too), hf_quant_config.json otherwise, or where a MIXED_PRECISION config.json leaves its ``quantized_layers``
    there."""
    declared = config.get("quantization_config")
    modelopt = artifact / "hf_quant_config.json"
    if declared is None or declared.get("quant_method") == "modelopt":
        from vllm.model_executor.layers.quantization.modelopt import (
            ModelOptMixedPrecisionConfig,
            ModelOptNvFp4Config,
        )

        algo = (declared or {}).get("quant_algo", "").upper()
        if declared is None or (algo == "MIXED_PRECISION" and "quantized_layers" not in declared):
            declared = json.loads(modelopt.read_text())
            algo = declared["quantization"]["quant_algo"].upper()
        return (ModelOptMixedPrecisionConfig if algo == "MIXED_PRECISION" else ModelOptNvFp4Config).from_config(
            declared
        )
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    return CompressedTensorsConfig.from_config(declared)


@contextlib.contextmanager
def _modelopt_backend_chosen() -> Iterator[None]:
    """ModelOpt's MoE method picks its NVFP4 backend through its own import of ``select_nvfp4_moe_backend``, which
    refuses the CPU: pick vLLM's EMULATION backend id there, so that vLLM builds the layer's parameters."""
    import vllm.model_executor.layers.quantization.modelopt as modelopt
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend

    original = modelopt.select_nvfp4_moe_backend
    modelopt.select_nvfp4_moe_backend = lambda *args, **kwargs: (NvFp4MoeBackend.EMULATION, None)
    try:
        yield
    finally:
        modelopt.select_nvfp4_moe_backend = original


def build_moe_layer(artifact: Path, prefix: str, vllm_config: Any = None) -> torch.nn.Module:
    """The MoE layer ``prefix`` of an artifact, sized by its config.json, with its compressed-tensors config (or
    ModelOpt's hf_quant_config.json), under ``vllm_config`` (default: a plain one, one rank)."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = json.loads((artifact / "config.json").read_text())
    quant_config = _quant_config(artifact, config)
    common = {
        "num_experts": config.get("num_experts") or config["num_local_experts"],
        "top_k": config.get("num_experts_per_tok", 2),
        "hidden_size": config["hidden_size"],
        "intermediate_size": config.get("moe_intermediate_size") or config["intermediate_size"],
        "quant_config": quant_config,
    }
    with set_current_vllm_config(vllm_config or VllmConfig()), MOE_PATCHES.applied(), _modelopt_backend_chosen():
        if is_routed_experts():
            from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory

            return FusedMoEFactory(**common, params_dtype=torch.bfloat16, prefix=prefix).routed_experts
        from vllm.model_executor.layers.fused_moe.layer import FusedMoE

        return FusedMoE(**common, params_dtype=torch.bfloat16, prefix=prefix)


def build_router(artifact: Path, prefix: str) -> torch.nn.Module:
    """The MoE router ``prefix`` (``model.layers.N.mlp.gate``) of a Qwen3-MoE artifact, as vLLM's
    ``Qwen3MoeSparseMoeBlock`` builds it: with the artifact's quantization config (``GateLinear`` since 0.32,
    ``ReplicatedLinear`` in 0.23). An NVFP4 router gets the emulation's kernel where vLLM picks one as it builds
    the layer (0.32 and 0.33): the CPU has none."""
    import vllm
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import ReplicatedLinear
    from vllm.model_executor.models import qwen3_moe

    from vllm_patch.nvfp4_emulation import EMULATION_PATCHES
    from vllm_patch.targets import MODELOPT_MODULE

    gate = getattr(qwen3_moe, "GateLinear", None)  # 0.23 has one, without a quantization config, and does not use it
    uses_gate = gate is not None and "quant_config" in inspect.signature(gate.__init__).parameters
    router = gate if uses_gate else ReplicatedLinear

    config = json.loads((artifact / "config.json").read_text())
    patches = EMULATION_PATCHES[MODELOPT_MODULE]
    emulated = patches.applied() if patches.accepts("vllm", vllm.__version__) else contextlib.nullcontext()
    with set_current_vllm_config(VllmConfig()), emulated:
        return router(
            config["hidden_size"],
            config.get("num_experts") or config["num_local_experts"],
            bias=False,
            quant_config=_quant_config(artifact, config),
            prefix=prefix,
        )


def expert_tensors(artifact: Path, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """Checkpoint tensors of layer ``prefix``'s experts, as on disk."""
    return list(checkpoint_tensors(artifact, lambda name: name.startswith(f"{prefix}.")).items())


def loaded_value(layer: torch.nn.Module, name: str, local: int | None = None) -> torch.Tensor:
    """Where a per-expert global scale of the checkpoint landed in the layer: w13 rows 0 (gate) and 1 (up), w2;
    at the expert's index, or at ``local`` on a rank of an expert-parallel layer."""
    match = EXPERT_TENSOR.match(name)
    assert match, name
    shard = SHARDS[match["projection"]]
    index = int(match["expert"]) if local is None else local
    param = getattr(layer, f"{'w2' if shard == 'w2' else 'w13'}_{match['kind']}").data[index]
    return param if shard == "w2" else param[0 if shard == "w1" else 1]


def load_into_layer(layer: torch.nn.Module, weights: list[tuple[str, torch.Tensor]]) -> None:
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
        num_experts=layer.global_num_experts,
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


def changed_vllm(folder: Path, module: str, change: Callable[[str], str]) -> Path:
    """A copy of the installed vLLM, in ``folder``, whose ``module`` (dotted) has the source ``change`` makes of it,
    as a release that changed that code would have: put ``folder`` first on ``PYTHONPATH`` to run it.

    Every other file is a link to the installed one (vLLM is hundreds of megabytes), and its distribution's
    metadata comes along, so versions and entry points read as they do.
    """
    import vllm

    package = Path(vllm.__file__).parent
    changed = Path(*module.split(".")[1:]).with_suffix(".py")
    (folder / "vllm").mkdir(parents=True)
    for source in sorted(package.rglob("*")):
        relative = source.relative_to(package)
        if "__pycache__" in relative.parts:
            continue
        target = folder / "vllm" / relative
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif relative == changed:
            text = source.read_text()
            new = change(text)
            assert new != text, f"the change left {module} as it was"
            target.write_text(new)
        else:
            target.symlink_to(source)
    for info in package.parent.glob("vllm*.dist-info"):
        shutil.copytree(info, folder / info.name)
    return folder


def compressed_tensors_fake_quantize(x: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """The reference: compressed-tensors' own dynamic NVFP4 activation quantization, as its W4A4 layers run it."""
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    args = preset_name_to_scheme("NVFP4", ["Linear"]).input_activations
    global_scale = global_scale.reshape(1).float()
    scale, zero_point = compute_dynamic_scales_and_zp(value=x, args=args, module=None, global_scale=global_scale)
    return fake_quantize(x=x, scale=scale, zero_point=zero_point, args=args, global_scale=global_scale)
