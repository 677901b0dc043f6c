"""SGLang's own model loading, run on the CPU: ``get_model`` on an artifact, as SGLang's scheduler calls it.

What the CPU lacks is answered here, and only that:

- SGLang's distributed groups, which its layers need even at TP=1: one gloo
  process, as SGLang's own layer tests set them up (``sglang.test.layer_ut_utils``);
- NVFP4's platform gates: the linear scheme asks CUDA for the device's
  capability, and the MoE scheme refuses all but Blackwell. They are answered
  "supported", so every layer is built as on a Blackwell GPU. CUDA streams
  a model builds whatever the device (Kimi-K3's, for overlap) are stand-ins
  that raise on use. Loading never
  runs a kernel; post-processing that needs CUDA (W4A16's Marlin repack)
  fails as on any CPU, so the tests load NVFP4 (W4A4) artifacts only;
- config fields SGLang's DeepSeek-family models read and transformers' configs
  of the toys do not carry (``moe_layer_freq``, ``scoring_func``; DeepSeek-V3's
  published config has both), and a YaRN of factor 1 as ``rope_scaling``:
  SGLang's CPU rotary embedding is DeepSeek's YaRN only. They go in through
  SGLang's own ``json_model_override_args``.

One process may load one artifact after another: ``unload`` takes down what
``load_model`` set up (SGLang's model-parallel groups and distributed
environment, its published configuration), and ``nothing_loaded`` says
whether the process is back as it was before the first load.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_OVERRIDES",
    "FUSED",
    "FUSED_LAYERS",
    "GLOBAL_SCALES",
    "MLA_A_PROJECTIONS",
    "MODELS",
    "computed_weights",
    "fused_global_scales",
    "fused_scales_on_disk",
    "load_configured",
    "load_model",
    "loaded_parameter",
    "model_class",
    "model_config",
    "nothing_loaded",
    "unload",
    "unswizzled",
    "with_kv_a_scale_doubled",
]

MODELS = {"deepseek-v3": "DeepseekV3ForCausalLM", "glm4-moe-lite": "Glm4MoeLiteForCausalLM"}
"""The toys (scalar_scales_testkit.toys) SGLang loads in the tests, and the SGLang model class each becomes."""

CONFIG_OVERRIDES: dict[str, Any] = {
    "moe_layer_freq": 1,
    "scoring_func": "sigmoid",
    "rope_scaling": {
        "type": "yarn",
        "rope_type": "deepseek_yarn",
        "factor": 1.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}


def _answer_platform_gates() -> None:
    from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from sglang.srt.layers.quantization.compressed_tensors.schemes.compressed_tensors_w4a4_nvfp4_moe import (
        CompressedTensorsW4A4Nvfp4MoE,
    )

    CompressedTensorsConfig._check_scheme_supported = lambda self, min_capability, error=True: True
    CompressedTensorsW4A4Nvfp4MoE.requires_blackwell = False
    import torch

    if not torch.cuda.is_available():
        torch.cuda.Stream = _UnusedStream  # type: ignore[misc]


class _UnusedStream:
    """What ``torch.cuda.Stream()`` builds on the CPU: Kimi-K3's model builds three streams for overlap in its
    constructor, whatever the device, and loading uses none (any use of one raises)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"a CUDA stream's {name} on the CPU: the tests load, they do not run the model")


def _one_process_groups(server_args: Any) -> None:
    for key, value in {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(key, value)
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context

    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    reset_context()
    publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
    get_parallel().override_permanently(world_group=parallel_state._WORLD)
    parallel_state.initialize_model_parallel(backend="gloo")


def load_model(artifact: Path, *, port: int, draft: bool = False, overrides: dict[str, Any] | None = None) -> Any:
    """SGLang's model for ``artifact``, its weights loaded and post-processed by ``get_model``, with SGLang's
    logging configured first, as its scheduler does; an error in loading propagates as SGLang raised it.
    ``draft``: as SGLang's speculative worker loads a draft model (``ModelConfig(is_draft_model=True)``, which
    makes DeepSeek's, GLM's, LongCat's and the other MTP models their NextN class). ``overrides`` replace
    :data:`CONFIG_OVERRIDES`, which only the DeepSeek-family toys need (a model of another family, Qwen3-MoE,
    takes ``{}``: its rotary embedding is no YaRN)."""
    return load_configured(model_config(artifact, port=port, draft=draft, overrides=overrides))


def model_config(artifact: Path, *, port: int, draft: bool = False, overrides: dict[str, Any] | None = None) -> Any:
    """The ``ModelConfig`` SGLang's scheduler builds for ``artifact`` (:func:`load_model`'s arguments), with the
    process set up for ``get_model`` as :func:`load_model` says."""
    os.environ["MASTER_PORT"] = str(port)
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    from sglang.srt.utils import configure_logger

    server_args = ServerArgs(
        model_path=str(artifact),
        device="cpu",
        tp_size=1,
        attention_backend="torch_native",
        sampling_backend="pytorch",
        disable_cuda_graph=True,
        json_model_override_args=json.dumps(CONFIG_OVERRIDES if overrides is None else overrides),
    )
    configure_logger(server_args)
    set_global_server_args_for_scheduler(server_args)
    from sglang.srt.configs.model_config import ModelConfig

    _one_process_groups(server_args)
    _answer_platform_gates()
    return ModelConfig.from_server_args(server_args, is_draft_model=draft)


def model_class(config: Any) -> str:
    """The model class SGLang loads for ``config`` (a :func:`model_config`), by its own rule
    (``get_model_architecture``): the first of the config's ``architectures`` its registry has, after a draft's
    is made its draft class."""
    from sglang.srt.model_loader.utils import get_model_architecture

    return str(get_model_architecture(config)[1])


def load_configured(config: Any) -> Any:
    """SGLang's model for ``config`` (a :func:`model_config`), loaded by ``get_model`` as :func:`load_model` says."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import get_model

    return get_model(model_config=config, load_config=LoadConfig(load_format="auto"), device_config=DeviceConfig("cpu"))


def unload() -> None:
    """Take down what ``load_model`` set up, as SGLang takes an engine down: its model-parallel groups
    (``destroy_model_parallel``), its world group and torch's process group (``destroy_distributed_environment``),
    the configuration it published (``reset_context``); then collect what no longer has a reference (the model,
    once its caller has let it go). What holds for every load (the platform gates) stays."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import reset_context

    try:
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
    finally:
        reset_context()
        gc.collect()


def nothing_loaded() -> bool:
    """Whether this process holds none of what ``load_model`` sets up: no torch process group, no SGLang world
    or model-parallel group, no published configuration."""
    if "sglang.srt.distributed.parallel_state" not in sys.modules:
        return True
    import torch.distributed
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state

    return (
        not torch.distributed.is_initialized()
        and parallel_state._WORLD is None
        and not parallel_state.model_parallel_is_initialized()
        and runtime_context._CONTEXT._server_args is None
    )


def fused_global_scales(model: Any) -> dict[str, list[float]]:
    """The global scales of every layer the model fused from several of the checkpoint's, by parameter name."""
    return {
        name: loaded_parameter(model, name)
        for name, _ in model.named_parameters()
        if name.endswith(GLOBAL_SCALES) and any(f".{layer}." in name for layer in FUSED_LAYERS)
    }


def loaded_parameter(model: Any, name: str) -> list[float]:
    """A loaded parameter's values, flattened (for the fused layers' global scales)."""
    return [float(v) for v in dict(model.named_parameters())[name].detach().reshape(-1).tolist()]


MLA_A_PROJECTIONS = ("q_a_proj", "kv_a_proj_with_mqa")
"""The projections SGLang fuses into one, whose global scales its loaders concatenate (or pick one of)."""
FUSED_LAYERS = ("fused_qkv_a_proj_with_mqa", "fused_qkv_a_g_proj_with_mqa")
"""The layers SGLang's MLA models fuse the a-projections into (dots.3 adds ``g_proj``)."""
FUSED = "model.layers.{}.self_attn.fused_qkv_a_proj_with_mqa.{}"
"""SGLang's fused MLA a-projection of a layer, and one of its global scales."""
_PART = "model.layers.{}.self_attn.{}.{}"
GLOBAL_SCALES = ("weight_global_scale", "input_global_scale")


def fused_scales_on_disk(artifact: Path, projection: str) -> dict[str, list[float]]:
    """Each layer's global scales of ``projection`` (``q_a_proj``, ``kv_a_proj_with_mqa``) as the artifact holds
    them, named as the fused layer's."""
    from safetensors.torch import load_file

    tensors = load_file(artifact / "model.safetensors")
    layers = json.loads((artifact / "config.json").read_text())["num_hidden_layers"]
    return {
        FUSED.format(layer, scale): tensors[_PART.format(layer, projection, scale)].reshape(-1).tolist()
        for layer in range(layers)
        for scale in GLOBAL_SCALES
    }


def with_kv_a_scale_doubled(artifact: Path) -> tuple[float, float]:
    """Rewrite the artifact with layer 0's ``kv_a_proj_with_mqa`` weight global scale unlike ``q_a_proj``'s, as
    a producer that does not share fused layers' global scales writes it (llm-compressor shares them); return
    the two values."""
    from safetensors.torch import load_file, save_file

    shard = artifact / "model.safetensors"
    tensors = load_file(shard)
    kv_a, q_a = (_PART.format(0, part, "weight_global_scale") for part in ("kv_a_proj_with_mqa", "q_a_proj"))
    tensors[kv_a] = tensors[kv_a] * 2
    save_file(tensors, shard, metadata={"format": "pt"})
    return tensors[q_a].item(), tensors[kv_a].item()


def unswizzled(scale: Any, rows: int, columns: int) -> Any:
    """Group scales back in rows, ``rows`` × ``columns``, from the blockwise interleaved layout SGLang's post-load
    processing puts them in for its NVFP4 kernels (``swizzle_blockscale``, of which this is the inverse: its
    permutation is its own inverse); one matrix or a batch of them (experts)."""
    batch = scale.reshape(-1, *scale.shape[-2:])
    count, padded_rows, padded_columns = batch.shape
    tiles = batch.reshape(count, padded_rows // 128, padded_columns // 4, 32, 4, 4).permute(0, 1, 4, 3, 2, 5)
    out = tiles.reshape(count, padded_rows, padded_columns)[:, :rows, :columns]
    return out if scale.ndim == 3 else out[0]


_UNFUSED = {"fused_qkv_a_proj_with_mqa": ("q_a_proj", "kv_a_proj_with_mqa"), "gate_up_proj": ("gate_proj", "up_proj")}
"""The checkpoint's modules each layer SGLang fuses on load holds, in the order of its rows."""


def computed_weights(model: Any) -> dict[str, Any]:
    """The NVFP4 weights a loaded model computes with, every one of them, by the checkpoint's module names, in
    float32: each NVFP4 linear layer's (a fused one split back into the checkpoint's modules: the MLA
    a-projections, ``q_a_proj`` and ``kv_a_proj_with_mqa``, and an MLP's ``gate_proj`` and ``up_proj``) and each
    routed expert's, dequantized by SGLang's own ``dequantize_nvfp4`` from what its post-load processing left
    (group scales swizzled for its kernels; one global scale per fused layer, the largest of its parts'; one w13
    global scale per expert, gate's, for gate and up both; w13's rows in the order its loader laid them, up
    first for its CUTLASS kernel)."""
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import _weight_layout_method
    from sglang.srt.layers.quantization.dequantization import NVFP4_BLOCK_SIZE, dequantize_nvfp4

    from scalar_scales_testkit.roundtrip import experts_by_module

    def dequantized(packed: Any, scale: Any, decode: Any) -> Any:
        rows, columns = packed.shape[-2], packed.shape[-1] * 2 // NVFP4_BLOCK_SIZE
        return dequantize_nvfp4(packed, unswizzled(scale, rows, columns), decode, out_dtype=torch.float32)

    computed = {}
    q_lora_rank = model.config.q_lora_rank
    for name, module in model.named_modules():
        if name.endswith(".mlp.experts") and hasattr(module, "w13_weight_scale_2"):
            w13, w2 = (
                dequantized(
                    getattr(module, f"{p}_weight"),
                    getattr(module, f"{p}_weight_scale"),
                    getattr(module, f"{p}_weight_scale_2").reshape(-1, 1, 1),
                )
                for p in ("w13", "w2")
            )
            up_first = bool(getattr(_weight_layout_method(module), "load_up_proj_weight_first", False))
            computed |= experts_by_module(name, w13, w2, up_first=up_first)
        elif hasattr(module, "weight_packed") and hasattr(module, "weight_global_scale"):
            weight = dequantized(module.weight_packed, module.weight_scale, 1 / module.weight_global_scale)
            computed |= _unfused(name, weight, module, q_lora_rank)
    return computed


def _unfused(name: str, weight: Any, module: Any, q_lora_rank: int) -> dict[str, Any]:
    """A linear layer's dequantized weight by the checkpoint's module names: a layer SGLang fused on load split
    back into its parts (the MLA a-projections by ``q_lora_rank``, a merged layer by its ``output_sizes``)."""
    parent, _, leaf = name.rpartition(".")
    if leaf not in _UNFUSED:
        return {name: weight}
    sizes = [q_lora_rank, len(weight) - q_lora_rank] if leaf == "fused_qkv_a_proj_with_mqa" else module.output_sizes
    return {f"{parent}.{part}": piece for part, piece in zip(_UNFUSED[leaf], weight.split(list(sizes)), strict=True)}
