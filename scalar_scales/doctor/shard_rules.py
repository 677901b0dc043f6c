"""The rules ``scalar-scales check`` settles inside each shard's job, from its header and scale values.

Each finding belongs to a rule in :mod:`scalar_scales.doctor.rules`. Two
kinds of check run here:

- **Module checks** (NV201, NV202, NV401, NV402) look at every NVFP4 tensor
  of a module: ``weight_packed``, ``weight_scale`` and the global scales.
  They run where the header is, in the shard's job, so that no header
  travels between processes. A module whose tensors the shard does not all
  hold (one that straddles two shards) is handed back open, and
  :mod:`scalar_scales.doctor.checkpoint_rules` checks it once every shard's
  part is in.
- **Scale checks** (NV101, NV301, NV302, NV303) need the global scales'
  names, shapes and values, which the shard's job has read. Fused partners
  (NV303) split between shards are handed back open too.

The values a server computes with are the ones vLLM's compressed-tensors
NVFP4 methods compute: the reciprocal of each global scale (compressed-tensors
stores ``(6 * 448) / amax``), one global scale per fused module.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from typing import NamedTuple

from scalar_scales.doctor.rules import Finding
from scalar_scales.doctor.scheme import Scheme, group_size_of
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.nvfp4 import SCALE_NUMERATOR, TENSOR_DTYPES
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

RECIPROCAL_BELOW = {"weight_global_scale": 1.0, "input_global_scale": SCALE_NUMERATOR / 65504.0}
"""A global scale below this implies, in compressed-tensors' convention, an amax no model has: over 2688 for a
weight, over float16's largest value (65504) for an activation. In ModelOpt's convention it is an ordinary one."""

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
_WEIGHT_GLOBAL_SCALE = ".weight_global_scale"
_EXPERT = re.compile(r"\.experts\.\d+$")

TensorFacts = tuple[str, str, tuple[int, ...]]
"""A module tensor as a module check needs it: (file, dtype, shape)."""


class ShardDiagnosis(NamedTuple):
    """What a shard's job found: its findings, and the modules and fused groups it could not check alone."""

    findings: list[Finding]
    open_modules: dict[str, dict[str, TensorFacts]]
    open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]


PartnerScale = tuple[str, str, float]
"""A fused partner's weight global scale: (tensor, file, value)."""


@dataclass(frozen=True)
class ShardChecks:
    """The work a check gives each shard's job (:class:`scalar_scales.scan.ShardWork`): every check that the
    shard's header and its global scales can settle alone."""

    scheme: Scheme | None

    def __call__(self, header: SafetensorsHeader, scales: ShardScales) -> ShardDiagnosis:
        file = str(header.path)
        findings = _scale_findings(file, scales.names, scales.shapes, scales.values)
        open_modules: dict[str, dict[str, TensorFacts]] = {}
        if scales.nvfp4:  # in another format, only the scales --include names are checked
            findings += _module_checks(header, file, self.scheme, open_modules)
        open_partners: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
        for group, members in _partner_groups(file, scales.names, scales.values).items():
            if len(members) < len(group[1]):
                open_partners[group] = members
            else:
                findings.extend(partner_findings(group, members))
        return ShardDiagnosis(findings, open_modules, open_partners)


def _module_checks(
    header: SafetensorsHeader, file: str, scheme: Scheme | None, open_modules: dict[str, dict[str, TensorFacts]]
) -> list[Finding]:
    """:func:`_module_findings` for every module the shard holds whole; the others go into ``open_modules``.

    Worked column-wise, because a large MoE has tens of thousands of
    modules: the few modules that are incomplete, or whose dtypes or
    weight_scale shape are off, are singled out, and only they are checked
    one by one.
    """
    names, dtypes, shapes = header.names, header.dtypes, header.shapes
    position = dict(zip(names, range(len(names)), strict=True))
    leaves = {leaf: _ending_with(names, "." + leaf) for leaf in TENSOR_DTYPES}
    packed = leaves["weight_packed"]
    bases = [names[i][: -len(".weight_packed")] for i in packed]
    members = {"weight_packed": packed} | {
        leaf: list(map(position.get, map(operator.add, bases, repeat("." + leaf))))
        for leaf in TENSOR_DTYPES
        if leaf != "weight_packed"
    }
    group_size = group_size_of(scheme)
    suspects = {
        k
        for leaf, column in members.items()
        for k, i in enumerate(column)
        if i is not None and dtypes[i] != TENSOR_DTYPES[leaf]
    }
    suspects.update(
        k
        for k, (i, scale) in enumerate(zip(packed, members["weight_scale"], strict=True))
        if scale is None or shapes[scale] != _scale_shape(shapes[i], group_size)
    )
    suspects.update(k for k, i in enumerate(members["weight_global_scale"]) if i is None)
    if scheme is not None and scheme.input_activations is not False:
        suspects.update(k for k, i in enumerate(members["input_global_scale"]) if i is None)
    accounted = {*packed, *(i for column in members.values() for i in column if i is not None)}
    orphans = [i for leaf, indices in leaves.items() for i in indices if i not in accounted]
    findings: list[Finding] = []
    for k in sorted(suspects):
        present = {leaf: column[k] for leaf, column in members.items() if column[k] is not None}
        facts = {leaf: (file, dtypes[i], shapes[i]) for leaf, i in present.items()}
        if _missing(bases[k], facts, scheme):
            open_modules[bases[k]] = facts
        else:
            findings.extend(module_findings(bases[k], facts, scheme))
    for i in orphans:
        base, _, leaf = names[i].rpartition(".")
        open_modules.setdefault(base, {})[leaf] = (file, dtypes[i], shapes[i])
    return findings


def _ending_with(names: list[str], suffix: str) -> list[int]:
    return list(compress(range(len(names)), map(str.endswith, names, repeat(suffix))))


def _scale_shape(packed: tuple[int, ...], group_size: int) -> tuple[int, ...] | None:
    """The weight_scale shape a weight_packed of shape ``packed`` needs: one FP8 scale per group of FP4 values."""
    if not packed or packed[-1] * 2 % group_size:
        return None
    return (*packed[:-1], packed[-1] * 2 // group_size)


def _missing(base: str, facts: Mapping[str, TensorFacts], scheme: Scheme | None) -> list[str]:
    """The tensors a server needs for this module that ``facts`` lacks; all of them without ``weight_packed``."""
    if "weight_packed" not in facts:
        return list(TENSOR_DTYPES)
    needed = ["weight_scale", "weight_global_scale"]
    if scheme is not None and scheme.needs_input_scale(base):
        needed.append("input_global_scale")
    return [leaf for leaf in needed if leaf not in facts]


def module_findings(base: str, facts: Mapping[str, TensorFacts], scheme: Scheme | None) -> Iterator[Finding]:
    """NV402, NV201, NV202 and NV401 for one module that has ``weight_packed`` (a module without one is not
    NVFP4: an FP8 module's ``weight_scale`` is not ours to judge)."""
    if "weight_packed" not in facts:
        return
    for leaf, (tensor_file, dtype, _) in facts.items():
        if dtype != TENSOR_DTYPES[leaf]:
            yield Finding("NV402", f"{base}.{leaf}", tensor_file, _dtype_message(leaf, dtype))
    file, _, packed = facts["weight_packed"]
    for leaf in _missing(base, facts, scheme):
        code, message = _MISSING[leaf]
        yield Finding(code, f"{base}.{leaf}", file, message)
    group_size = group_size_of(scheme)
    expected = _scale_shape(packed, group_size)
    if "weight_scale" in facts and facts["weight_scale"][2] != expected:
        scale_file, _, shape = facts["weight_scale"]
        needs = f"needs {list(expected)}" if expected else f"cannot be split into groups of {group_size}"
        yield Finding(
            "NV401",
            f"{base}.weight_scale",
            scale_file,
            f"shape {list(shape)}, but weight_packed {list(packed)} with group size {group_size} {needs}: "
            "vLLM's weight loader fails on it or, where the shapes broadcast, repeats scales over the wrong groups",
        )


_MISSING = {
    "weight_scale": (
        "NV401",
        "missing: the module has weight_packed but no per-group weight_scale; vLLM leaves the parameter "
        "uninitialised (torch.empty)",
    ),
    "weight_global_scale": (
        "NV201",
        "missing: the module has weight_packed but no weight_global_scale; vLLM leaves the parameter "
        "uninitialised (torch.empty) and dequantizes with whatever that memory held (vLLM PR 54444)",
    ),
    "input_global_scale": (
        "NV202",
        "missing: the scheme quantizes activations (the config has input_activations) but the module has no "
        "input_global_scale; vLLM leaves it uninitialised and quantizes activations with garbage",
    ),
}
"""For each tensor a module may lack: the rule that reports it, and what the finding says."""


def _dtype_message(leaf: str, dtype: str) -> str:
    expected = TENSOR_DTYPES[leaf]
    if leaf == "weight_packed":
        effect = (
            "vLLM's parameter is uint8 (two FP4 codes per byte), and copy_ converts the values instead of "
            "keeping the bytes"
        )
    elif leaf == "weight_scale":
        effect = "vLLM's parameter is float8_e4m3fn and copy_ rounds the values into it"
    else:
        effect = "compressed-tensors writes float32; vLLM converts this one to float32 on load"
    return f"dtype {dtype}, not {expected}: {effect}"


def _scale_findings(
    file: str, names: list[str], shapes: list[tuple[int, ...]], values: list[float | None]
) -> list[Finding]:
    """NV101 for each (1,) scale, NV301 for each invalid value, NV302 for each reciprocal-looking one."""
    findings = [
        Finding("NV101", name, file, _LEGACY_MESSAGE)
        for name, shape in zip(names, shapes, strict=True)
        if shape == (1,)
    ]
    for name, value in zip(names, values, strict=True):
        if value is None or 1.0 <= value < math.inf:
            continue
        if not 0.0 < value < math.inf:
            findings.append(Finding("NV301", name, file, _invalid_value_message(value)))
        elif value < RECIPROCAL_BELOW.get(name.rpartition(".")[2], 0.0):
            findings.append(Finding("NV302", name, file, _reciprocal_message(name, value)))
    return findings


_LEGACY_MESSAGE = (
    "shape (1,): vLLM < 0.24 refuses to load it (output with shape [] doesn't match the broadcast shape [1])"
)


def _invalid_value_message(value: float) -> str:
    if math.isnan(value):
        return "is NaN: vLLM computes with 1/scale, which is NaN, and so is everything this module outputs"
    if math.isinf(value):
        return "is Inf: vLLM computes with 1/scale, which is 0, and zeroes what this scale scales"
    if value == 0.0:
        return (
            "is 0: vLLM computes with 1/scale, which is Inf (an input scale is 0 when calibration sent no token "
            "through the module, an uncalibrated expert)"
        )
    return f"is negative ({value!r}): vLLM computes with 1/scale and flips the sign of what this scale scales"


def _reciprocal_message(name: str, value: float) -> str:
    what = "weights" if name.endswith(_WEIGHT_GLOBAL_SCALE) else "activations"
    return (
        f"is {value:.6g}, which means {what} of amax {SCALE_NUMERATOR / value:.4g} in compressed-tensors' "
        f"(6*448)/amax convention; it looks like ModelOpt's amax/(6*448) (amax {value * SCALE_NUMERATOR:.4g}). "
        "vLLM computes with 1/scale, so the output is garbage (modular issue 6600)"
    )


def _partner_groups(
    file: str, names: list[str], values: list[float | None]
) -> dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]]:
    """The weight global scales of fused partners, by (parent module, partner names)."""
    groups: dict[tuple[str, tuple[str, ...]], dict[str, PartnerScale]] = {}
    for i in _ending_with(names, _WEIGHT_GLOBAL_SCALE):
        name, value = names[i], values[i]
        if value is None or math.isnan(value):
            continue
        parent, _, projection = name[: -len(_WEIGHT_GLOBAL_SCALE)].rpartition(".")
        partners = _PARTNERS_OF.get(projection)
        if partners is not None:
            groups.setdefault((parent, partners), {})[projection] = (name, file, value)
    return groups


def partner_findings(group: tuple[str, tuple[str, ...]], members: dict[str, PartnerScale]) -> Iterator[Finding]:
    """NV303: a fused partner whose weight global scale differs from its group's first member's."""
    parent, partners = group
    first = next(p for p in partners if p in members)
    kept = members[first][2]
    for name, file, value in members.values():
        if value != kept:
            yield Finding("NV303", name, file, _partner_message(parent, first, kept, value))


def _partner_message(parent: str, first: str, kept: float, value: float) -> str:
    if _EXPERT.search(parent):
        effect = (
            f"vLLM's fused w13 keeps {first}'s and warns \"w1_weight_global_scale must match "
            'w3_weight_global_scale. Accuracy may be affected."'
        )
    else:
        effect = "vLLM's fused module keeps the largest and warns that accuracy will likely be reduced"
    return f"weight_global_scale {value!r} differs from {first}'s {kept!r}: {effect}"
