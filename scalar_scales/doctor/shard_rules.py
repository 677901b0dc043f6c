"""The rules ``scalar-scales check`` settles inside each shard's job, from its header and scale values.

Each finding belongs to a rule in :mod:`scalar_scales.doctor.rules`, and is
worded in the shard's layout (:class:`~scalar_scales.nvfp4.ProducerLayout`):
compressed-tensors' names and convention, or ModelOpt's. Three kinds of
check run here:

- **Module checks** (NV2, NV4) look at every NVFP4 tensor of a module: the
  packed weight, its group scales and the global scales. They run where the
  header is, in the shard's job, so that no header travels between
  processes. A module whose tensors the shard does not all hold (one that
  straddles two shards) is handed back open, and
  :mod:`scalar_scales.doctor.checkpoint_rules` checks it once every shard's
  part is in.
- **Scale checks** (NV101, NV301, NV302, NV303) need the global scales'
  names, shapes and values, which the shard's job has read. Fused partners
  (NV303) split between shards are handed back open too.
- **Config checks** (NV6, :mod:`.config_rules`) hold the shard's modules to
  what the config declares.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from typing import NamedTuple

from scalar_scales.doctor.config_rules import Inventory, config_findings, inventory
from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.matching import packed_weights
from scalar_scales.doctor.rules import Finding
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.nvfp4 import SCALE_NUMERATOR, ProducerLayout
from scalar_scales.scan import ShardScales

__all__ = [
    "FUSED_PARTNERS",
    "PartnerScale",
    "ShardChecks",
    "ShardDiagnosis",
    "TensorFacts",
    "module_findings",
    "partner_findings",
]

FUSED_PARTNERS: tuple[tuple[str, ...], ...] = (
    ("gate_proj", "up_proj"),
    ("w1", "w3"),
    ("q_proj", "k_proj", "v_proj"),
    ("q_a_proj", "kv_a_proj_with_mqa"),
)
"""Sibling projections vLLM loads into one fused module (``gate_up_proj``, the experts' ``w13``, ``qkv_proj``,
DeepSeek's ``fused_qkv_a_proj``), which has one global scale: llm-compressor's ``FUSED_LAYER_NAMES``. The first
member is the one an expert's ``w13`` keeps."""

_PARTNERS_OF = {member: group for group in FUSED_PARTNERS for member in group}
_EXPERT = re.compile(r"\.experts\.\d+$")

TensorFacts = tuple[str, str, tuple[int, ...]]
"""A module tensor as a module check needs it: (file, dtype, shape)."""


class ShardDiagnosis(NamedTuple):
    """What a shard's job found: its findings, the modules and fused groups it could not check alone, and its
    inventory of modules (for the summary and the checkpoint-wide config rules)."""

    findings: list[Finding]
    open_modules: dict[str, dict[str, TensorFacts]]
    open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]
    inventory: Inventory


PartnerScale = tuple[str, str, float]
"""A fused partner's weight global scale: (tensor, file, value)."""


@dataclass(frozen=True)
class ShardChecks:
    """The work a check gives each shard's job (:class:`scalar_scales.scan.ShardWork`): every check that the
    shard's header and its scales can settle alone."""

    expectations: Expectations

    def __call__(self, header: SafetensorsHeader, scales: ShardScales) -> ShardDiagnosis:
        file = str(header.path)
        layout = scales.layout
        findings = _scale_findings(file, scales, layout)
        open_modules: dict[str, dict[str, TensorFacts]] = {}
        open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
        found = Inventory()
        if layout is not None:  # in another format, only the scales --include names are checked
            findings += _module_checks(header, file, layout, self.expectations, open_modules)
            for group, members in _partner_groups(file, scales, layout).items():
                if len(members) < len(group[1]):
                    open_partners[group] = members
                else:
                    findings.extend(partner_findings(group, members, layout))
            found = inventory(header, layout)
            findings += config_findings(file, found, layout, self.expectations)
        return ShardDiagnosis(findings, open_modules, open_partners, found)


def _module_checks(
    header: SafetensorsHeader,
    file: str,
    layout: ProducerLayout,
    expectations: Expectations,
    open_modules: dict[str, dict[str, TensorFacts]],
) -> list[Finding]:
    """:func:`module_findings` for every module the shard holds whole; the others go into ``open_modules``.

    Worked column-wise, because a large MoE has tens of thousands of
    modules: the few modules that are incomplete, or whose dtypes or group
    scales' shape are off, are singled out, and only they are checked one
    by one.
    """
    names, dtypes, shapes = header.names, header.dtypes, header.shapes
    position = dict(zip(names, range(len(names)), strict=True))
    packed = packed_weights(names, dtypes, position, layout)
    weight_suffix = f".{layout.weight}"
    bases = [names[i][: -len(weight_suffix)] for i in packed]
    members = {layout.weight: packed} | {
        leaf: list(map(position.get, map(operator.add, bases, repeat("." + leaf))))
        for leaf in layout.leaves
        if leaf != layout.weight
    }
    expected_dtypes = layout.dtypes
    suspects = {
        k
        for leaf, column in members.items()
        for k, i in enumerate(column)
        if i is not None and dtypes[i] != expected_dtypes[leaf]
    }
    group_size = expectations.group_size
    suspects.update(
        k
        for k, (i, scale) in enumerate(zip(packed, members[layout.weight_scale], strict=True))
        if scale is None or shapes[scale] != _scale_shape(shapes[i], group_size(bases[k]))
    )
    suspects.update(k for k, i in enumerate(members[layout.weight_global]) if i is None)
    suspects.update(
        k for k, i in enumerate(members[layout.input_global]) if i is None and expectations.needs_input_scale(bases[k])
    )
    accounted = {*packed, *(i for column in members.values() for i in column if i is not None)}
    findings: list[Finding] = []
    for k in sorted(suspects):
        present = {leaf: column[k] for leaf, column in members.items() if column[k] is not None}
        facts = {leaf: (file, dtypes[i], shapes[i]) for leaf, i in present.items()}
        if _missing(bases[k], facts, layout, expectations):
            open_modules[bases[k]] = facts
        else:
            findings.extend(module_findings(bases[k], facts, layout, expectations))
    for leaf in layout.leaves[1:]:
        for i in _ending_with(names, "." + leaf):
            base = names[i][: -len(leaf) - 1]
            if i not in accounted and base + weight_suffix not in position:
                open_modules.setdefault(base, {})[leaf] = (file, dtypes[i], shapes[i])
    return findings


def _ending_with(names: list[str], suffix: str) -> list[int]:
    return list(compress(range(len(names)), map(str.endswith, names, repeat(suffix))))


def _scale_shape(packed: tuple[int, ...], group_size: int) -> tuple[int, ...] | None:
    """The group scales' shape a packed weight of shape ``packed`` needs: one FP8 scale per group of FP4
    values."""
    if not packed or packed[-1] * 2 % group_size:
        return None
    return (*packed[:-1], packed[-1] * 2 // group_size)


def _is_nvfp4(facts: Mapping[str, TensorFacts], layout: ProducerLayout) -> bool:
    """Whether a module's tensors make it an NVFP4 module of this layout: it has the packed weight (for ModelOpt,
    a U8 one, or any with a weight_scale_2). A module without one is not NVFP4: an FP8 module's weight_scale is
    not ours to judge."""
    weight = facts.get(layout.weight)
    if weight is None:
        return False
    return not layout.weight_named_plainly or weight[1] == "U8" or layout.weight_global in facts


def _missing(
    base: str, facts: Mapping[str, TensorFacts], layout: ProducerLayout, expectations: Expectations
) -> list[str]:
    """The tensors a server needs for this module that ``facts`` lacks; all of them without the packed weight."""
    if not _is_nvfp4(facts, layout):
        return list(layout.leaves)
    needed = [layout.weight_scale, layout.weight_global]
    if expectations.needs_input_scale(base):
        needed.append(layout.input_global)
    return [leaf for leaf in needed if leaf not in facts]


def module_findings(
    base: str, facts: Mapping[str, TensorFacts], layout: ProducerLayout, expectations: Expectations
) -> Iterator[Finding]:
    """NV402, NV201, NV202, NV203 and NV401 for one NVFP4 module."""
    if not _is_nvfp4(facts, layout):
        return
    for leaf, (tensor_file, dtype, _) in facts.items():
        if dtype != layout.dtypes[leaf]:
            yield Finding("NV402", f"{base}.{leaf}", tensor_file, _dtype_message(leaf, dtype, layout))
    file, _, packed = facts[layout.weight]
    rules = {layout.weight_scale: "NV203", layout.weight_global: "NV201", layout.input_global: "NV202"}
    for leaf in _missing(base, facts, layout, expectations):
        yield Finding(rules[leaf], f"{base}.{leaf}", file, _missing_message(leaf, layout))
    group_size = expectations.group_size(base)
    expected = _scale_shape(packed, group_size)
    if layout.weight_scale in facts and facts[layout.weight_scale][2] != expected:
        scale_file, _, shape = facts[layout.weight_scale]
        needs = f"needs {list(expected)}" if expected else f"cannot be split into groups of {group_size}"
        yield Finding(
            "NV401",
            f"{base}.{layout.weight_scale}",
            scale_file,
            f"shape {list(shape)}, but {layout.weight} {list(packed)} with group size {group_size} {needs}: "
            "vLLM loads it without refusing, and what the parameter does not get stays uninitialised (observed: "
            "the engine starts, and its output is NaN or other tokens, as that memory varies)",
        )


def _missing_message(leaf: str, layout: ProducerLayout) -> str:
    has = f"the module has {layout.weight} (U8, packed FP4)"
    if leaf == layout.input_global:
        why = (
            "the config quantizes the module's activations (W4A4), "
            f"but it has no {leaf}: vLLM quantizes them with the uninitialised parameter (torch.empty; observed: "
            "NaN output or other tokens, as that memory varies; vLLM #45212)"
        )
        return f"missing: {why}"
    what = "per-group scales" if leaf == layout.weight_scale else "weight global scale"
    return (
        f"missing: {has} but no {what}; vLLM leaves the parameter uninitialised (torch.empty) and dequantizes "
        "with whatever that memory held (vLLM PR 54444; observed: NaN output or other tokens, as that memory varies)"
    )


def _dtype_message(leaf: str, dtype: str, layout: ProducerLayout) -> str:
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
    return f"dtype {dtype}, not {expected}: {effect}"


def _scale_findings(file: str, scales: ShardScales, layout: ProducerLayout | None) -> list[Finding]:
    """NV101 for each (1,) scale, NV301 for each invalid value, NV302 for each one in the other convention."""
    legacy = _legacy_message(layout)
    findings = [
        Finding("NV101", name, file, legacy)
        for name, shape in zip(scales.names, scales.shapes, strict=True)
        if shape == (1,)
    ]
    divisor = layout is None or layout.divisor
    for name, value in zip(scales.names, scales.values, strict=True):
        if value is None or (1.0 <= value < math.inf if divisor else 0.0 < value <= 1.0):
            continue  # ordinary in either convention: nearly every scale
        leaf = name.rpartition(".")[2]
        if not 0.0 < value < math.inf:
            findings.append(Finding("NV301", name, file, _invalid_value_message(value, leaf, layout)))
        elif layout is not None and leaf in layout.leaves[2:] and layout.other_convention(leaf, value):
            findings.append(Finding("NV302", name, file, _other_convention_message(leaf, value, layout)))
    return findings


def _legacy_message(layout: ProducerLayout | None) -> str:
    if layout is not None and layout.weight_named_plainly:
        return "shape (1,), where ModelOpt writes 0-D"
    return (
        "shape (1,): vLLM 0.23, 0.32 and 0.33 load it (observed), and so does transformers; a loader that "
        "copy_s it into a 0-D tensor fails (output with shape [] doesn't match the broadcast shape [1])"
    )


def _invalid_value_message(value: float, leaf: str, layout: ProducerLayout | None) -> str:
    divides = layout is None or layout.divisor
    uses = "computes with 1/scale" if divides else "multiplies by the scale"
    if math.isnan(value):
        return f"is NaN: vLLM {uses}, which is NaN, and so is everything this module outputs"
    if value == 0.0:
        if layout is not None and leaf == layout.input_global:
            return (
                f"is 0: vLLM {uses}, and quantizes this module's activations with Inf (an input scale is 0 when "
                "calibration sent no token through the module, an uncalibrated expert)"
            )
        return f"is 0: vLLM {uses}" + (", which is Inf" if divides else ", which zeroes what it scales")
    if math.isinf(value):
        return f"is Inf: vLLM {uses}" + (", which zeroes what it scales" if divides else ", which is Inf")
    return f"is negative ({value!r}): vLLM {uses} and flips the sign of what this scale scales"


def _other_convention_message(leaf: str, value: float, layout: ProducerLayout) -> str:
    what = "weights" if leaf == layout.weight_global else "activations"
    if layout.divisor:
        here, there = SCALE_NUMERATOR / value, value * SCALE_NUMERATOR
        return (
            f"is {value:.6g}, which means {what} of amax {here:.4g} in compressed-tensors' (6*448)/amax "
            f"convention; it looks like ModelOpt's amax/(6*448) (amax {there:.4g}). vLLM computes with 1/scale, "
            "so the output is garbage (modular issue 6600)"
        )
    here, there = value * SCALE_NUMERATOR, SCALE_NUMERATOR / value
    return (
        f"is {value:.6g}, which means {what} of amax {here:.4g} in ModelOpt's amax/(6*448) convention; it looks "
        f"like compressed-tensors' (6*448)/amax (amax {there:.4g}). vLLM multiplies by it, so the output is garbage"
    )


def _partner_groups(
    file: str, scales: ShardScales, layout: ProducerLayout
) -> dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]:
    """The weight global scales of fused partners, by (parent module, partner names)."""
    groups: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
    suffix = f".{layout.weight_global}"
    for i in _ending_with(scales.names, suffix):
        name, value = scales.names[i], scales.values[i]
        if value is None or math.isnan(value):
            continue
        parent, _, projection = name[: -len(suffix)].rpartition(".")
        partners = _PARTNERS_OF.get(projection)
        if partners is not None:
            groups.setdefault((parent, partners), {})[projection] = (name, file, value)
    return groups


def partner_findings(
    group: tuple[str, tuple[str, ...]], members: dict[str, PartnerScale], layout: ProducerLayout
) -> Iterator[Finding]:
    """NV303: a fused partner whose weight global scale differs from its group's first member's."""
    parent, partners = group
    first = next(p for p in partners if p in members)
    kept = members[first][2]
    for name, file, value in members.values():
        if value != kept:
            yield Finding("NV303", name, file, _partner_message(parent, first, kept, value, layout))


def _partner_message(parent: str, first: str, kept: float, value: float, layout: ProducerLayout) -> str:
    scale = layout.weight_global
    if _EXPERT.search(parent):
        effect = f"vLLM's fused w13 keeps {first}'s and warns \"w1_{scale} must match w3_{scale}\""
    else:
        effect = "vLLM's fused module keeps the largest and warns that accuracy will likely be reduced"
    return f"{scale} {value!r} differs from {first}'s {kept!r}: {effect} (observed: other tokens, vLLM #54150)"
