"""What a rule of ``scalar-scales check`` is: one object with its stable code, name, severity, effect, summary,
fix and explanation, and the one function that finds it, over one shard or over the whole checkpoint.

The codes never change meaning. They are grouped by what they look at: NV1
the scale layout and its marker, NV2 tensors a server needs and cannot find,
NV3 scale values, NV4 shapes and dtypes, NV5 the index, NV6 what the config
declares against what the shards hold. The catalogue of every rule is
:data:`scalar_scales.doctor.catalogue.RULES`; docs/rules.md is generated from
it (``scalar-scales rule --all``).

Each rule has an **effect**: what vLLM was seen to do with a checkpoint that
has the finding, in the run that ``scripts/check_evidence.py`` makes of real
``oneshot`` and ModelOpt artifacts broken one way at a time
(``docs/check-evidence.md``); where ModelOpt's layout was seen to do
otherwise, the rule says so for that layout.
Its severity follows from the effect: a checkpoint that fails to load or
gives NaN or wrong output is an error; one that runs less accurately, or
that some other consumer refuses, a warning; and one every consumer serves
as it should, information.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Literal, NamedTuple

from scalar_scales.doctor.view import CheckpointView, ShardView
from scalar_scales.nvfp4 import LAYOUTS, Producer, ProducerLayout

__all__ = [
    "EFFECTS",
    "SEVERITIES",
    "CheckpointRule",
    "Effect",
    "Finding",
    "Found",
    "Rule",
    "Severity",
    "ShardRule",
    "checkpoint_rule",
    "shard_rule",
]

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
Effect = Literal["load-error", "nan-output", "wrong-output", "accuracy", "none"]
EFFECTS: dict[Effect, str] = {
    "load-error": "vLLM does not start: the checkpoint fails to load",
    "nan-output": "vLLM starts, and its log-probabilities hold NaN",
    "wrong-output": "vLLM starts and generates other tokens than the intact checkpoint",
    "accuracy": "vLLM generates the intact checkpoint's tokens, with logits measurably apart",
    "none": "vLLM serves it as it serves the intact checkpoint",
}
"""Each effect, most harmful first, as docs/check.md defines it."""

Found = tuple[str | None, str, str, str]
"""What a rule's function finds: the tensor (None for the checkpoint as a whole), the file, the detail and the
why (:class:`Finding`)."""


class Finding(NamedTuple):
    """One problem: its rule, the tensor (None for the checkpoint as a whole), the file, and what it means, in two
    parts: the ``detail`` of this finding (its value, its shape, its partner), and ``why`` that matters, which
    findings of one rule share (a report of 66,048 findings says it once)."""

    rule: Rule
    tensor: str | None
    file: str
    detail: str
    why: str

    @property
    def message(self) -> str:
        """The finding as one sentence: its detail, then why it matters."""
        return f"{self.detail}: {self.why}"

    @property
    def code(self) -> str:
        return self.rule.code

    @property
    def severity(self) -> Severity:
        return self.rule.severity


@dataclass(frozen=True, eq=False)
class Rule:
    """One rule: what it is called and means, and (in :class:`ShardRule` and :class:`CheckpointRule`) the one
    function that finds it. ``judges_classes``: the rule judges modules against a config's class names, which a
    checkpoint cannot show for a model's own classes (it is then not applied). ``producers``: the layouts the rule
    is about (compressed-tensors' marker means nothing in a ModelOpt checkpoint)."""

    code: str
    name: str
    severity: Severity
    effect: Effect
    summary: str
    """What the rule finds, in a few words."""
    fix: str | None = None
    """What makes the finding go away, where one command does."""
    judges_classes: bool = False
    producers: frozenset[Producer] = frozenset(LAYOUTS)
    elsewhere: Mapping[Producer, Effect] = field(default_factory=dict)
    """The layouts whose breaks vLLM was seen to treat otherwise than compressed-tensors' (``effect``), and how."""

    def effect_for(self, layout: ProducerLayout | None) -> Effect:
        """What vLLM was seen to do with a checkpoint of ``layout`` that has the finding."""
        return self.effect if layout is None else self.elsewhere.get(layout.producer, self.effect)

    @property
    def explanation(self) -> str:
        """What the rule finds, why it matters, and the evidence: its function's docstring."""
        return inspect.cleandoc(self._function.__doc__ or "")

    def is_about(self, layout: ProducerLayout | None) -> bool:
        """The rule is about checkpoints of ``layout`` (None: no NVFP4 layout, which every rule may speak of)."""
        return layout is None or layout.producer in self.producers

    @property
    def _function(self) -> Callable[..., object]:
        raise NotImplementedError

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class ShardRule(Rule):
    """A rule found in each shard's per-tensor scales alone."""

    find: Callable[[ShardView], Iterable[Found]] = field(kw_only=True)

    @property
    def _function(self) -> Callable[..., object]:
        return self.find

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        if not self.is_about(checkpoint.layout):
            return iter(())
        return chain.from_iterable(_findings(self, self.find(shard)) for shard in checkpoint.shards)


@dataclass(frozen=True, eq=False)
class CheckpointRule(Rule):
    """A rule found in the whole checkpoint: its tensors as one table, its config, its index."""

    find: Callable[[CheckpointView], Iterable[Found]] = field(kw_only=True)

    @property
    def _function(self) -> Callable[..., object]:
        return self.find

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        if not self.is_about(checkpoint.layout):
            return iter(())
        return _findings(self, self.find(checkpoint))


def _findings(rule: Rule, found: Iterable[Found]) -> Iterator[Finding]:
    """Each of ``found`` as a :class:`Finding` of ``rule``, built at C speed: a large MoE's legacy checkpoint has
    one finding for each of its tens of thousands of scales."""
    findings: Iterator[Finding] = map(tuple.__new__, repeat(Finding), map(operator.add, repeat((rule,)), found))
    return findings


def shard_rule(
    code: str,
    name: str,
    severity: Severity,
    effect: Effect,
    summary: str,
    *,
    fix: str | None = None,
    elsewhere: Mapping[Producer, Effect] | None = None,
) -> Callable[[Callable[[ShardView], Iterable[Found]]], ShardRule]:
    """Make the decorated function, which finds the rule in one shard's scales, a rule; its docstring is the rule's
    explanation."""

    def rule(find: Callable[[ShardView], Iterable[Found]]) -> ShardRule:
        return ShardRule(code, name, severity, effect, summary, fix, elsewhere=elsewhere or {}, find=find)

    return rule


def checkpoint_rule(
    code: str,
    name: str,
    severity: Severity,
    effect: Effect,
    summary: str,
    *,
    fix: str | None = None,
    judges_classes: bool = False,
    producers: frozenset[Producer] = frozenset(LAYOUTS),
    elsewhere: Mapping[Producer, Effect] | None = None,
) -> Callable[[Callable[[CheckpointView], Iterable[Found]]], CheckpointRule]:
    """Make the decorated function, which finds the rule in the whole checkpoint, a rule; its docstring is the
    rule's explanation."""

    def rule(find: Callable[[CheckpointView], Iterable[Found]]) -> CheckpointRule:
        return CheckpointRule(
            code, name, severity, effect, summary, fix, judges_classes, producers, elsewhere or {}, find=find
        )

    return rule
