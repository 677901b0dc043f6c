"""The rules on a global scale judged against its siblings (NV3, scale values): a placeholder among calibrated
values, and an outlier.

A scale's siblings are the scales a calibration of the same data should make
alike: the same projection's in every expert of one MoE layer (a layer's
``experts.N.down_proj``), and, outside the experts, the same projection's in
every layer (``layers.N.self_attn.q_proj``). A value is judged only against
a group of at least :data:`MIN_SIBLINGS`, by its distance in decades (log10)
from the group's median, which half the group may be wrong without moving.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterator
from itertools import repeat
from typing import NamedTuple, cast

from scalar_scales.doctor.examples import Example, ScaleAmax, SetValue
from scalar_scales.doctor.rules import Found, checkpoint_rule
from scalar_scales.doctor.scale_rules import RECIPROCAL_FLOOR
from scalar_scales.doctor.view import CheckpointView
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, SCALE_NUMERATOR, ProducerLayout

__all__ = [
    "MIN_SIBLINGS",
    "OUTLIER_DECADES",
    "OUTLIER_MADS",
    "PLACEHOLDER",
    "PLACEHOLDER_DECADES",
    "Group",
    "outlier_scale",
    "placeholder_scale",
    "sibling_groups",
]

MIN_SIBLINGS = 3
"""The fewest scales a group must hold to be judged: of two, neither shows which is the odd one."""
PLACEHOLDER = 1.0
"""What compressed-tensors (PR #637: ``generate_gparam``'s ``nan_to_num``, in every release the producer
environments run) writes for a global scale whose calibration gave NaN or Inf: an expert calibration never routed a
token to has amax 0, and 2688 / amax overflows."""
PLACEHOLDER_DECADES = 1.0
"""How far (in decades) every calibrated sibling must be from a 1.0 for it to be a placeholder: a calibrated 1.0
means an amax of exactly 2688.0, and the real exports' siblings lie within 0.155 decades of their median."""
OUTLIER_DECADES = 3.0
"""How far (in decades) from its siblings' median a value must be to be an outlier, at the least: the real
``oneshot`` and ModelOpt exports' siblings lie within 0.155 decades of their median, the synthetic checkpoint's
(drawn uniformly from 100 to 50,000) within log10(500) = 2.7."""
OUTLIER_MADS = 3.5 / 0.6745
"""How many median absolute deviations (in decades) from the median a value must be to be an outlier, where the
group's own spread is wider than :data:`OUTLIER_DECADES` allows for: Iglewicz and Hoaglin's modified z-score
cut-off of 3.5."""


@checkpoint_rule(
    "NV304",
    "placeholder-scale",
    "error",
    "wrong-output",
    summary="a global scale of 1.0, compressed-tensors' placeholder, among calibrated siblings",
    needs=("nvfp4",),
    producers=frozenset({COMPRESSED_TENSORS}),
    examples=(
        Example(
            "placeholder-experts",
            "calibration routed no token to two experts of a layer: compressed-tensors wrote 1.0 for each of their "
            "input scales, the Inf that 2688 / 0 makes",
            tuple(
                SetValue(f"{expert}.{projection}.{{input_global}}", PLACEHOLDER)
                for expert in ("model.layers.1.mlp.experts.1", "{module}")
                for projection in ("gate_proj", "up_proj", "down_proj")
            ),
        ),
    ),
    explanation="""
        A `weight_global_scale` or `input_global_scale` of exactly 1.0 where
        its calibrated siblings (the same projection in the other experts of
        its MoE layer, or, outside the experts, in the other layers), two at
        the least, all lie at least 10 times above it (or all below).
        compressed-tensors writes 1.0 where calibration gave NaN or Inf
        (`generate_gparam`, PR #637; 0.19, 0.20 and 0.20.1 do:
        tests/producer/test_placeholder_scale.py): an expert calibration
        never routed a token to has amax 0, and `2688 / amax` overflows. A
        1.0 is a valid divisor alone; a calibrated one would mean an amax of
        exactly 2688.0, while its siblings show the module's range is 10
        times apart.

        vLLM's fused-MoE paths that give every expert of a layer one input
        scale (0.32's FlashInfer backends, `amax_for_moe_activation_quant`,
        and its emulation backend, `a13_scale.max()`) take the largest amax
        among the experts: one placeholder (amax 2688) sets the activation
        range of every expert of its layer, and their FP8 group scales lose
        their precision. The corpus's break leaves two of a layer's experts
        uncalibrated (every input scale of theirs 1.0), as calibration on too
        few tokens does; the finding gives the siblings' range.
        """,
)
def placeholder_scale(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    for leaf in (layout.weight_global, layout.input_global):
        if PLACEHOLDER not in checkpoint.scales_of(leaf)[2]:
            continue  # as nearly every checkpoint: decided at C speed
        for group in sibling_groups(checkpoint, leaf, 10.0**PLACEHOLDER_DECADES):
            placeholders, calibrated = _split_placeholders(group.values)
            for k in placeholders:
                yield group.found(k, leaf, checkpoint, _placeholder_message(leaf, layout, group, calibrated))


@checkpoint_rule(
    "NV305",
    "outlier-scale",
    "warning",
    "none",
    summary="a global scale orders of magnitude from its siblings'",
    needs=("nvfp4",),
    examples=(
        Example(
            "outlier-expert",
            "an expert's down projection calibrated on a token of near-zero activations: its input scale implies "
            "an amax a millionth of the other experts'",
            (ScaleAmax("{module}.down_proj.{input_global}", 1e-6),),
        ),
    ),
    explanation=f"""
        A global scale (`weight_global_scale`/`input_global_scale`,
        ModelOpt's `weight_scale_2`/`input_scale`) far from its siblings':
        the same projection in the other experts of its MoE layer, or,
        outside the experts, a weight scale's in the other layers (two at
        the least). An input scale outside the experts is not judged against
        other layers: an activation's range changes with depth, and a layer's
        few massive activations set it apart by orders of magnitude. Far
        is measured in decades (log10) from the group's median, which up to
        half the group may be wrong without moving: at least
        {OUTLIER_DECADES:g} decades (1000 times), and at least
        {OUTLIER_MADS:.2f} median absolute deviations (a modified z-score
        above 3.5, Iglewicz and Hoaglin's bar) where the group spreads wider.

        The real `oneshot` exports (the toys quantized by compressed-tensors
        0.19 and 0.20) and NVIDIA's ModelOpt exports that the test command
        makes lie within 0.2 decades (1.6 times) of their siblings' median
        (0.155 at most on every run's artifacts cached here, measured by
        scripts/sibling_spread.py);
        the synthetic checkpoint's scales, drawn from 100 to 50,000, within
        log10(500) = 2.7. A bar of median absolute deviations alone would
        flag the real exports: two thirds of their groups of input scales
        have none (the experts share one value), and the modified z-scores of
        their weight scales reach 8.7. A value 1000 times from its siblings'
        median is a calibration that saw almost nothing (an expert routed a
        token or two) or a placeholder: compressed-tensors' 1.0 is NV304's,
        a value in the other producer's convention NV302's, and a ModelOpt
        input scale whose float32 reciprocal is Inf NV301's, and none is
        reported here.

        What it does depends on the path. Where vLLM gives every expert of a
        layer one input scale (0.32's FlashInfer backends and its emulation
        backend), it takes the largest amax: an outlier of larger amax sets
        every expert's activation range, and one of smaller amax is unused.
        Where each expert keeps its own (0.32's CUTLASS backend), an expert
        whose scale implies a small amax saturates its activations. The
        corpus's break is one of smaller amax, which vLLM's CPU emulation
        serves as the intact checkpoint; it is a warning for the paths that
        keep it. The finding gives the value, the amax it implies, and the
        siblings' range.
        """,
)
def outlier_scale(checkpoint: CheckpointView) -> Iterator[Found]:
    layout = checkpoint.layout
    if layout is None:
        return
    placeholders_apply = layout.producer == COMPRESSED_TENSORS
    for leaf in (layout.weight_global, layout.input_global):
        convention, below = layout.other_convention_bound(leaf), layout.other_convention_below
        for group in sibling_groups(checkpoint, leaf, 10.0**OUTLIER_DECADES):
            if leaf == layout.input_global and not group.experts:
                continue  # an activation's range changes with depth: layers are no siblings for it
            values = group.values
            skipped = set(_split_placeholders(values)[0]) if placeholders_apply and PLACEHOLDER in values else set()
            skipped.update(k for k, value in enumerate(values) if (value < convention if below else value > convention))
            if leaf == layout.input_global and not layout.divisor:
                skipped.update(k for k, value in enumerate(values) if value < RECIPROCAL_FLOOR)  # NV301's
            logs = list(map(math.log10, values))
            median = _median(logs)
            spread = _median(list(map(abs, map(operator.sub, logs, repeat(median)))))
            far = max(OUTLIER_DECADES, OUTLIER_MADS * spread)
            for k, log in enumerate(logs):
                if abs(log - median) >= far and k not in skipped:
                    others = values[:k] + values[k + 1 :]
                    message = _outlier_message(values[k], 10**median, min(others), max(others), leaf, layout, group)
                    yield group.found(k, leaf, checkpoint, message)


class Group(NamedTuple):
    """Siblings that may hold a finding: what they are, in words, whether they are a layer's experts, each one's
    value, and where it is among the leaf's scales (:meth:`CheckpointView.scales_of`: ``modules`` and ``at``)."""

    what: str
    experts: bool
    values: list[float]
    members: list[int]
    modules: list[str]
    at: list[int]

    def found(self, k: int, leaf: str, checkpoint: CheckpointView, message: tuple[str, str]) -> Found:
        """The finding of member ``k``'s scale ``leaf``."""
        i = self.members[k]
        return (f"{self.modules[i]}.{leaf}", checkpoint.file_of(self.at[i]), *message)


def sibling_groups(checkpoint: CheckpointView, leaf: str, apart: float = 1.0) -> Iterator[Group]:
    """The groups of ``leaf``'s siblings (each at least :data:`MIN_SIBLINGS` finite, positive values: NV301 judges
    the others) whose largest value is ``apart`` times their smallest or more: no group closer can hold what the
    rule looks for. Most checkpoints are decided at C speed: all their ``leaf`` scales lie closer than that."""
    modules, at, found = checkpoint.scales_of(leaf)
    if len(modules) < MIN_SIBLINGS:
        return
    numbers = cast(list[float], found)
    every = None not in found and not math.isnan(sum(numbers))  # a NaN makes the sum NaN
    low, high = (min(numbers), max(numbers)) if every else (0.0, 0.0)
    every = every and 0.0 < low <= high < math.inf
    if every and high < apart * low:
        return
    split = list(map(str.rpartition, modules, repeat(".")))
    owners, projections = list(map(_FIRST, split)), list(map(_LAST, split))
    parents = list(map(_FIRST, map(str.rpartition, owners, repeat("."))))
    keys = list(zip(parents, projections, strict=True))
    number = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    ids = list(map(number.__getitem__, keys))
    order, sizes = sorted(range(len(ids)), key=ids.__getitem__), Counter(ids)
    members: dict[tuple[str, str], list[int]] = {}
    start = 0
    for (parent, projection), i in number.items():  # each group's members, consecutive in ``order``
        group, start = order[start : start + sizes[i]], start + sizes[i]
        if parent.endswith(".experts"):
            members[(parent, projection)] = group
            continue
        for k in group:
            layers = _layer_group(owners[k])
            if layers is not None:
                members.setdefault((layers, projection), []).append(k)
    for (parent, projection), group in members.items():
        values = list(map(found.__getitem__, group))
        if not every:
            group = [k for k, value in zip(group, values, strict=True) if _calibrated(value)]
            values = list(map(found.__getitem__, group))
        numbers = cast(list[float], values)
        if len(group) < MIN_SIBLINGS or max(numbers) < apart * min(numbers):
            continue
        experts = parent.endswith(".experts")
        what = (
            f"{projection} in the other experts of {parent.removesuffix('.experts')}"
            if experts
            else f"{parent.replace('.*', '.N')}.{projection} in the other layers"
        )
        yield Group(what, experts, numbers, group, modules, at)


def _layer_group(owner: str) -> str | None:
    """A module outside the experts, with its layer's number as ``*``: ``model.layers.*.self_attn``; None where it
    is in no numbered layer."""
    head, layers, rest = owner.partition(".layers.")
    number, dot, tail = rest.partition(".")
    if not layers or not number.isdigit():
        return None
    return f"{head}.layers.*{dot}{tail}"


_FIRST = operator.itemgetter(0)
_LAST = operator.itemgetter(2)


def _median(values: list[float]) -> float:
    """The median of ``values``: :func:`statistics.median`, whose import (fractions, decimal, random) would cost
    every ``check`` more than this rule takes."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def _calibrated(value: float | None) -> bool:
    return value is not None and 0.0 < value < math.inf


def _split_placeholders(values: list[float]) -> tuple[list[int], list[float]]:
    """The positions of the placeholders among ``values`` (each 1.0 where the others, two at the least, all lie
    :data:`PLACEHOLDER_DECADES` or more from 1.0, on one side), and the calibrated values."""
    ones = [k for k, value in enumerate(values) if value == PLACEHOLDER]
    if not ones:
        return [], values
    calibrated = [value for value in values if value != PLACEHOLDER]
    far = 10.0**PLACEHOLDER_DECADES
    if len(calibrated) < 2:
        return [], values
    if min(calibrated) >= far * PLACEHOLDER or max(calibrated) * far <= PLACEHOLDER:
        return ones, calibrated
    return [], values


def _amax(value: float, layout: ProducerLayout) -> float:
    return SCALE_NUMERATOR / value if layout.divisor else value * SCALE_NUMERATOR


def _placeholder_message(leaf: str, layout: ProducerLayout, group: Group, calibrated: list[float]) -> tuple[str, str]:
    detail = (
        f"is 1.0, compressed-tensors' placeholder for a calibration that gave NaN or Inf: its {len(calibrated)} "
        f"calibrated siblings ({group.what}) range {min(calibrated):.6g} to {max(calibrated):.6g}"
    )
    if leaf == layout.input_global and group.experts:
        why = (
            "vLLM's fused-MoE paths that share one input scale take the largest amax of the layer's experts, and "
            "this placeholder's (2688) sets every expert's activation range"
        )
    elif leaf == layout.input_global:
        why = "vLLM quantizes this module's activations as if their amax were 2688, not its siblings' range"
    else:
        why = "the module was not calibrated: its weights were quantized against a global scale of 1.0, not their range"
    return detail, why


def _outlier_message(
    value: float, median: float, low: float, high: float, leaf: str, layout: ProducerLayout, group: Group
) -> tuple[str, str]:
    amax, typical = _amax(value, layout), _amax(median, layout)
    detail = (
        f"{leaf} {value:.6g} (amax {amax:.4g}) is {max(value, median) / min(value, median):.3g} times from its "
        f"group's median {median:.6g} (amax {typical:.4g}); its siblings ({group.what}) range {low:.6g} to {high:.6g}"
    )
    if leaf == layout.weight_global:
        why = "a calibration outlier: the module's weights were quantized against a range orders of magnitude apart"
    elif amax > typical:  # an input scale: judged among a layer's experts alone
        why = (
            "where vLLM shares one input scale among a layer's experts, it takes the largest amax: this one sets "
            "every expert's activation range"
        )
    else:
        why = (
            "where each expert keeps its own input scale, this module's activations above its small amax saturate; "
            "where vLLM shares one among a layer's experts, the largest amax wins and this one is unused"
        )
    return detail, why
