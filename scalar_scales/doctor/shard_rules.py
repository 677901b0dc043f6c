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
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from typing import NamedTuple

from scalar_scales.doctor.config_rules import ModuleCounts, config_findings, inventory
from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.matching import packed_weights
from scalar_scales.doctor.rules import RULES, Finding, Findings
from scalar_scales.files.header import SafetensorsHeader, ending_with
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
    """What a shard's job found: its findings, the modules and fused groups it could not check alone, its modules
    counted by group (for the summary) and its KV-cache scales (for the checkpoint-wide config rules)."""

    findings: Findings
    open_modules: dict[str, dict[str, TensorFacts]]
    open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]
    modules: ModuleCounts
    kv_scales: int


PartnerScale = tuple[str, str, float]
"""A fused partner's weight global scale: (tensor, file, value)."""

MODULE_RULES = frozenset({"NV201", "NV202", "NV203", "NV401", "NV402"})
"""The rules a module check applies."""
_VALUE_RULES = frozenset({"NV301", "NV302"})


@dataclass(frozen=True)
class ShardChecks:
    """The work a check gives each shard's job (:class:`scalar_scales.scan.ShardWork`): every check of the rules
    ``codes`` that the shard's header and its scales can settle alone. A rule not in ``codes`` costs nothing;
    the modules are counted whatever the rules (the summary says what was checked)."""

    expectations: Expectations
    codes: frozenset[str] = frozenset(RULES)

    def __call__(self, header: SafetensorsHeader, scales: ShardScales) -> ShardDiagnosis:
        file, layout, codes = str(header.path), scales.layout, self.codes
        findings = Findings()
        _scale_findings(file, scales, layout, codes, findings)
        open_modules: dict[str, dict[str, TensorFacts]] = {}
        open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
        if layout is None:  # in another format, only the scales --include names are checked
            return ShardDiagnosis(findings, open_modules, open_partners, Counter(), 0)
        names = header.names
        position = dict(zip(names, range(len(names)), strict=True))
        packed = packed_weights(names, header.dtypes, position, layout)
        cut = len(layout.weight) + 1
        bases = [names[i][:-cut] for i in packed]
        leaves = Counter(map(_LAST, map(str.rpartition, names, repeat("."))))
        if not MODULE_RULES.isdisjoint(codes):
            _module_checks(header, layout, self.expectations, position, leaves, packed, bases, open_modules, findings)
        if "NV303" in codes:
            unsettled = _unsettled_partners(scales, layout)
            for group, members in _partner_groups(file, scales, layout, unsettled).items():
                if len(members) < len(group[1]):
                    open_partners[group] = members
                else:
                    findings.extend(partner_findings(group, members, layout))
        found = inventory(header, layout, bases, leaves)
        modules = config_findings(file, found, layout, self.expectations, codes, findings)
        return ShardDiagnosis(findings, open_modules, open_partners, modules, found.kv_scales)


def _module_checks(
    header: SafetensorsHeader,
    layout: ProducerLayout,
    expectations: Expectations,
    position: dict[str, int],
    leaves: Counter[str],
    packed: list[int],
    bases: list[str],
    open_modules: dict[str, dict[str, TensorFacts]],
    findings: Findings,
) -> None:
    """:func:`module_findings` for every module the shard holds whole, ``bases`` those with a ``packed`` weight;
    the others go into ``open_modules`` (``leaves``: how many names end in each last part).

    Worked on columns, at C speed, because a large MoE has tens of thousands
    of modules: the few modules that are incomplete, or whose dtypes or
    group scales' shape are off, are singled out, and only they are checked
    one by one.
    """
    file, names, dtypes, shapes = str(header.path), header.names, header.dtypes, header.shapes
    absent = len(names)
    """The index of a tensor a module lacks: past the end of the header."""
    dtype_at: list[str | None] = [*dtypes, None]
    shape_at: list[tuple[int, ...] | None] = [*shapes, None]
    members = {layout.weight: packed} | {
        leaf: list(map(position.get, map(operator.add, bases, repeat("." + leaf)), repeat(absent)))
        for leaf in layout.leaves[1:]
    }
    suspects: set[int] = set()
    for leaf, column in members.items():
        held, expected = list(map(dtype_at.__getitem__, column)), layout.dtypes[leaf]
        if held.count(expected) + held.count(None) != len(column):
            suspects.update(k for k, dtype in enumerate(held) if dtype not in (expected, None))
    for leaf in (layout.weight_scale, layout.weight_global, layout.input_global):
        column = members[leaf]
        if absent in column:
            lacking = (k for k, i in enumerate(column) if i == absent)
            if leaf == layout.input_global:
                lacking = (k for k in lacking if expectations.needs_input_scale(bases[k]))
            suspects.update(lacking)
    packed_shapes = list(map(shapes.__getitem__, packed))
    size = expectations.uniform_group_size
    if size is not None:
        fitting = {shape: _scale_shape(shape, size) for shape in set(packed_shapes)}
        needed_shapes = list(map(fitting.__getitem__, packed_shapes))
    else:
        needed_shapes = [_scale_shape(s, expectations.group_size(b)) for s, b in zip(packed_shapes, bases, strict=True)]
    scale_shapes = list(map(shape_at.__getitem__, members[layout.weight_scale]))
    if scale_shapes != needed_shapes:
        suspects.update(k for k, pair in enumerate(zip(scale_shapes, needed_shapes, strict=True)) if pair[0] != pair[1])
    for k in sorted(suspects):
        present = {leaf: column[k] for leaf, column in members.items() if column[k] != absent}
        facts = {leaf: (file, dtypes[i], shapes[i]) for leaf, i in present.items()}
        if _missing(bases[k], facts, layout, expectations):
            open_modules[bases[k]] = facts
        else:
            findings.extend(module_findings(bases[k], facts, layout, expectations))
    weight_suffix = f".{layout.weight}"
    for leaf in layout.leaves[1:]:
        column = members[leaf]
        if leaves[leaf] == len(column) - column.count(absent):
            continue  # each belongs to a module with a packed weight
        for i in sorted(set(ending_with(names, "." + leaf)).difference(column)):
            base = names[i][: -len(leaf) - 1]
            if base + weight_suffix not in position:
                open_modules.setdefault(base, {})[leaf] = (file, dtypes[i], shapes[i])


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


def _scale_findings(
    file: str, scales: ShardScales, layout: ProducerLayout | None, codes: Collection[str], findings: Findings
) -> None:
    """NV101 for each (1,) scale, NV301 for each invalid value, NV302 for each one in the other convention (the
    rules of ``codes``)."""
    if "NV101" in codes:
        legacy = list(compress(scales.names, map(_LEGACY_SHAPE.__eq__, scales.shapes)))
        findings.add_each("NV101", legacy, file, _legacy_message(layout))
    if _VALUE_RULES.isdisjoint(codes) or _all_ordinary(scales.values, layout is None or layout.divisor):
        return
    names, values = scales.names, scales.values
    if None in values:  # a value this tool does not read
        read = list(compress(range(len(values)), map(operator.is_not, values, repeat(None))))
        names, values = list(map(names.__getitem__, read)), list(map(values.__getitem__, read))
    valid = list(map(operator.and_, map(operator.lt, repeat(0.0), values), map(operator.lt, values, repeat(math.inf))))
    leaves = list(map(sys.intern, map(_LAST, map(str.rpartition, names, repeat(".")))))  # one object each to send
    flagged: list[tuple[str, Callable[..., str], list[bool]]] = []
    if "NV301" in codes:
        flagged.append(("NV301", _invalid_value_message, list(map(operator.not_, valid))))
    if "NV302" in codes and layout is not None:
        bound_of = {leaf: layout.other_convention_bound(leaf) for leaf in layout.leaves[2:]}
        bounds = list(map(bound_of.get, leaves, repeat(math.nan)))  # NaN: a scale --include adds, of no convention
        other = map(operator.lt if layout.other_convention_below else operator.gt, values, bounds)
        flagged.append(("NV302", _other_convention_message, list(map(operator.and_, valid, other))))
    for code, message, mask in flagged:
        at = list(compress(range(len(values)), mask))
        tensors, found, found_leaves = (list(map(column.__getitem__, at)) for column in (names, values, leaves))
        findings.add_written(code, tensors, file, message, found, found_leaves, layout)


_LEGACY_SHAPE = (1,)
_LAST = operator.itemgetter(2)


def _all_ordinary(values: list[float | None], divisor: bool) -> bool:
    """Whether every value is one a scale of its convention ordinarily has, as nearly every one is: decided at C
    speed, where the loop of :func:`_scale_findings` decides one value at a time."""
    if not values:
        return True
    if None in values or any(map(math.isnan, values)):  # type: ignore[arg-type]
        return False
    low, high = min(values), max(values)  # type: ignore[type-var]
    return 1.0 <= low and high < math.inf if divisor else 0.0 < low and high <= 1.0


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


def _other_convention_message(value: float, leaf: str, layout: ProducerLayout) -> str:
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


def _unsettled_partners(scales: ShardScales, layout: ProducerLayout) -> list[int]:
    """The weight global scales (indices into ``scales``) of fused partners whose group the shard does not
    settle alone: a group it holds whole, with equal and valid scales, is settled, as nearly every one is.
    Decided on columns, where :func:`_partner_groups` takes one scale at a time."""
    suffix = f".{layout.weight_global}"
    positions = ending_with(scales.names, suffix)
    stems = [scales.names[i][: -len(suffix)] for i in positions]
    projections = [stem.rpartition(".")[2] for stem in stems]
    partnered = list(map(_PARTNERS_OF.__contains__, projections))
    positions, stems, projections = (list(compress(column, partnered)) for column in (positions, stems, projections))
    value_of = dict(zip(stems, map(scales.values.__getitem__, positions), strict=True))
    settled: set[str] = set()
    for partners in FUSED_PARTNERS:
        first = partners[0]
        parents = [stem[: -len(first)] for stem in compress(stems, map(first.__eq__, projections))]
        members = [list(map(operator.add, parents, repeat(member))) for member in partners]
        kept = list(map(value_of.__getitem__, members[0]))
        agree = list(map(operator.eq, kept, kept))  # a NaN is unsettled
        if None in kept:  # a value this tool does not read: unsettled too
            agree = [flag and value is not None for flag, value in zip(agree, kept, strict=True)]
        for stems_of_member in members[1:]:
            agree = list(map(operator.and_, agree, map(operator.eq, kept, map(value_of.get, stems_of_member))))
        for stems_of_member in members:
            settled.update(compress(stems_of_member, agree))
    return [i for i, stem in zip(positions, stems, strict=True) if stem not in settled]


def _partner_groups(
    file: str, scales: ShardScales, layout: ProducerLayout, positions: list[int]
) -> dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]:
    """The weight global scales of fused partners at ``positions`` (indices into ``scales``), by (parent module,
    partner names)."""
    groups: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
    suffix = f".{layout.weight_global}"
    for i in positions:
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
