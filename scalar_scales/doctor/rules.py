"""What a rule of ``scalar-scales check`` is: one object with its stable code, name, severity, effect, summary,
explanation, fix and examples, what it needs of a checkpoint, and the one function that finds it, over one shard
or over the whole checkpoint, all given where the rule is defined.

The codes never change meaning. They are grouped by what they look at: NV1
the scale layout and its marker, NV2 tensors a server needs and cannot find,
NV3 scale values, NV4 shapes and dtypes, NV5 the index, NV6 what the config
declares against what the shards hold. The catalogue of every rule is
:data:`scalar_scales.doctor.catalogue.RULES`, one line a rule; ``scalar-scales
rule``, ``--select`` and ``--ignore``, the test kit's broken corpus,
docs/rules.md and the count of rules README.md and docs/check.md give
(``scripts/rule_docs.py``) are made from it.

A rule's text and examples are data, given to :func:`shard_rule` or
:func:`checkpoint_rule`, not its function's docstring: ``python -OO`` strips
docstrings, and the reference ``scalar-scales rule`` prints must not depend
on how Python runs.

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
from typing import Literal, NamedTuple, TypedDict, Unpack

from scalar_scales.doctor.examples import Example
from scalar_scales.doctor.view import CheckpointView, ShardView
from scalar_scales.nvfp4 import LAYOUTS, Producer, ProducerLayout

__all__ = [
    "EFFECTS",
    "NEEDS",
    "SEVERITIES",
    "CheckpointRule",
    "Command",
    "Effect",
    "Finding",
    "Found",
    "Need",
    "Rule",
    "RuleOptions",
    "Severity",
    "ShardRule",
    "checkpoint_rule",
    "shard_rule",
]


class Command(NamedTuple):
    """A fix that is one command run on the checkpoint (``scalar-scales migrate``): the text report prints it ready
    to paste, with the checkpoint's path, and the reference says ``COMMAND PATH``. A fix no command makes is said in
    words (a plain string)."""

    line: str


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
Need = Literal["nvfp4", "config", "quantization"]
NEEDS: dict[Need, str] = {
    "nvfp4": "NVFP4 tensors (in either layout)",
    "config": "a config (config.json or hf_quant_config.json)",
    "quantization": "a config that declares a compressed-tensors or ModelOpt quantization",
}
"""What a rule may need of a checkpoint to judge it. A rule is not applied to a checkpoint without what it needs
(a lone ``.safetensors`` file has no config): it finds nothing there, and the summary's count of rules and
``rules_applied`` leave it out."""

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


@dataclass(frozen=True, eq=False, kw_only=True)
class Rule:
    """One rule: what it is called and means, the broken checkpoints that show it, what it needs of a checkpoint,
    and (in :class:`ShardRule` and :class:`CheckpointRule`) the one function that finds it. ``judges_classes``:
    the rule judges modules against a config's class names, which a checkpoint cannot show for a model's own
    classes (it is then not applied). ``producers``: the layouts the rule is about (compressed-tensors' marker
    means nothing in a ModelOpt checkpoint)."""

    code: str
    name: str
    severity: Severity
    effect: Effect
    summary: str
    """What the rule finds, in a few words."""
    explanation: str
    """What the rule finds, why it matters, and the evidence, in Markdown (docs/rules.md)."""
    examples: tuple[Example, ...]
    """The broken checkpoints that show the rule (:mod:`.examples`): the test kit's broken corpus makes each in
    every layout the rule is about, and holds no other case of the rule."""
    fix: Command | str | None = None
    """What makes the finding go away: a :class:`Command`, where one command does, or what to do, in words."""
    needs: tuple[Need, ...] = ()
    """What the rule needs of a checkpoint to judge it (:data:`NEEDS`)."""
    judges_classes: bool = False
    producers: frozenset[Producer] = frozenset(LAYOUTS)
    elsewhere: Mapping[Producer, Effect] = field(default_factory=dict)
    """The layouts whose breaks vLLM was seen to treat otherwise than compressed-tensors' (``effect``), and how."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "explanation", inspect.cleandoc(self.explanation))

    @property
    def fixable(self) -> bool:
        """One command (``scalar-scales migrate``) makes every finding of the rule go away: ``--statistics``'s
        ``[*]``, as ruff marks what ``--fix`` fixes."""
        return isinstance(self.fix, Command)

    def effect_for(self, layout: ProducerLayout | None) -> Effect:
        """What vLLM was seen to do with a checkpoint of ``layout`` that has the finding."""
        return self.effect if layout is None else self.elsewhere.get(layout.producer, self.effect)

    def is_about(self, layout: ProducerLayout | None) -> bool:
        """The rule is about checkpoints of ``layout`` (None: no NVFP4 layout, which every rule may speak of)."""
        return layout is None or layout.producer in self.producers

    def applies_to(self, checkpoint: CheckpointView) -> bool:
        """The rule is applied to ``checkpoint``: it is about its layout, the checkpoint has what the rule
        :attr:`needs`, and, for a rule that :attr:`judges_classes`, the config names no class a checkpoint cannot
        show. A rule not applied finds nothing, and the report does not count it."""
        return (
            self.is_about(checkpoint.layout)
            and all(_HAS[need](checkpoint) for need in self.needs)
            and not (self.judges_classes and checkpoint.expectations.unjudged_classes)
        )

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        raise NotImplementedError


_HAS: dict[Need, Callable[[CheckpointView], bool]] = {
    "nvfp4": lambda checkpoint: checkpoint.layout is not None,
    "config": lambda checkpoint: checkpoint.scan.declared is not None,
    "quantization": lambda checkpoint: checkpoint.expectations.declares,
}


@dataclass(frozen=True, eq=False, kw_only=True)
class ShardRule(Rule):
    """A rule found in each shard's per-tensor scales alone."""

    find: Callable[[ShardView], Iterable[Found]]

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        if not self.applies_to(checkpoint):
            return iter(())
        return chain.from_iterable(_findings(self, self.find(shard)) for shard in checkpoint.shards)


@dataclass(frozen=True, eq=False, kw_only=True)
class CheckpointRule(Rule):
    """A rule found in the whole checkpoint: its tensors as one table, its config, its index."""

    find: Callable[[CheckpointView], Iterable[Found]]

    def findings(self, checkpoint: CheckpointView) -> Iterator[Finding]:
        if not self.applies_to(checkpoint):
            return iter(())
        return _findings(self, self.find(checkpoint))


def _findings(rule: Rule, found: Iterable[Found]) -> Iterator[Finding]:
    """Each of ``found`` as a :class:`Finding` of ``rule``, built at C speed: a large MoE's legacy checkpoint has
    one finding for each of its tens of thousands of scales."""
    findings: Iterator[Finding] = map(tuple.__new__, repeat(Finding), map(operator.add, repeat((rule,)), found))
    return findings


class RuleOptions(TypedDict, total=False):
    """What a rule may say beyond its code, name, severity, effect, summary, explanation and examples: the fields
    of :class:`Rule` of those names."""

    fix: Command | str
    needs: tuple[Need, ...]
    judges_classes: bool
    producers: frozenset[Producer]
    elsewhere: Mapping[Producer, Effect]


def shard_rule(
    code: str,
    name: str,
    severity: Severity,
    effect: Effect,
    *,
    summary: str,
    explanation: str,
    examples: tuple[Example, ...],
    **options: Unpack[RuleOptions],
) -> Callable[[Callable[[ShardView], Iterable[Found]]], ShardRule]:
    """Make the decorated function, which finds the rule in one shard's scales, the rule ``code``, its text and
    examples given here (the fields of :class:`Rule`)."""

    def rule(find: Callable[[ShardView], Iterable[Found]]) -> ShardRule:
        return ShardRule(
            code=code,
            name=name,
            severity=severity,
            effect=effect,
            summary=summary,
            explanation=explanation,
            examples=examples,
            find=find,
            **options,
        )

    return rule


def checkpoint_rule(
    code: str,
    name: str,
    severity: Severity,
    effect: Effect,
    *,
    summary: str,
    explanation: str,
    examples: tuple[Example, ...],
    **options: Unpack[RuleOptions],
) -> Callable[[Callable[[CheckpointView], Iterable[Found]]], CheckpointRule]:
    """Make the decorated function, which finds the rule in the whole checkpoint, the rule ``code``, its text and
    examples given here (the fields of :class:`Rule`)."""

    def rule(find: Callable[[CheckpointView], Iterable[Found]]) -> CheckpointRule:
        return CheckpointRule(
            code=code,
            name=name,
            severity=severity,
            effect=effect,
            summary=summary,
            explanation=explanation,
            examples=examples,
            find=find,
            **options,
        )

    return rule
