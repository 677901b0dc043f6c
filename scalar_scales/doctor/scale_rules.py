"""The rules on per-tensor scales: their shape and the marker that declares it (NV1), and their values (NV3).

Each finding is worded in the checkpoint's layout
(:class:`~scalar_scales.nvfp4.ProducerLayout`): compressed-tensors' names and
convention, or ModelOpt's.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator
from itertools import compress, repeat
from typing import cast

from scalar_scales.doctor.examples import (
    Declare,
    Example,
    InvertScales,
    LegacyShapes,
    MultiplyValue,
    SetValue,
    Undeclare,
)
from scalar_scales.doctor.rules import Command, Found, checkpoint_rule, shard_rule
from scalar_scales.doctor.view import CheckpointView, ShardView
from scalar_scales.nvfp4 import (
    COMPRESSED_TENSORS,
    FLOAT32_MAX,
    FORMAT_VERSION_KEY,
    LAYOUTS,
    MODELOPT,
    SCALAR_FORMAT_VERSION,
    SCALE_NUMERATOR,
    ProducerLayout,
)

__all__ = [
    "CROSS_ATTENTION",
    "FUSED_PARTNERS",
    "RECIPROCAL_FLOOR",
    "fused_scales_differ",
    "invalid_scale_value",
    "legacy_scale_shape",
    "marker_disagrees",
    "marker_missing",
    "other_convention",
]

MIGRATE = Command("scalar-scales migrate")

FUSED_PARTNERS: tuple[tuple[str, ...], ...] = (
    ("gate_proj", "up_proj"),
    ("w1", "w3"),
    ("q_proj", "k_proj", "v_proj"),
    ("q_a_proj", "kv_a_proj_with_mqa"),
    ("to_q", "to_k", "to_v"),
)
"""Sibling projections vLLM loads into one fused module (``gate_up_proj``, the experts' ``w13``, ``qkv_proj``,
DeepSeek's ``fused_qkv_a_proj``), which has one global scale: llm-compressor's ``FUSED_LAYER_NAMES``. The first
member is the one an expert's ``w13`` keeps. A diffusers attention's ``to_q``, ``to_k`` and ``to_v`` are one
``to_qkv`` in self-attention (diffusers' ``fuse_projections``; vLLM-Omni's ``to_qkv``, a ``QKVParallelLinear``),
and in cross-attention ``to_k`` and ``to_v`` alone are one ``to_kv`` (:data:`CROSS_ATTENTION`)."""

CROSS_ATTENTION = frozenset(
    {"attn2", "audio_attn2", "cross_attn", "cross_attention", "audio_to_video_attn", "video_to_audio_attn"}
)
"""What diffusers' transformers name their cross-attention modules (``WanTransformerBlock.attn2``,
``BasicTransformerBlock.attn2``, LTX-2's audio-video attentions, ...), whose ``fuse_projections`` fuses ``to_k``
and ``to_v`` into ``to_kv`` and leaves ``to_q`` apart: its query reads the image, its key and value the text.
SD3's dual ``attn2`` is a self-attention that the name takes for a cross-attention, so its ``to_q`` goes
unchecked there: a finding missed, never a false one."""
_QUERY = "to_q"

_INPUT_BOUND = {layout.producer: layout.other_convention_bound(layout.input_global) for layout in LAYOUTS.values()}
"""Past what value an input scale is the other convention's, in each layout (NV302's explanation gives them)."""
RECIPROCAL_FLOOR = 1.0 / FLOAT32_MAX
"""Where a float32 scale's float32 reciprocal turns Inf: below it (a subnormal, as a dead expert's ModelOpt
``input_scale`` of 1e-40, vLLM PR 42601) ``1 / value`` is Inf, above it finite; no float32 value lies on it."""
_PARTNERS_OF = {member: group for group in FUSED_PARTNERS for member in group}
_LEGACY = (1,)
_EXPERT = re.compile(r"\.experts\.\d+$")


@shard_rule(
    "NV101",
    "legacy-scale-shape",
    "warning",
    "none",
    summary="a global scale of shape (1,)",
    fix=MIGRATE,
    examples=(
        Example(
            "legacy-scales",
            "every global scale of shape (1,) and no marker, as llm-compressor writes NVFP4 today",
            (LegacyShapes(),),
            names="{module}.down_proj.{weight_global}",
        ),
    ),
    explanation="""
        A global scale (or another per-tensor scale that `--include`
        names) of shape (1,). llm-compressor's NVFP4 presets write every global
        scale this way (66,048 of them on a DeepSeek-V4-Flash artifact, vLLM issue
        43297). vLLM 0.23, 0.32 and 0.33 load it (the evidence's
        loader columns, and the round trip in [compatibility.md](compatibility.md)),
        and so does transformers (whose plain `from_pretrained` of an NVFP4 MoE
        computes wrong experts from either shape, transformers #48371, and from
        5.25.0 on refuses a 0-D global scale without the producer patch: the
        guide's rows say by how much and which). What fails is a loader that copies it into a 0-D
        tensor with `copy_`: `RuntimeError: output with shape [] doesn't match the
        broadcast shape [1]`, as the round trip's `copy_` consumer shows, and
        SGLang 0.5.23 where it fuses MLA a-projections (DeepSeek-V3's and
        GLM-4-MoE-Lite's loaders: [sglang.md](sglang.md)). **Fix:**
        `scalar-scales migrate PATH`, which edits headers only
        ([migrate.md](migrate.md)).
        """,
)
def legacy_scale_shape(shard: ShardView) -> Iterator[Found]:
    shapes = shard.shapes
    every = shapes.count(_LEGACY) == len(shapes)  # as in every legacy checkpoint: no comparison left to make
    legacy = shard.names if every else compress(shard.names, map(operator.eq, shapes, repeat(_LEGACY)))
    return zip(legacy, repeat(shard.file), repeat("shape (1,)"), repeat(_legacy_why(shard.layout)))


@checkpoint_rule(
    "NV102",
    "marker-disagrees",
    "warning",
    "none",
    summary="config.json declares format_version 2 but global scales are (1,)",
    needs=("nvfp4", "quantization"),
    fix=MIGRATE,
    producers=frozenset({COMPRESSED_TENSORS}),
    examples=(
        Example(
            "marker-disagrees",
            "a legacy checkpoint whose config was copied from a migrated one: (1,) scales under a config that "
            "declares 0-D ones",
            (LegacyShapes(), Declare(FORMAT_VERSION_KEY, SCALAR_FORMAT_VERSION)),
            alongside=(legacy_scale_shape.code,),
        ),
    ),
    explanation="""
        config.json's `quantization_config.format_version` is 2 (0-D
        scales), but the shards hold (1,) scales. No upstream loader reads the
        marker; a tool that trusts it (the producer patch's load path,
        `upstream/compressed-tensors.patch`) expects 0-D scales. The finding names
        config.json. **Fix:** `scalar-scales migrate PATH`.
        """,
)
def marker_disagrees(checkpoint: CheckpointView) -> Iterator[Found]:
    config, legacy = _marked(checkpoint)
    if config is not None and legacy and _declares_scalar(checkpoint):
        yield (
            None,
            config,
            f"config.json declares {FORMAT_VERSION_KEY} 2 but {legacy} global scales are (1,)",
            "no upstream loader reads the marker (vLLM and transformers load the checkpoint as they would without "
            "it), but a tool that trusts it expects 0-D scales",
        )


@checkpoint_rule(
    "NV103",
    "marker-missing",
    "info",
    "none",
    summary="0-D global scales without format_version 2",
    needs=("nvfp4", "quantization"),
    fix=MIGRATE,
    producers=frozenset({COMPRESSED_TENSORS}),
    examples=(
        Example(
            "marker-lost",
            "0-D scales, but the config lost its format_version (re-saved by a tool that rewrites config.json, or "
            "written by compressed-tensors' ModelOpt converter)",
            (Undeclare(FORMAT_VERSION_KEY),),
        ),
    ),
    explanation="""
        Every global scale is 0-D, as vLLM wants them, but
        config.json does not declare `format_version` 2: compressed-tensors 0.20.1's
        ModelOpt converter writes checkpoints so, and a tool that rewrites config.json
        drops the key. vLLM loads it (the round trip in
        [compatibility.md](compatibility.md)); transformers 5.25.0's plain
        `from_pretrained` refuses 0-D global scales, and so does SGLang 0.5.23's
        GLM-4-MoE-Lite loader where it fuses MLA a-projections
        ([sglang.md](sglang.md)): the report's `Not loaded by` lines name each
        engine observed not to load the checkpoint. **Fix:** `scalar-scales
        migrate PATH` sets the marker.
        """,
)
def marker_missing(checkpoint: CheckpointView) -> Iterator[Found]:
    config, legacy = _marked(checkpoint)
    if config is not None and not legacy and not _declares_scalar(checkpoint):
        yield (
            None,
            config,
            f"every global scale is 0-D, as vLLM wants them, but config.json does not declare {FORMAT_VERSION_KEY} 2",
            "compressed-tensors' ModelOpt converter writes checkpoints so; vLLM loads it",
        )


def _marked(checkpoint: CheckpointView) -> tuple[str | None, int]:
    """The config that holds compressed-tensors' marker (this project's), and how many global scales are (1,); no
    config where the marker does not apply: no compressed-tensors NVFP4 checkpoint, or no global scale. The marker
    speaks of the global scales only: a scale ``--include`` adds (a ``k_scale``) is NV101's alone."""
    scan, declared = checkpoint.scan, checkpoint.scan.declared
    if declared is None or declared.producer != COMPRESSED_TENSORS or scan.layout is None:
        return None, 0
    scales = legacy = 0
    for shard in checkpoint.shards:
        at = shard.ending_with(scan.layout.scale_suffixes)
        shapes = shard.shapes if len(at) == len(shard.names) else list(map(shard.shapes.__getitem__, at))
        scales, legacy = scales + len(at), legacy + shapes.count((1,))
    return (declared.source or "config.json", legacy) if scales else (None, 0)


def _declares_scalar(checkpoint: CheckpointView) -> bool:
    declared = checkpoint.scan.declared
    return declared is not None and declared.format_version == SCALAR_FORMAT_VERSION


@shard_rule(
    "NV301",
    "invalid-scale-value",
    "error",
    "nan-output",
    summary="a per-tensor scale that is zero, negative, NaN or Inf, or an input scale whose float32 reciprocal is Inf",
    elsewhere={MODELOPT: "wrong-output"},
    examples=(
        Example(
            "uncalibrated-expert",
            "an expert calibration never routed a token to: its input scale is 0",
            (SetValue("{module}.down_proj.{input_global}", 0.0),),
            per_module=True,
        ),
    ),
    explanation="""
        A global scale (or another per-tensor scale that
        `--include` names) that is zero, negative, NaN or Inf.
        compressed-tensors' divisors: 0 becomes Inf (an expert calibration never
        routed a token to gets `input_global_scale` 0), Inf becomes 0, a negative
        scale flips signs, NaN makes every output NaN. ModelOpt's multipliers: 0
        zeroes what it scales, Inf makes it Inf. Served, the uncalibrated experts
        give NaN in compressed-tensors' layout, and other tokens in NVIDIA's
        ModelOpt export (an `input_scale` of 0).

        A ModelOpt `input_scale` too small for its float32 reciprocal to be
        finite (below 1 / 3.4028e38 ≈ 2.9387e-39, a float32 subnormal) is
        an error too: engines quantize activations with `1 / input_scale`
        in float32 (vLLM's `make_nvfp4_moe_quant_config` for each expert,
        `input_global_scale_inv` for a linear layer), which is Inf, as for an
        `input_scale` of 0. txn545's Qwen3.5-122B-A10B-NVFP4 has such
        scales for dead experts (1e-40 and the like, vLLM PR 42601), and its
        batches turn NaN. A compressed-tensors divisor that small is NV302's.

        Where the config declares a quantized KV cache (`kv_cache_scheme`,
        `kv_cache_quant_algo`), the values of its `k_scale` and `v_scale` are
        judged too, in either shape and either layout's names. vLLM's KV-cache
        method (0.23 to 0.33) takes both as they are only where both are above
        0; where `v_scale` is not, it uses `k_scale` for both; where `k_scale` is
        not, it refuses to load the model, unless both are negative, when it
        uses 1.0. Served: NVIDIA's FP8-KV export with a `k_scale` of 0 does not
        start, and one with a `v_scale` of 0 starts
        (tests/engine/test_kv_cache_scales.py). The rule's effect is its corpus
        breaks' (global scales); a KV-cache scale's message says what vLLM does
        with it.
        """,
)
def invalid_scale_value(shard: ShardView) -> Iterator[Found]:
    layout = shard.layout
    yield from _invalid(shard.names, shard.values, shard.file, lambda name, v: _invalid_value_message(v, name, layout))
    if layout is not None and not layout.divisor:
        yield from _reciprocal_overflows(shard, layout.input_global)
    yield from _invalid(shard.kv_names, shard.kv_values, shard.file, _invalid_kv_message)


def _invalid(
    names: list[str], values: list[float | None], file: str, message: Callable[[str, float], tuple[str, str]]
) -> Iterator[Found]:
    """The scales among ``names`` whose value is zero, negative, NaN or Inf, each with what that does."""
    numbers = _numbers(values)
    if numbers is not None and (not numbers or (min(numbers) > 0.0 and max(numbers) < math.inf)):
        return  # as nearly every checkpoint: decided at C speed
    for name, value in zip(names, values, strict=True):
        if value is not None and not 0.0 < value < math.inf:
            yield (name, file, *message(name, value))


def _reciprocal_overflows(shard: ShardView, leaf: str) -> Iterator[Found]:
    """The ``leaf`` scales (ModelOpt's input scales, which engines invert) above 0 and below
    :data:`RECIPROCAL_FLOOR`."""
    at = shard.ending_with(f".{leaf}")
    values = list(map(shard.values.__getitem__, at))
    numbers = _numbers(values)
    if numbers is not None and (not numbers or min(numbers) >= RECIPROCAL_FLOOR):
        return  # as nearly every checkpoint: decided at C speed
    for i, value in zip(at, values, strict=True):
        if value is not None and 0.0 < value < RECIPROCAL_FLOOR:
            yield (shard.names[i], shard.file, *_overflow_message(value))


@shard_rule(
    "NV302",
    "other-convention",
    "error",
    "wrong-output",
    summary="a global scale stored in the other producer's convention",
    needs=("nvfp4",),
    examples=(
        Example(
            "reciprocal-convention",
            "every global scale written in the other producer's convention: the reciprocal of its layout's value",
            (InvertScales(),),
            names="{module}.down_proj.{weight_global}",
        ),
    ),
    explanation=f"""
        A global scale stored in the other producer's
        convention, seen from the value alone:

        - under compressed-tensors, a `weight_global_scale` below 1 would mean a
          weight of magnitude above 2688, which no trained model has, and an
          `input_global_scale` below 2688 / 65504 ≈ {_INPUT_BOUND[COMPRESSED_TENSORS]:.3g} an activation above
          float16's largest value: they are ModelOpt's `amax / (6 * 448)`, and vLLM
          takes the reciprocal of a reciprocal (modular issue 6600);
        - under ModelOpt, a `weight_scale_2` above 1, or an `input_scale` above
          65504 / 2688 ≈ {_INPUT_BOUND[MODELOPT]:.3g}, means the same thing the other way round: a
          compressed-tensors divisor, which vLLM multiplies by. An `input_scale`
          of 20 (activations of amax 53,760, within float16's range) is not
          flagged.

        The message gives the amax the value implies under each convention.
        """,
)
def other_convention(shard: ShardView) -> Iterator[Found]:
    layout = shard.layout
    if layout is None:
        return
    below = layout.other_convention_below
    for leaf in (layout.weight_global, layout.input_global):  # a scale --include adds is held to no convention
        bound = layout.other_convention_bound(leaf)
        at = shard.ending_with(f".{leaf}")
        values = list(map(shard.values.__getitem__, at))
        numbers = _numbers(values)
        if numbers is not None and (not numbers or (min(numbers) >= bound if below else max(numbers) <= bound)):
            continue  # as nearly every checkpoint: decided at C speed
        for i, value in zip(at, values, strict=True):
            if value is not None and 0.0 < value < math.inf and (value < bound if below else value > bound):
                yield (shard.names[i], shard.file, *_other_convention_message(value, leaf, layout))


@checkpoint_rule(
    "NV303",
    "fused-scales-differ",
    "error",
    "wrong-output",
    summary="fused partners (gate/up, q/k/v) with different global scales",
    needs=("nvfp4",),
    examples=(
        Example(
            "fused-partners-differ",
            "an expert's up projection calibrated apart from its gate projection, at twice its scale (vLLM #54150)",
            (MultiplyValue("{module}.up_proj.{weight_global}", 2.0),),
            per_module=True,
        ),
    ),
    explanation="""
        vLLM loads some sibling projections into one fused
        module, which has one global scale:

        | partners | vLLM module |
        |---|---|
        | `gate_proj`, `up_proj` | `gate_up_proj`; an expert's `w13` |
        | `w1`, `w3` (Mixtral-style experts) | `w13` |
        | `q_proj`, `k_proj`, `v_proj` | `qkv_proj` |
        | `q_a_proj`, `kv_a_proj_with_mqa` (DeepSeek MLA) | `fused_qkv_a_proj` |
        | `to_q`, `to_k`, `to_v` (a diffusers self-attention: Wan's `attn1`) | vLLM-Omni's `to_qkv` |
        | `to_k`, `to_v` (a diffusers cross-attention: `attn2`) | diffusers' `to_kv` |

        The diffusers rows are read, not run: diffusers' `fuse_projections`
        concatenates a self-attention's `to_q`, `to_k` and `to_v` into `to_qkv`,
        and a cross-attention's `to_k` and `to_v` alone into `to_kv`. vLLM-Omni
        loads Wan's `attn1.to_q`, `to_k` and `to_v` into one `QKVParallelLinear`
        and its `attn2` projections apart (`WanTransformer3DModel.load_weights`,
        `vllm_omni/diffusion/models/wan2_2/wan2_2_transformer.py`); SGLang's Wan
        keeps all three apart (`WanTransformerBlock`,
        `multimodal_gen/runtime/models/dits/wanvideo.py`). A cross-attention's
        `to_q` is fused with nothing and compared with nothing. In auto-round
        #2380, every one of a Wan 2.2 NVFP4 export's 80 self-attentions held
        three different global scales, and vLLM-Omni warned that accuracy may be
        reduced.

        When their global scales differ, an expert's `w13` keeps `gate_proj`'s
        (`w1`'s) and logs `w1_weight_global_scale must match w3_weight_global_scale`
        (ModelOpt: `w1_weight_scale_2 must match w3_weight_scale_2`, vLLM #54150,
        where 68.5% of a GLM checkpoint's gate/up pairs differed and it served
        U+FFFD). A fused linear layer keeps the largest. llm-compressor fuses these
        global scales for this reason (`FUSED_LAYER_NAMES`). With every expert's up
        projection at twice its gate's scale, the toy generates other tokens; with
        one expert, routing hid it. The finding names each partner whose scale
        differs from the first one's.
        """,
)
def fused_scales_differ(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    modules, at, found = checkpoint.scales_of(layout.weight_global)
    values = _numbers(found)
    if values is None:  # a value not read, or NaN: no partner to differ with
        read = [k for k, value in enumerate(found) if value is not None and not math.isnan(value)]
        modules, at, values = [modules[k] for k in read], [at[k] for k in read], [cast(float, found[k]) for k in read]
    value_of = dict(zip(modules, values, strict=True))
    split = list(map(str.rpartition, modules, repeat(".")))
    owners, projections = list(map(_FIRST, split)), list(map(_LAST, split))
    held_projections = set(projections)
    index_of: dict[str, int] = {}
    for partners in FUSED_PARTNERS:
        settled: set[str] = set()
        for k, first in enumerate(partners[:-1]):  # the last partner holds no one to compare with
            if first not in held_projections:
                continue
            holding = compress(owners, map(operator.eq, projections, repeat(first)))
            parents = [parent for parent in holding if parent not in settled] if settled else list(holding)
            if first == _QUERY:  # a cross-attention's to_q is fused with nothing; its to_k and to_v come next
                parents = [parent for parent in parents if _leaf(parent) not in CROSS_ATTENTION]
            settled.update(parents)
            kept = list(map(value_of.__getitem__, map(operator.add, parents, repeat(f".{first}"))))
            for member in partners[k + 1 :]:
                held = list(map(value_of.get, map(operator.add, parents, repeat(f".{member}"))))
                for j in compress(range(len(parents)), map(operator.ne, kept, held)):
                    value = held[j]
                    if value is not None:  # a member the module lacks is no partner to differ
                        module = f"{parents[j]}.{member}"
                        index_of = index_of or dict(zip(modules, at, strict=True))
                        message = _partner_message(parents[j], first, kept[j], value, layout)
                        yield (f"{module}.{layout.weight_global}", checkpoint.file_of(index_of[module]), *message)


def _numbers(values: list[float | None]) -> list[float] | None:
    """``values``, where every one was read and none is NaN (the order of values holds then); else None."""
    if None in values:
        return None
    read = cast(list[float], values)
    return None if any(map(math.isnan, read)) else read


_FIRST = operator.itemgetter(0)
_LAST = operator.itemgetter(2)


def _leaf(name: str) -> str:
    return name.rpartition(".")[2]


def _legacy_why(layout: ProducerLayout | None) -> str:
    if layout is not None and layout.weight_named_plainly:
        return "ModelOpt writes 0-D"
    return (
        "vLLM 0.23, 0.32 and 0.33 load it (observed), and so does transformers; a loader that copies it "
        "into a 0-D tensor with copy_ fails (output with shape [] doesn't match the broadcast shape [1])"
    )


def _invalid_value_message(value: float, name: str, layout: ProducerLayout | None) -> tuple[str, str]:
    leaf = _leaf(name)
    divides = layout is None or layout.divisor
    uses = "computes with 1/scale" if divides else "multiplies by the scale"
    if math.isnan(value):
        return "is NaN", f"vLLM {uses}, which is NaN, and so is everything this module outputs"
    if value == 0.0:
        if layout is not None and leaf == layout.input_global:
            return "is 0", (
                f"vLLM {uses}, and quantizes this module's activations with Inf (an input scale is 0 when "
                "calibration sent no token through the module, an uncalibrated expert)"
            )
        return "is 0", f"vLLM {uses}" + (", which is Inf" if divides else ", which zeroes what it scales")
    if math.isinf(value):
        shown = "Inf" if value > 0 else "-Inf"
        return f"is {shown}", f"vLLM {uses}" + (", which zeroes what it scales" if divides else f", which is {shown}")
    return f"is negative ({value!r})", f"vLLM {uses} and flips the sign of what this scale scales"


def _overflow_message(value: float) -> tuple[str, str]:
    return f"is {value:.6g}, whose float32 reciprocal is Inf (it is below 1 / {FLOAT32_MAX:.6g})", (
        "where vLLM keeps it (a linear layer, or an expert where the MoE backend keeps each expert's own), it "
        "quantizes the module's activations with 1 / input_scale in float32, which is Inf, as for an input scale of 0"
    )


def _invalid_kv_message(name: str, value: float) -> tuple[str, str]:
    """What vLLM's KV-cache method (``BaseKVCacheMethod.process_weights_after_loading``) does with a KV-cache scale
    that is not above 0 or is Inf, where the KV cache is quantized."""
    if value == math.inf:
        return "is Inf", "vLLM's quantized KV cache takes it as it is, where the other KV-cache scale is above 0"
    shown = "NaN" if math.isnan(value) else "-Inf" if math.isinf(value) else repr(value)
    if _leaf(name) == "k_scale":
        unless = ", unless v_scale is negative too, when both become 1.0" if value < 0.0 else ""
        return f"is {shown}", (
            "vLLM's quantized KV cache refuses to load the model (its KV-cache method asserts "
            f"k_scale > 0; observed: the engine does not start){unless}"
        )
    return f"is {shown}", (
        "vLLM's quantized KV cache uses k_scale in its place, where k_scale is above 0 (its KV-cache "
        "method takes the larger of the two; observed: the engine starts)"
    )


def _other_convention_message(value: float, leaf: str, layout: ProducerLayout) -> tuple[str, str]:
    what = "weights" if leaf == layout.weight_global else "activations"
    if layout.divisor:
        here, there = SCALE_NUMERATOR / value, value * SCALE_NUMERATOR
        return (
            f"is {value:.6g}: {what} of amax {here:.4g} in compressed-tensors' (6*448)/amax convention, "
            f"{there:.4g} in ModelOpt's amax/(6*448)",
            "the value looks like ModelOpt's amax/(6*448); vLLM computes with 1/scale, so the output is garbage "
            "(modular issue 6600)",
        )
    here, there = value * SCALE_NUMERATOR, SCALE_NUMERATOR / value
    return (
        f"is {value:.6g}: {what} of amax {here:.4g} in ModelOpt's amax/(6*448) convention, {there:.4g} in "
        "compressed-tensors' (6*448)/amax",
        "the value looks like compressed-tensors' (6*448)/amax; vLLM multiplies by it, so the output is garbage",
    )


def _partner_message(parent: str, first: str, kept: float, value: float, layout: ProducerLayout) -> tuple[str, str]:
    scale = layout.weight_global
    if first == _QUERY:
        return f"{scale} {value!r} differs from {first}'s {kept!r}", (
            "vLLM-Omni loads this self-attention's to_q, to_k and to_v into one to_qkv, vLLM's fused module, which "
            "keeps the largest and warns that accuracy will likely be reduced (read, not run: auto-round #2380); "
            "diffusers' fuse_projections concatenates them into one to_qkv"
        )
    if first == "to_k":
        return f"{scale} {value!r} differs from {first}'s {kept!r}", (
            "diffusers' fuse_projections concatenates a cross-attention's to_k and to_v into one to_kv, a module "
            "with one global scale (read, not run); vLLM-Omni's and SGLang's Wan load them apart"
        )
    if _EXPERT.search(parent):
        effect = (
            f"vLLM's fused w13 keeps {first}'s and warns \"w1_{scale} must match w3_{scale}\" (observed: other "
            "tokens, vLLM #54150)"
        )
    else:
        effect = (
            "vLLM's fused module keeps the largest and warns that accuracy will likely be reduced (read, not run: "
            "the other tokens observed, vLLM #54150, are an expert's w13's)"
        )
    return f"{scale} {value!r} differs from {first}'s {kept!r}", effect
