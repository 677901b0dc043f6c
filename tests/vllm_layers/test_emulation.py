"""The NVFP4 emulation's pieces, against compressed-tensors itself (engine-level tests: tests/engine)."""

from __future__ import annotations

import pytest
import torch

import vllm_patch
from scalar_scales.patching import import_dotted
from scalar_scales_testkit.roundtrip import checkpoint_tensors
from scalar_scales_testkit.vllm_layers import compressed_tensors_fake_quantize
from vllm_patch import nvfp4_emulation
from vllm_patch.nvfp4_emulation import MOE_PATCHES
from vllm_patch.targets import emulated_modules
from vllm_patch.vllm_version import vllm_version

PREFIX = "model.layers.0.mlp.experts.3.down_proj"
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def module_tensors(artifact, prefix: str) -> dict[str, torch.Tensor]:
    """One module's tensors on disk, by local name (weight_packed, weight_scale, ...)."""
    tensors = checkpoint_tensors(artifact, lambda name: name.startswith(f"{prefix}."))
    return {name.removeprefix(f"{prefix}."): tensor for name, tensor in tensors.items()}


def test_dequantize_nvfp4_equals_compressed_tensors_decompression(legacy_nvfp4):
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme

    tensors = module_tensors(legacy_nvfp4, PREFIX)
    expected = NVFP4PackedCompressor.decompress(dict(tensors), preset_name_to_scheme("NVFP4", ["Linear"]))["weight"]
    ours = nvfp4_emulation.dequantize_nvfp4(
        tensors["weight_packed"], tensors["weight_scale"], tensors["weight_global_scale"]
    )
    assert ours.dtype == expected.dtype and torch.equal(ours, expected)


def test_dequantize_nvfp4_does_not_depend_on_the_global_scale_shape(legacy_nvfp4):
    tensors = module_tensors(legacy_nvfp4, PREFIX)
    packed, scale, global_scale = tensors["weight_packed"], tensors["weight_scale"], tensors["weight_global_scale"]
    assert torch.equal(
        nvfp4_emulation.dequantize_nvfp4(packed, scale, global_scale),
        nvfp4_emulation.dequantize_nvfp4(packed, scale, global_scale.reshape(())),
    )


def test_activation_fake_quantization_uses_the_global_scale(legacy_nvfp4):
    x = torch.randn(4, 128, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    scale = module_tensors(legacy_nvfp4, PREFIX)["input_global_scale"]
    once = nvfp4_emulation.fake_quantize_nvfp4_activation(x, scale)
    assert not torch.equal(once, x)
    assert not torch.equal(once, nvfp4_emulation.fake_quantize_nvfp4_activation(x, scale * 4))


@pytest.mark.parametrize("module", emulated_modules(vllm_version()))
def test_emulation_patches_revert_exactly(module):
    patches = nvfp4_emulation.EMULATION_PATCHES[module].patches
    originals = [vars(import_dotted(p.owner))[p.attribute] for p in patches]
    vllm_patch.apply_emulation(module)
    assert all(vars(import_dotted(p.owner))[p.attribute] is not o for p, o in zip(patches, originals, strict=True))
    vllm_patch.revert()
    assert all(vars(import_dotted(p.owner))[p.attribute] is o for p, o in zip(patches, originals, strict=True))


def test_an_emulated_moe_method_is_marked_when_built_and_a_plain_one_is_not(legacy_nvfp4, layer0):
    from scalar_scales_testkit.vllm_layers import build_moe_layer

    emulated = build_moe_layer(legacy_nvfp4, layer0).quant_method
    assert nvfp4_emulation.is_emulated(emulated)
    emulated.__dict__.pop("_scalar_scales_emulated")
    emulated.experts_cls = None
    assert not nvfp4_emulation.is_emulated(emulated), "a missing experts class alone never means emulated"


@pytest.fixture
def emulated_layer(legacy_nvfp4, layer0):
    """A real MoE layer of the toy, loaded through vLLM's weight loader and dequantized by the emulation."""
    from scalar_scales_testkit.vllm_layers import build_moe_layer, expert_tensors, load_into_layer

    layer = build_moe_layer(legacy_nvfp4, layer0)
    load_into_layer(layer, expert_tensors(legacy_nvfp4, layer0))
    with MOE_PATCHES.applied():
        layer.quant_method.process_weights_after_loading(layer)
        yield layer


def routed(hidden: int, experts: int, top_k: int):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, hidden, generator=generator).bfloat16()
    weights = torch.rand(5, top_k, generator=generator)
    ids = torch.randint(0, experts, (5, top_k), generator=generator, dtype=torch.int32)
    return x, weights, ids


def test_router_weights_on_the_input_scale_the_tokens_first_and_are_not_applied_again(emulated_layer):
    """As vLLM's modular kernel: prepare multiplies the tokens by their top-1 weight, finalize only sums."""
    layer, method = emulated_layer, emulated_layer.quant_method
    x, weights, ids = routed(layer.hidden_size, layer.global_num_experts, top_k=1)
    weighted_after = method.apply(layer, x, weights, ids, None, None)
    layer.apply_router_weight_on_input = True
    on_input = method.apply(layer, x, weights, ids, None, None)
    assert torch.equal(on_input, method.apply(layer, x * weights.bfloat16(), torch.ones_like(weights), ids, None, None))
    assert not torch.equal(on_input, weighted_after)


def test_router_weights_on_the_input_need_a_single_expert_per_token(emulated_layer):
    layer = emulated_layer
    layer.apply_router_weight_on_input = True
    x, weights, ids = routed(layer.hidden_size, layer.global_num_experts, top_k=2)
    with pytest.raises(NotImplementedError, match="only implemented for topk=1"):
        layer.quant_method.apply(layer, x, weights, ids, None, None)


FP4_TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
"""A group whose largest value is 6, so that under a global scale of 1 every value lands on the FP4 grid or
halfway between two of its points."""


def activation_cases(seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Inputs (float32) and global scales: random magnitudes, FP4 ties, all-zero and NaN groups, FP8 group
    scales that saturate or underflow."""
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** torch.randint(-6, 5, (1,), generator=generator).item()
    x = torch.randn(6, 128, generator=generator) * magnitude * torch.rand(6, 128, generator=generator).pow(4) * 10
    x[0, :16], x[1, 16:32], x[2, 3] = 0, -x[1, 16:32].abs(), float("nan")
    signs = torch.randint(0, 2, (6, 128), generator=generator) * 2 - 1
    calibrated = torch.tensor(448.0 * 6.0) / x.nan_to_num().abs().amax()
    return [
        ("random", x, calibrated * torch.rand(1, generator=generator) * 4),
        ("ties", torch.tensor(FP4_TIES).repeat(6, 8) * signs, torch.tensor(1.0)),
        ("saturating", x, calibrated * 1e6),
        ("underflowing", x, calibrated * 1e-9),
        ("zero global scale", x, torch.tensor(0.0)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seed", range(10))
def test_activation_fake_quantization_equals_compressed_tensors_bit_for_bit(dtype, seed):
    for case, x, global_scale in activation_cases(seed):
        x = x.to(dtype)
        ours = nvfp4_emulation.fake_quantize_nvfp4_activation(x, global_scale)
        torch.testing.assert_close(
            ours, compressed_tensors_fake_quantize(x, global_scale), rtol=0, atol=0, equal_nan=True, msg=case
        )


def test_fake_quantizing_rows_with_their_own_scales_equals_one_call_per_row():
    """The experts' rows are fake-quantized in one call, each with its expert's scale: bit for bit as
    compressed-tensors quantizes each row alone."""
    x = (torch.randn(24, 128, generator=torch.Generator().manual_seed(0)) * 3).bfloat16()
    x[3, :16], x[5, 16:32] = 0, 1e4
    scales = torch.tensor([608.0, 10112.0, 34048.0, 1.0, 123.5, 8256.0] * 4)
    quantize = nvfp4_emulation.fake_quantize_nvfp4_activation
    alone = torch.cat([compressed_tensors_fake_quantize(row[None], s) for row, s in zip(x, scales, strict=True)])
    together = quantize(x, scales)
    assert torch.equal(together, alone)
    assert not torch.equal(together, quantize(x, scales[:1]))


@pytest.fixture
def nvfp4a16_layer(legacy_nvfp4a16, layer0):
    """A real NVFP4A16 MoE layer of the toy, loaded by vLLM and dequantized by the emulation under the layer's
    own dtype as the default, as vLLM's model loader processes weights."""
    from scalar_scales_testkit.vllm_layers import build_moe_layer, expert_tensors, load_into_layer

    layer = build_moe_layer(legacy_nvfp4a16, layer0)
    load_into_layer(layer, expert_tensors(legacy_nvfp4a16, layer0))
    default = torch.get_default_dtype()
    with MOE_PATCHES.applied():
        torch.set_default_dtype(layer.quant_method.moe.in_dtype)
        try:
            layer.quant_method.process_weights_after_loading(layer)
        finally:
            torch.set_default_dtype(default)
        yield layer


def vllm_kernel_expected(moe) -> type | None:
    """The experts class of vLLM's unquantized MoE kernel that an NVFP4A16 layer should be handed to, or None:
    not where vLLM's unquantized CPU MoE is monolithic (0.23: it routes by itself), not under expert
    parallelism, not AMX experts where the OS refuses AMX, and not where vLLM's CPU MoE kernel is not built (vLLM
    0.33's sources over a build without CPU kernels)."""
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import select_unquantized_moe_backend
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    _, experts = select_unquantized_moe_backend(moe_config=moe)
    if UnquantizedFusedMoEMethod(moe).is_monolithic or moe.use_ep or not hasattr(torch.ops._C, "cpu_fused_moe"):
        return None
    return None if getattr(experts, "isa", None) == "amx" and not torch.cpu._init_amx() else experts


def decompressed(artifact, prefix: str) -> torch.Tensor:
    """One projection's weight, as compressed-tensors decompresses it from the checkpoint, in float32."""
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme

    scheme = preset_name_to_scheme("NVFP4A16", ["Linear"])
    return NVFP4PackedCompressor.decompress(module_tensors(artifact, prefix), scheme)["weight"].float()


def checkpoint_experts(artifact, prefix: str, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor):
    """What the experts compute, straight from the checkpoint, in float32: each token's selected experts, SwiGLU
    MLPs on the decompressed weights, summed with the routing weights."""
    x, out = x.float(), torch.zeros(x.shape)
    for token, (row, chosen) in enumerate(zip(weights, ids, strict=True)):
        for weight, expert in zip(row, chosen.tolist(), strict=True):
            gate, up, down = (decompressed(artifact, f"{prefix}.{expert}.{p}") for p in PROJECTIONS)
            h = x[token]
            out[token] += weight * (down @ (torch.nn.functional.silu(gate @ h) * (up @ h)))
    return out


def test_nvfp4a16_experts_compute_the_checkpoints_mlps(nvfp4a16_layer, legacy_nvfp4a16, layer0):
    """In bf16, as the layer is built: held to bf16's resolution against the float32 computation."""
    layer = nvfp4a16_layer
    x, weights, ids = routed(layer.hidden_size, layer.global_num_experts, top_k=2)
    found = layer.quant_method.apply(layer, x, weights, ids, None, None)
    expected = checkpoint_experts(legacy_nvfp4a16, layer0, x, weights, ids)
    assert found.dtype == torch.bfloat16
    torch.testing.assert_close(found.float(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


def test_nvfp4a16_experts_run_in_vllms_unquantized_kernel_where_it_can_run_them_else_in_the_emulation(
    nvfp4a16_layer,
):
    method = nvfp4a16_layer.quant_method
    expected = vllm_kernel_expected(method.moe)
    if expected is None:
        assert method.moe_kernel is None and method.experts_cls is nvfp4_emulation.moe._EmulatedExperts
    else:
        assert method.moe_kernel is not None and type(method.moe_kernel.fused_experts) is expected


def test_a_fused_layer_computes_each_partition_with_its_own_global_scales(legacy_nvfp4):
    """A real q|k|v ``QKVParallelLinear``, loaded through vLLM's weight loader, with k's weight and input global
    scales set apart from q's and v's: its weight is each partition decompressed by compressed-tensors with its
    own weight global scale, and its output each partition's input fake-quantized with its own input scale."""
    import json

    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme
    from vllm.model_executor.layers.linear import QKVParallelLinear
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig

    from vllm_patch.nvfp4_emulation import LINEAR_PATCHES

    config = json.loads((legacy_nvfp4 / "config.json").read_text())
    prefix = "model.layers.0.self_attn"
    parts = {p: module_tensors(legacy_nvfp4, f"{prefix}.{p}") for p in ("q_proj", "k_proj", "v_proj")}
    parts["k_proj"]["weight_global_scale"] = parts["k_proj"]["weight_global_scale"] * 2
    parts["k_proj"]["input_global_scale"] = parts["k_proj"]["input_global_scale"] * 2
    with LINEAR_PATCHES.applied():
        layer = QKVParallelLinear(
            config["hidden_size"],
            config["head_dim"],
            config["num_attention_heads"],
            config["num_key_value_heads"],
            bias=False,
            quant_config=CompressedTensorsConfig.from_config(config["quantization_config"]),
            prefix=f"{prefix}.qkv_proj",
        )
        for shard, tensors in zip("qkv", parts.values(), strict=True):
            for name, tensor in tensors.items():
                parameter = getattr(layer, name)
                parameter.weight_loader(parameter, tensor, shard)
        layer.quant_method.process_weights_after_loading(layer)
        x = torch.randn(8, config["hidden_size"], generator=torch.Generator().manual_seed(0)).bfloat16()
        out = layer(x)[0]
    scheme = preset_name_to_scheme("NVFP4", ["Linear"])
    weights = [NVFP4PackedCompressor.decompress(dict(t), scheme)["weight"] for t in parts.values()]
    assert torch.equal(layer.weight.data, torch.cat(weights).to(layer.weight.dtype))
    expected = torch.cat(
        [
            torch.nn.functional.linear(compressed_tensors_fake_quantize(x, t["input_global_scale"]), w.to(x.dtype))
            for t, w in zip(parts.values(), weights, strict=True)
        ],
        dim=-1,
    )
    assert torch.equal(out, expected)
