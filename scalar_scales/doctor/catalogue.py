"""Every rule of ``scalar-scales check``, one line a rule, and the selection ``--select`` and ``--ignore`` make.

A rule is defined, its text and examples too, in its family's module
(:mod:`.scale_rules`, :mod:`.sibling_rules`, :mod:`.module_rules`, :mod:`.index_rules`,
:mod:`.config_rules`); its line here is all the rest needs: ``scalar-scales
rule``, ``--select`` and ``--ignore``, the test kit's broken corpus,
docs/rules.md and the count of rules README.md and docs/check.md give
(``scripts/rule_docs.py``) are made from :data:`RULES`.
"""

from __future__ import annotations

from collections.abc import Iterable

import scalar_scales.doctor.config_rules as config_rules
import scalar_scales.doctor.index_rules as index_rules
import scalar_scales.doctor.module_rules as module_rules
import scalar_scales.doctor.scale_rules as scale_rules
import scalar_scales.doctor.sibling_rules as sibling_rules
from scalar_scales.doctor.rules import Rule

__all__ = ["RULES", "codes_matching", "selected_codes"]


def _by_code(*rules: Rule) -> dict[str, Rule]:
    """``rules`` by code, in code order; two rules of one code or one name are a mistake made here."""
    by_code = {rule.code: rule for rule in sorted(rules, key=lambda rule: rule.code)}
    if len(by_code) != len(rules) or len({rule.name for rule in rules}) != len(rules):
        raise ValueError("two rules of the catalogue share a code or a name")
    return by_code


RULES: dict[str, Rule] = _by_code(
    scale_rules.legacy_scale_shape,
    scale_rules.marker_disagrees,
    scale_rules.marker_missing,
    module_rules.missing_weight_global_scale,
    module_rules.missing_input_global_scale,
    module_rules.missing_weight_scale,
    scale_rules.invalid_scale_value,
    scale_rules.other_convention,
    scale_rules.fused_scales_differ,
    sibling_rules.placeholder_scale,
    sibling_rules.outlier_scale,
    module_rules.weight_scale_shape,
    module_rules.wrong_dtype,
    index_rules.index_names_missing_tensor,
    index_rules.tensor_not_in_index,
    config_rules.quantized_but_ignored,
    config_rules.quantized_but_not_targeted,
    config_rules.targeted_but_not_nvfp4,
    config_rules.input_scale_for_weight_only,
    config_rules.kv_scales_missing,
    config_rules.kv_scales_undeclared,
    config_rules.nvfp4_undeclared,
    config_rules.algorithm_contradicts_groups,
    config_rules.nvfp4_group_size,
    config_rules.kv_scale_unpaired,
    config_rules.router_not_excluded,
    config_rules.declaration_files_disagree,
    config_rules.format_contradicts_arguments,
)
"""Every rule, by code. The effects are the ones docs/check-evidence.md records; tests/base/doctor/test_evidence.py
fails where they differ."""


def selected_codes(
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    *,
    extend_select: Iterable[str] = (),
    start: frozenset[str] | None = None,
    named: tuple[str, str, str] = ("--select ", "--extend-select ", "--ignore "),
) -> frozenset[str]:
    """The codes ``--select``, ``--extend-select`` and ``--ignore`` leave: each entry is a code or a code prefix, as
    in ruff's options, and the selection is made as ruff layers its own: ``select`` replaces what came before,
    ``extend_select`` adds to it and ``ignore`` takes from it. ``start``: what came before (a configuration
    file's selection, :mod:`.settings`); every rule where None. ``named``: how a refusal names the three, as the
    caller's user gave them (the command's options, or the library's arguments).

    An entry that matches no rule is a :class:`ValueError` naming it: a typo
    must not silently switch a rule off. So is a selection that leaves no
    rule: a check of no rule would pass any checkpoint.
    """
    selected, extended, ignored = _entries(select), _entries(extend_select), _entries(ignore)
    before = frozenset(RULES) if start is None else start
    chosen = (frozenset(_matching(selected)) if selected else before) | _matching(extended)
    chosen -= _matching(ignored)
    if not chosen:
        given = " ".join(
            f"{option}{','.join(entries)}"
            for option, entries in zip(named, (selected, extended, ignored), strict=True)
            if entries
        )
        raise ValueError(
            f"{given or 'the selection'} leaves no rule to apply, and a check of no rule would pass any checkpoint"
        )
    return chosen


def codes_matching(values: Iterable[str]) -> frozenset[str]:
    """The codes the entries of ``values`` name (codes, prefixes or ``ALL``, comma-separated or not, as
    ``--select`` takes them): a :class:`ValueError` naming the first that names none."""
    return frozenset(_matching(_entries(values)))


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
