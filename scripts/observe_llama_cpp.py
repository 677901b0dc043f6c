"""Run llama.cpp's converter (``convert_hf_to_gguf.py``'s model classes) on tiny NVFP4 checkpoints and print, as
JSON, the GGUF tensors it writes for each: what scalar_scales/consumers/read.py records of it as "observed".

    python scripts/observe_llama_cpp.py LLAMA_CPP FOLDER

LLAMA_CPP is a llama.cpp source tree (the converter and its gguf-py; llama-cpp-python's sdist vendors one under
vendor/llama.cpp); FOLDER an empty folder for the checkpoints. Needs torch, numpy, safetensors and transformers
(the producer environment has them); builds nothing. Each checkpoint is one Qwen3-MoE layer whose q/k/v
projections and two experts' gate/up/down projections are NVFP4, in compressed-tensors' names or ModelOpt's,
with (1,) or 0-D global scales, fused partners equal or differing, and one defect of a rule of
``scalar-scales check`` at a time. The converter runs in this process, up to the tensors it would write
(``prepare_tensors``); nothing is written to disk but the checkpoints.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

HIDDEN, INTERMEDIATE, EXPERTS, HEADS, KV_HEADS, HEAD_DIM = 64, 64, 2, 2, 1, 32
LAYER = "model.layers.0"
Q = f"{LAYER}.self_attn.q_proj"
DIVISORS = {"q_proj": 100.0, "k_proj": 100.0, "v_proj": 100.0, "gate_proj": 300.0, "up_proj": 300.0}
"""Each projection's compressed-tensors global scale (a divisor); ModelOpt's is its reciprocal."""


def nvfp4(prefix: str, out: int, divisor: float, layout: str, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    packed = torch.randint(0, 256, (out, HIDDEN // 2), dtype=torch.uint8)
    blocks = torch.full((out, HIDDEN // 16), 2.0).to(torch.float8_e4m3fn)
    scale = torch.tensor(divisor, dtype=torch.float32).reshape(shape)
    if layout == "compressed-tensors":
        names = ("weight_packed", "weight_global_scale", "input_global_scale")
        return {f"{prefix}.{names[0]}": packed, f"{prefix}.weight_scale": blocks} | {
            f"{prefix}.{name}": scale.clone() for name in names[1:]
        }
    return {
        f"{prefix}.weight": packed,
        f"{prefix}.weight_scale": blocks,
        f"{prefix}.weight_scale_2": 1.0 / scale,
        f"{prefix}.input_scale": 1.0 / scale,
    }


def tensors(layout: str, shape: tuple[int, ...], differ: bool) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for name, out in (("q_proj", HEADS * HEAD_DIM), ("k_proj", KV_HEADS * HEAD_DIM), ("v_proj", KV_HEADS * HEAD_DIM)):
        divisor = DIVISORS[name] * (2 if differ and name == "k_proj" else 1)
        found |= nvfp4(f"{LAYER}.self_attn.{name}", out, divisor, layout, shape)
    for expert in range(EXPERTS):
        prefix = f"{LAYER}.mlp.experts.{expert}"
        found |= nvfp4(f"{prefix}.gate_proj", INTERMEDIATE, DIVISORS["gate_proj"], layout, shape)
        found |= nvfp4(f"{prefix}.up_proj", INTERMEDIATE, DIVISORS["up_proj"] * (2 if differ else 1), layout, shape)
        found |= nvfp4(f"{prefix}.down_proj", HIDDEN, 400.0, layout, shape)
    return found


def config(layout: str) -> dict[str, Any]:
    quantization: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    if layout == "compressed-tensors":
        weights = {"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group"}
        group = {"format": "nvfp4-pack-quantized", "targets": ["Linear"], "weights": weights}
        quantization = {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": group},
        }
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "moe_intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_experts": EXPERTS,
        "num_experts_per_tok": 1,
        "vocab_size": 32,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 64,
        "quantization_config": quantization,
    }


def defects(layout: str) -> dict[str, Any]:
    """Each defect of a rule, as an edit of q_proj's tensors (compressed-tensors' names, or ModelOpt's)."""
    weight_global, input_global = (
        ("weight_global_scale", "input_global_scale")
        if layout == "compressed-tensors"
        else ("weight_scale_2", "input_scale")
    )

    def drop(name: str) -> Any:
        return lambda found: found.pop(f"{Q}.{name}")

    def set_to(name: str, value: float) -> Any:
        return lambda found: found[f"{Q}.{name}"].fill_(value)

    return {
        "missing-weight-global-scale": drop(weight_global),
        "missing-input-global-scale": drop(input_global),
        "invalid-scale-value (weight global scale 0)": set_to(weight_global, 0.0),
        "other-convention": set_to(
            weight_global, 1.0 / DIVISORS["q_proj"] if layout == "compressed-tensors" else 100.0
        ),
    }


def converted(folder: Path, found: dict[str, torch.Tensor], layout: str) -> dict[str, Any]:
    from conversion import get_model_class  # type: ignore[import-not-found]
    from gguf import LlamaFileType  # type: ignore[import-not-found]

    folder.mkdir(parents=True)
    save_file(found, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config(layout)))
    try:
        model = get_model_class("Qwen3MoeForCausalLM")(
            folder, LlamaFileType.MOSTLY_F16, folder / "out.gguf", eager=True, dry_run=True
        )
        model.prepare_tensors()
    except Exception as error:  # what the converter raises is the observation
        return {"converts": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    written: dict[str, Any] = {}
    for shard in model.gguf_writer.tensors:
        for name, info in shard.items():
            if name.endswith(("scale", "input_scale")):
                written[name] = [float(value) for value in info.tensor.reshape(-1)]
            else:
                written[name] = f"{getattr(info.dtype, 'name', info.dtype)} {list(info.shape)}"
    return {"converts": True, "written": dict(sorted(written.items()))}


def main() -> int:
    llama_cpp, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    sys.path[:0] = [str(llama_cpp), str(llama_cpp / "gguf-py")]
    results: dict[str, Any] = {}
    for layout in ("compressed-tensors", "modelopt"):
        for shape in ((1,), ()):
            for differ in (False, True):
                case = f"{layout}, {shape or '0-D'}, fused partners {'differ' if differ else 'equal'}"
                results[case] = converted(out / f"{len(results)}", tensors(layout, shape, differ), layout)
        for defect, edit in defects(layout).items():
            found = tensors(layout, (), False)
            edit(found)
            results[f"{layout}, 0-D, {defect}"] = converted(out / f"{len(results)}", found, layout)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
