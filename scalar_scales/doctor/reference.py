"""Each rule's reference, written from the catalogue: what ``scalar-scales rule CODE`` prints, and docs/rules.md
(``scalar-scales rule --all``), which the test command holds to it."""

from __future__ import annotations

from scalar_scales.doctor.catalogue import RULES
from scalar_scales.doctor.rules import EFFECTS, Rule
from scalar_scales.nvfp4 import LAYOUTS

__all__ = ["REFERENCE_TITLE", "reference_document", "rule_reference"]

REFERENCE_TITLE = "# The rules of `scalar-scales check`"
_INTRODUCTION = """\
Generated from the rule catalogue (`scalar_scales.doctor.catalogue`) by
`scalar-scales rule --all`; the test command fails where this file differs.
[check.md](check.md) says how the rules are applied and reported.

The codes are stable. NV1 covers the scale layout and its marker, NV2 the
tensors a server needs and cannot find, NV3 the scale values, NV4 shapes and
dtypes, NV5 the index, and NV6 what the config declares against what the
shards hold. Each rule's effect is what vLLM was seen to do with a checkpoint
that has the finding ([check-evidence.md](check-evidence.md)); its severity
follows from the effect."""


def rule_reference(rule: Rule) -> str:
    """One rule's reference, in Markdown: its heading, severity, effect, what it finds, its fix, and its
    explanation."""
    lines = [
        f"### {rule.code} {rule.name} ({rule.severity})",
        "",
        f"Finds: {rule.summary}. Effect: `{rule.effect}` ({EFFECTS[rule.effect]}).",
    ]
    lines += [
        f"Effect on {producer} checkpoints: `{effect}` ({EFFECTS[effect]})."
        for producer, effect in rule.elsewhere.items()
    ]
    if rule.fix:
        lines.append(f"Fix: `{rule.fix} PATH`.")
    if rule.judges_classes:
        lines.append("Not applied where the config names a class a checkpoint cannot show.")
    if rule.producers != frozenset(LAYOUTS):
        lines.append(f"Applied to {' and '.join(sorted(rule.producers))} checkpoints only.")
    return "\n".join([*lines, "", rule.explanation, ""])


def reference_document() -> str:
    """Every rule's reference, in code order: docs/rules.md."""
    return "\n".join([REFERENCE_TITLE, "", _INTRODUCTION, "", *map(rule_reference, RULES.values())]).rstrip("\n") + "\n"
