"""Every rule of ``scalar-scales check``, in code order, and the selection ``--select`` and ``--ignore`` make."""

from __future__ import annotations

from collections.abc import Iterable

from scalar_scales.doctor.config_rules import (
    input_scale_for_weight_only,
    kv_scales_missing,
    kv_scales_undeclared,
    nvfp4_undeclared,
    quantized_but_ignored,
    quantized_but_not_targeted,
    targeted_but_not_nvfp4,
)
from scalar_scales.doctor.index_rules import index_names_missing_tensor, tensor_not_in_index
from scalar_scales.doctor.module_rules import (
    missing_input_global_scale,
    missing_weight_global_scale,
    missing_weight_scale,
    weight_scale_shape,
    wrong_dtype,
)
from scalar_scales.doctor.rules import Rule
from scalar_scales.doctor.scale_rules import (
    fused_scales_differ,
    invalid_scale_value,
    legacy_scale_shape,
    marker_disagrees,
    marker_missing,
    other_convention,
)

__all__ = ["RULES", "selected_codes"]

RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in sorted(
        (
            legacy_scale_shape,
            marker_disagrees,
            marker_missing,
            missing_weight_global_scale,
            missing_input_global_scale,
            missing_weight_scale,
            invalid_scale_value,
            other_convention,
            fused_scales_differ,
            weight_scale_shape,
            wrong_dtype,
            index_names_missing_tensor,
            tensor_not_in_index,
            quantized_but_ignored,
            quantized_but_not_targeted,
            targeted_but_not_nvfp4,
            input_scale_for_weight_only,
            kv_scales_missing,
            kv_scales_undeclared,
            nvfp4_undeclared,
        ),
        key=lambda rule: rule.code,
    )
}
"""Every rule, by code. The effects are the ones docs/check-evidence.md records; tests/base/doctor/test_evidence.py
fails where they differ."""


def selected_codes(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> frozenset[str]:
    """The codes ``--select`` and ``--ignore`` leave: each entry is a code or a code prefix, as in ruff's options.

    With no ``select``, every rule is selected. An entry that matches no rule
    is a :class:`ValueError` naming it: a typo must not silently switch a
    rule off.
    """
    chosen = _matching(_entries(select)) if _entries(select) else set(RULES)
    return frozenset(chosen - _matching(_entries(ignore)))


def _entries(values: Iterable[str]) -> list[str]:
    return [part.strip().upper() for value in values for part in value.split(",") if part.strip()]


def _matching(prefixes: list[str]) -> set[str]:
    matched: set[str] = set()
    for prefix in prefixes:
        codes = {code for code in RULES if code.startswith(prefix)} if prefix != "ALL" else set(RULES)
        if not codes:
            raise ValueError(f"unknown rule code {prefix!r}; the rules are {', '.join(RULES)}")
        matched |= codes
    return matched
