"""The rules ``scalar-scales check`` applies, each with a stable code, like a linter's.

A rule's code never changes meaning; ``docs/check.md`` documents each one
with its upstream evidence. The codes are grouped by what they look at:
NV1 the scale layout and its marker, NV2 tensors a server needs and cannot
find, NV3 scale values, NV4 shapes and dtypes, NV5 the index.

A :class:`Finding` is one line for a user: the tensor, and what a server
will do with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

__all__ = ["RULES", "Finding", "Rule", "Severity", "selected_codes"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    """What the rule finds, in a few words."""
    fix: str | None = None
    """What makes the finding go away, where one command does."""


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule("NV101", "legacy-scale-shape", "error", "a global scale of shape (1,)", "scalar-scales migrate"),
        Rule(
            "NV102",
            "marker-disagrees",
            "error",
            "config.json's format_version disagrees with the scales' layout",
            "scalar-scales migrate",
        ),
        Rule("NV201", "missing-weight-global-scale", "error", "an NVFP4 module without weight_global_scale"),
        Rule("NV202", "missing-input-global-scale", "error", "a W4A4 module without input_global_scale"),
        Rule("NV301", "invalid-scale-value", "error", "a global scale that is zero, negative, NaN or Inf"),
        Rule("NV302", "reciprocal-scale", "error", "a global scale stored as amax/(6*448) instead of (6*448)/amax"),
        Rule("NV303", "fused-scales-differ", "warning", "fused partners (gate/up, q/k/v) with different global scales"),
        Rule("NV401", "weight-scale-shape", "error", "a weight_scale whose shape does not fit its weight_packed"),
        Rule("NV402", "wrong-dtype", "error", "an NVFP4 tensor of the wrong dtype"),
        Rule("NV501", "index-disagrees", "error", "the index and the shards name different tensors"),
    )
}


class Finding(NamedTuple):
    """One problem: its rule, the tensor (None for the checkpoint as a whole), the file, and what it means.

    A named tuple: a broken checkpoint can have one per tensor, and they
    travel back from worker processes.
    """

    code: str
    tensor: str | None
    file: str
    message: str

    @property
    def severity(self) -> Severity:
        return RULES[self.code].severity


def selected_codes(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> frozenset[str]:
    """The codes ``--select`` and ``--ignore`` leave: each entry is a code or a code prefix, as in ruff's options.

    With no ``select``, every rule is selected. An entry that matches no rule
    is a :class:`ValueError` naming it: a typo must not silently switch a
    rule off.
    """
    select, ignore = [_entries(s) for s in (select, ignore)]
    chosen = _matching(select) if select else set(RULES)
    return frozenset(chosen - _matching(ignore))


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
