"""Real ModelOpt checkpoints: the toys quantized and exported by NVIDIA's own exporter (nvidia-modelopt) on the
CPU, as its examples do: ``mtq.quantize(model, config, forward_loop)`` over a few random-token batches, then
``export_hf_checkpoint``.

Each export is one of ModelOpt's own quantization configs, or two of them
joined (FP8 KV cache over NVFP4; NVFP4 experts with FP8 attention), on the
toy Qwen3-MoE or the dense Llama toy. Two setup facts are handled here: a
model needs ``config.architectures`` before export (``is_multimodal_model``
iterates it), and ModelOpt 0.47 imports ``requests`` without declaring it
(the environment installs it: scripts/envs.sh).
"""

from __future__ import annotations

import copy
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalar_scales_testkit.toys import QWEN3_MOE

__all__ = ["EXPORTS", "ModelOptExport", "copy_of_export", "export", "exported"]

CALIBRATION_BATCHES = 4
CALIBRATION_SHAPE = (4, 32)

LLAMA = "llama"

_FP8_ATTENTION: list[dict[str, Any]] = [
    {"quantizer_name": f"*self_attn*{quantizer}", "cfg": {"num_bits": (4, 3), "axis": None}}
    for quantizer in ("weight_quantizer", "input_quantizer")
]
"""FP8 per-tensor weights and activations for the attention projections, in ModelOpt's ``quant_cfg`` form."""


@dataclass(frozen=True)
class ModelOptExport:
    """One export: the toy, ModelOpt's configs joined in order (names in ``modelopt.torch.quantization``), and
    extra ``quant_cfg`` entries; ``max_shard_size`` makes a sharded export."""

    toy: str
    configs: tuple[str, ...]
    extra: tuple[dict[str, Any], ...] = ()
    max_shard_size: str = "10GB"


EXPORTS: dict[str, ModelOptExport] = {
    "nvfp4": ModelOptExport(QWEN3_MOE, ("NVFP4_DEFAULT_CFG",)),
    "nvfp4-fp8-kv": ModelOptExport(QWEN3_MOE, ("NVFP4_DEFAULT_CFG", "FP8_KV_CFG")),
    "nvfp4-sharded": ModelOptExport(QWEN3_MOE, ("NVFP4_DEFAULT_CFG",), max_shard_size="300KB"),
    "w4a16": ModelOptExport(QWEN3_MOE, ("W4A16_NVFP4_CFG",)),
    "experts-only": ModelOptExport(QWEN3_MOE, ("NVFP4_EXPERTS_ONLY_CFG",)),
    "mixed": ModelOptExport(QWEN3_MOE, ("NVFP4_EXPERTS_ONLY_CFG",), extra=tuple(_FP8_ATTENTION)),
    "dense-nvfp4": ModelOptExport(LLAMA, ("NVFP4_DEFAULT_CFG",)),
    "dense-nvfp4-fp8-kv": ModelOptExport(LLAMA, ("NVFP4_DEFAULT_CFG", "FP8_KV_CFG")),
}
"""Every export the tests use, by name: NVFP4 (W4A4), weight-only, experts only, mixed precision and FP8 KV
cache, MoE and dense, one file and sharded."""


def quantization_config(spec: ModelOptExport) -> dict[str, Any]:
    """ModelOpt's configs joined: the first's settings, every ``quant_cfg`` entry in order (later entries win, as
    in ModelOpt's own joined configs)."""
    import modelopt.torch.quantization as mtq

    joined = copy.deepcopy(getattr(mtq, spec.configs[0]))
    for name in spec.configs[1:]:
        joined["quant_cfg"] = [*joined["quant_cfg"], *copy.deepcopy(getattr(mtq, name))["quant_cfg"]]
    joined["quant_cfg"] = [*joined["quant_cfg"], *copy.deepcopy(list(spec.extra))]
    return joined


def export(name: str, bf16: Path, out: Path) -> Path:
    """Quantize the bf16 toy checkpoint ``bf16`` as export ``name`` says and export it into ``out``."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    from compressed_tensors_patch.toy_moe import VOCAB_SIZE

    spec = EXPORTS[name]
    model = AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16)
    if not model.config.architectures:
        model.config.architectures = [type(model).__name__]
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, VOCAB_SIZE, CALIBRATION_SHAPE, generator=generator) for _ in range(CALIBRATION_BATCHES)]

    def forward_loop(model: Any) -> None:
        with torch.no_grad():
            for batch in batches:
                model(batch)

    mtq.quantize(model, quantization_config(spec), forward_loop)
    export_hf_checkpoint(model, export_dir=out, max_shard_size=spec.max_shard_size)
    return out


def exported(name: str) -> Path:
    """Export ``name`` as scripts/make_modelopt_artifacts.py wrote it in this run (scripts/test.sh); the test is
    skipped outside a run that made the artifacts, and fails where the run did not make this one."""
    import pytest

    root = os.environ.get("SCALAR_SCALES_ARTIFACTS")
    if not root:
        pytest.skip("real ModelOpt exports are made by scripts/test.sh (SCALAR_SCALES_ARTIFACTS is not set)")
    path = Path(root) / "modelopt" / name
    if not (path / "config.json").is_file():
        pytest.fail(f"{path}: no ModelOpt export: run scripts/make_modelopt_artifacts.py first")
    return path


def copy_of_export(directory: Path, name: str = "nvfp4") -> Path:
    """A copy of export ``name`` in ``directory``, to break."""
    shutil.copytree(exported(name), directory)
    return directory
