"""Each rule's reference, written from the catalogue: what ``scalar-scales rule CODE`` prints, and docs/rules.md
(``scalar-scales rule --all``; ``scripts/rule_docs.py`` writes it), which the test command holds to it."""

from __future__ import annotations

from typing import Any

from scalar_scales.doctor.catalogue import RULES
from scalar_scales.doctor.rules import EFFECTS, NEEDS, Command, Rule
from scalar_scales.nvfp4 import LAYOUTS

__all__ = ["REFERENCE_TITLE", "reference_document", "rule_data", "rule_reference"]

REFERENCE_TITLE = "# The rules of `scalar-scales check`"
_INTRODUCTION = """\
Generated from the rule catalogue (`scalar_scales.doctor.catalogue`) by
`scripts/rule_docs.py` (`scalar-scales rule --all` prints it); the test
command fails where this file differs. [check.md](check.md) says how the
rules are applied and reported. Each rule's example is a case of the broken
corpus (`scalar_scales_testkit.broken`), made in each layout the rule is
about: the test command holds the rule to finding it, and no other rule to
finding anything in it but those its example names as found alongside.

The codes are stable. NV1 covers the scale layout and its marker, NV2 the
tensors a server needs and cannot find, NV3 the scale values, NV4 shapes and
dtypes, NV5 the index, and NV6 what the config declares against what the
shards hold. Each rule's effect is what vLLM was seen to do with a checkpoint
that has the finding ([check-evidence.md](check-evidence.md)); its severity
follows from the effect."""


def rule_reference(rule: Rule) -> str:
    """One rule's reference, in Markdown: its heading, severity, effect, what it finds, its fix, what it is
    applied to, its explanation and its examples."""
    lines = [
        f"### {rule.code} {rule.name} ({rule.severity})",
        "",
        f"Finds: {rule.summary}. Effect: `{rule.effect}` ({EFFECTS[rule.effect]}).",
    ]
    lines += [
        f"Effect on {producer} checkpoints: `{effect}` ({EFFECTS[effect]})."
        for producer, effect in rule.elsewhere.items()
    ]
    if isinstance(rule.fix, Command):
        lines.append(f"Fix: `{rule.fix.line} PATH`.")
    elif rule.fix:
        lines.append(f"Fix: {rule.fix}.")
    if rule.judges_classes:
        lines.append("Not applied where the config names a class a checkpoint cannot show.")
    if rule.producers != frozenset(LAYOUTS):
        lines.append(f"Applied to {' and '.join(sorted(rule.producers))} checkpoints only.")
    if rule.needs:
        lines.append(f"Applied only to a checkpoint with {' and '.join(NEEDS[need] for need in rule.needs)}.")
    examples = [
        f"Example: `{example.name}`, {example.summary}"
        + (f" ({', '.join(example.alongside)} found alongside)." if example.alongside else ".")
        for example in rule.examples
    ]
    return "\n\n".join(["\n".join(lines), rule.explanation, *examples]) + "\n"


def reference_document() -> str:
    """Every rule's reference, in code order: docs/rules.md."""
    return "\n".join([REFERENCE_TITLE, "", _INTRODUCTION, "", *map(rule_reference, RULES.values())]).rstrip("\n") + "\n"


def rule_data(rule: Rule) -> dict[str, Any]:
    """One rule as data, for ``scalar-scales rule --output-format json`` (as ruff's ``rule --output-format
    json``): what its reference says, each part under its own key, from the same rule object."""
    from scalar_scales.consumers.by_rule import observed_consequences  # here: a check never prints them
    from scalar_scales.consumers.read import consequences

    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity,
        "effect": rule.effect,
        "effect_description": EFFECTS[rule.effect],
        "effect_elsewhere": dict(sorted(rule.elsewhere.items())),
        "summary": rule.summary,
        "fix": rule.fix.line if isinstance(rule.fix, Command) else rule.fix,
        "fixable": rule.fixable,
        "producers": sorted(rule.producers),
        "needs": list(rule.needs),
        "judges_classes": rule.judges_classes,
        "explanation": rule.explanation,
        "examples": [{"name": example.name, "summary": example.summary} for example in rule.examples],
        "consumers_observed": [
            {"consumer": found.consumer, "checkpoints": found.checkpoints, "consequence": found.consequence}
            for found in observed_consequences(rule.name)
        ],
        "consumers_not_run": [
            {"consumer": consumer.consumer, "how": consumer.how, "version": consumer.version, "consequence": text}
            for consumer, text in consequences(rule.name)
        ],
    }
