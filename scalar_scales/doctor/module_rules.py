"""The rules on an NVFP4 module's tensors: the ones a server needs and cannot find (NV2), and their shapes and
dtypes (NV4).

An NVFP4 module is one with a packed FP4 weight (compressed-tensors'
``weight_packed``; ModelOpt's ``weight`` where it is U8, or has a
``weight_scale_2``). A module without one is not judged: an FP8 module's
``weight_scale`` is not ours to judge. Each rule is one pass over the
columns of every module's tensors (:attr:`CheckpointView.nvfp4`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from scalar_scales.doctor.examples import Example, HalveGroups, Remove, SetDtype
from scalar_scales.doctor.rules import Found, checkpoint_rule
from scalar_scales.doctor.view import CheckpointView
from scalar_scales.nvfp4 import ProducerLayout

__all__ = [
    "missing_input_global_scale",
    "missing_weight_global_scale",
    "missing_weight_scale",
    "weight_scale_shape",
    "wrong_dtype",
]

_UNINITIALISED = "observed: NaN output or other tokens, as that memory varies"


@checkpoint_rule(
    "NV201",
    "missing-weight-global-scale",
    "error",
    "nan-output",
    summary="an NVFP4 module without its weight global scale",
    needs=("nvfp4",),
    examples=(
        Example(
            "no-weight-global-scale",
            "a module's weight global scale left out",
            (Remove("{module}.down_proj.{weight_global}"),),
            per_module=True,
        ),
    ),
    explanation="""
        Observed: NaN output, or other tokens, as the memory vLLM leaves uninitialised
        varies between runs. A module has its packed weight but no weight global
        scale (`weight_global_scale`, ModelOpt's `weight_scale_2`). vLLM allocates the
        parameter with `torch.empty`, nothing overwrites it, and the module
        dequantizes with whatever that memory held (vLLM PR 54444). A module whose
        tensors straddle two shards is checked once both are read.
        """,
)
def missing_weight_global_scale(checkpoint: CheckpointView) -> Iterator[Found]:
    if checkpoint.layout is not None:
        yield from _missing(checkpoint, checkpoint.layout, checkpoint.layout.weight_global)


@checkpoint_rule(
    "NV202",
    "missing-input-global-scale",
    "error",
    "nan-output",
    summary="a W4A4 module without its input global scale",
    needs=("nvfp4",),
    examples=(
        Example(
            "no-input-global-scale",
            "a module's input scale left out (vLLM #45212: a per-expert input scale missing)",
            (Remove("{module}.down_proj.{input_global}"),),
            per_module=True,
        ),
    ),
    explanation="""
        Observed: NaN output, or other tokens, as the memory vLLM leaves uninitialised
        varies between runs. The module's config group quantizes activations (W4A4),
        and the module has no input scale (`input_global_scale`, ModelOpt's
        `input_scale`): vLLM quantizes its activations with an uninitialised
        parameter (vLLM #45212: zeros, then 1/0, then NaN). A module needs the scale
        only when every NVFP4 group that quantizes it has `input_activations`.

        Where nothing declares the quantization (a lone `.safetensors` file,
        as diffusion checkpoints ship), the tensors tell: a module needs the
        scale where another NVFP4 module of its block type (the blocks its
        name numbers: `double_blocks.N`, `model.layers.N`) holds one. A
        weight-only export writes no input scale, and a W4A4 one writes one
        for every module it quantizes; a block type with both is a W4A4
        export that lost some. BFL's FLUX.2-dev-NVFP4 mixed file lacks the
        input scales of its 16 FP4 `txt_mlp` layers, whose `img_mlp`
        siblings hold theirs: SGLang's diffusion loader (0.5.23,
        `fsdp_load`) fills a missing `input_scale` with 1.0, where
        calibration gave about 146 to 171, and the images came out white
        (SGLang PR #23625). An NVFP4 module in no numbered block (an
        `lm_head`, a `proj_out`) is not judged without a config.
        """,
)
def missing_input_global_scale(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    if checkpoint.expectations.declares:
        yield from _missing(checkpoint, layout, layout.input_global, checkpoint.expectations.needs_input_scale)
        return
    modules, absent = checkpoint.nvfp4, checkpoint.absent
    column = modules.members.get(layout.input_global, [])
    if absent not in column or column.count(absent) == len(column):
        return  # every module has its input scale, or none has: weight-only, or W4A4 with dynamic scales
    static = {_block_type(base) for base, at in zip(modules.bases, column, strict=True) if at != absent}
    static.discard(None)

    def needs(module: str) -> bool:
        return _block_type(module) in static

    yield from _missing(checkpoint, layout, layout.input_global, needs, lambda base: _undeclared_why(base, layout))


@checkpoint_rule(
    "NV203",
    "missing-weight-scale",
    "error",
    "nan-output",
    summary="an NVFP4 module without its group scales",
    needs=("nvfp4",),
    examples=(
        Example(
            "no-weight-scale",
            "a module's group scales left out",
            (Remove("{module}.down_proj.{weight_scale}"),),
            per_module=True,
        ),
    ),
    explanation="""
        Observed: NaN output, or other tokens, as the memory vLLM leaves uninitialised
        varies between runs. A module has its packed weight but no `weight_scale`
        (the FP8 group scales); vLLM leaves the parameter uninitialised.
        """,
)
def missing_weight_scale(checkpoint: CheckpointView) -> Iterator[Found]:
    if checkpoint.layout is not None:
        yield from _missing(checkpoint, checkpoint.layout, checkpoint.layout.weight_scale)


def _missing(
    checkpoint: CheckpointView,
    layout: ProducerLayout,
    leaf: str,
    needs: Callable[[str], bool] | None = None,
    why_of: Callable[[str], str] | None = None,
) -> Iterator[Found]:
    """A finding for each NVFP4 module without its ``leaf`` (of those ``needs`` says need it), naming the file
    that holds its packed weight; ``why_of(module)`` says why it needs it, where the config does not."""
    modules, absent = checkpoint.nvfp4, checkpoint.absent
    column = modules.members.get(leaf, [])
    if absent not in column:
        return
    why = _missing_why(leaf, layout)
    packed = modules.members[layout.weight]
    for base, at, weight in zip(modules.bases, column, packed, strict=True):
        if at == absent and (needs is None or needs(base)):
            yield f"{base}.{leaf}", checkpoint.file_of(weight), "missing", why if why_of is None else why_of(base)


@checkpoint_rule(
    "NV401",
    "weight-scale-shape",
    "error",
    "nan-output",
    summary="group scales whose shape does not fit the packed weight",
    needs=("nvfp4",),
    examples=(
        Example(
            "weight-scale-groups-of-32",
            "group scales for groups of 32 where the config says 16, as a packer with the wrong group size writes them",
            (HalveGroups("{module}.gate_proj.{weight_scale}"),),
            per_module=True,
        ),
    ),
    explanation="""
        Observed: NaN output, or other tokens, as the memory vLLM leaves uninitialised
        varies between runs. A `weight_scale` whose shape does not fit its packed
        weight: (rows, packed_cols) needs (rows, packed_cols · 2 / group_size), the
        group size from the config group's `weights.group_size` (ModelOpt's
        `group_size`), 16 without a config. vLLM's weight loader does not refuse
        group scales for groups of 32: it loads them, and what the parameter does not
        get stays uninitialised.
        """,
)
def weight_scale_shape(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    modules, absent, shapes, expectations = (
        checkpoint.nvfp4,
        checkpoint.absent,
        checkpoint.shapes,
        checkpoint.expectations,
    )
    uniform = expectations.uniform_group_size
    weights, scales = modules.members[layout.weight], modules.members[layout.weight_scale]
    if uniform is not None and absent not in scales:  # as nearly every checkpoint: decided on whole columns
        packed_shapes = list(map(shapes.__getitem__, weights))
        expected_of = {packed: _scale_shape(packed, uniform) for packed in set(packed_shapes)}
        if list(map(expected_of.__getitem__, packed_shapes)) == list(map(shapes.__getitem__, scales)):
            return
    needed: dict[tuple[tuple[int, ...], int], tuple[int, ...] | None] = {}
    for base, weight, scale in zip(modules.bases, weights, scales, strict=True):
        if scale == absent:
            continue
        size = uniform if uniform is not None else expectations.group_size(base)
        packed = shapes[weight]
        key = (packed, size)
        if key not in needed:
            needed[key] = _scale_shape(packed, size)
        expected = needed[key]
        if shapes[scale] != expected:
            needs = f"needs {list(expected)}" if expected else f"cannot be split into groups of {size}"
            yield (
                f"{base}.{layout.weight_scale}",
                checkpoint.file_of(scale),
                f"shape {list(shapes[scale])}, but {layout.weight} {list(packed)} with group size {size} {needs}",
                "vLLM loads it without refusing, and what the parameter does not get stays uninitialised (observed: "
                "the engine starts, and its output is NaN or other tokens, as that memory varies)",
            )


@checkpoint_rule(
    "NV402",
    "wrong-dtype",
    "error",
    "nan-output",
    summary="an NVFP4 tensor of the wrong dtype",
    needs=("nvfp4",),
    examples=(
        Example(
            "weight-scale-e5m2",
            "group scales labelled with the other FP8 format, F8_E5M2",
            (SetDtype("{module}.gate_proj.{weight_scale}", "F8_E5M2"),),
            per_module=True,
        ),
    ),
    explanation="""
        An NVFP4 tensor of the wrong dtype. Both producers
        write the packed weight as U8 (two FP4 codes per byte), the group scales as
        F8_E4M3 and the global scales as F32, and vLLM allocates parameters to match;
        its `copy_` converts values into the parameter's dtype and does not keep the
        bytes. Only the tensors of NVFP4 modules are judged: an FP8 projection beside
        them has an F32 `weight_scale` of its own.
        """,
)
def wrong_dtype(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    modules, absent, dtypes = checkpoint.nvfp4, checkpoint.absent, checkpoint.dtypes
    for leaf, column in modules.members.items():
        expected = layout.dtypes[leaf]
        if absent not in column and list(map(dtypes.__getitem__, column)).count(expected) == len(column):
            continue  # as nearly every checkpoint: decided at C speed
        for base, at in zip(modules.bases, column, strict=True):
            if at != absent and dtypes[at] != expected:
                yield (f"{base}.{leaf}", checkpoint.file_of(at), *_dtype_message(leaf, dtypes[at], layout))


def _scale_shape(packed: tuple[int, ...], group_size: int) -> tuple[int, ...] | None:
    """The group scales' shape a packed weight of shape ``packed`` needs: one FP8 scale per group of FP4
    values."""
    if not packed or packed[-1] * 2 % group_size:
        return None
    return (*packed[:-1], packed[-1] * 2 // group_size)


def _block_type(module: str) -> str | None:
    """The blocks a module's name numbers, the number as ``*`` (``double_blocks.*`` for
    ``double_blocks.0.txt_mlp.0``); None for a module in no numbered block."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join([*parts[:i], "*"]) if i else None
    return None


def _undeclared_why(module: str, layout: ProducerLayout) -> str:
    return (
        f"nothing declares the quantization, and other NVFP4 modules of {_block_type(module)} hold their "
        f"{layout.input_global} (W4A4 with static input scales): a reader that serves it W4A4 quantizes its "
        "activations with a default (SGLang's diffusion loader fills a missing input_scale with 1.0; SGLang PR #23625)"
    )


def _missing_why(leaf: str, layout: ProducerLayout) -> str:
    has = f"the module has {layout.weight} (U8, packed FP4)"
    if leaf == layout.input_global:
        return (
            "the config quantizes the module's activations (W4A4), "
            f"but it has no {leaf}: vLLM quantizes them with the uninitialised parameter (torch.empty; "
            f"{_UNINITIALISED}; vLLM #45212)"
        )
    what = "per-group scales" if leaf == layout.weight_scale else "weight global scale"
    return (
        f"{has} but no {what}; vLLM leaves the parameter uninitialised (torch.empty) and dequantizes "
        f"with whatever that memory held (vLLM PR 54444; {_UNINITIALISED})"
    )


def _dtype_message(leaf: str, dtype: str, layout: ProducerLayout) -> tuple[str, str]:
    expected = layout.dtypes[leaf]
    if leaf == layout.weight:
        effect = (
            "vLLM's parameter is uint8 (two FP4 codes per byte), and copy_ converts the values instead of "
            "keeping the bytes"
        )
    elif leaf == layout.weight_scale:
        effect = "vLLM's parameter is float8_e4m3fn and copy_ converts the values into it (observed: NaN output)"
    else:
        effect = f"{layout.producer} writes float32; vLLM converts this one to float32 on load"
    return f"dtype {dtype}, not {expected}", effect
