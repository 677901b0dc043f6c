"""The rules ``scalar-scales check`` applies, each with a stable code, like a linter's.

A rule's code never changes meaning; ``docs/check.md`` documents each one
with its upstream evidence. The codes are grouped by what they look at:
NV1 the scale layout and its marker, NV2 tensors a server needs and cannot
find, NV3 scale values, NV4 shapes and dtypes, NV5 the index, NV6 what the
config declares against what the shards hold.

Each rule has an **effect**: what vLLM was seen to do with a checkpoint that
has the finding, in the run that ``scripts/check_evidence.py`` makes of real
``oneshot`` artifacts broken one way at a time (``docs/check-evidence.md``).
Its severity follows from the effect: a checkpoint that fails to load or
gives NaN or wrong output is an error; one that runs less accurately, or
that some other consumer refuses, a warning; and one every consumer serves
as it should, information.

A :class:`Finding` is one line for a user: the tensor, and what a server
will do with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, Literal, NamedTuple

__all__ = [
    "EFFECTS",
    "RULES",
    "SEVERITIES",
    "Batch",
    "Effect",
    "Finding",
    "Findings",
    "Rule",
    "Severity",
    "selected_codes",
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


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    effect: Effect
    """What vLLM was seen to do with a checkpoint that has the finding (docs/check-evidence.md)."""
    summary: str
    """What the rule finds, in a few words."""
    fix: str | None = None
    """What makes the finding go away, where one command does."""


_MIGRATE = "scalar-scales migrate"

RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule("NV101", "legacy-scale-shape", "warning", "none", "a global scale of shape (1,)", _MIGRATE),
        Rule(
            "NV102",
            "marker-disagrees",
            "warning",
            "none",
            "config.json declares format_version 2 but global scales are (1,)",
            _MIGRATE,
        ),
        Rule("NV103", "marker-missing", "info", "none", "0-D global scales without format_version 2", _MIGRATE),
        Rule(
            "NV201",
            "missing-weight-global-scale",
            "error",
            "nan-output",
            "an NVFP4 module without its weight global scale",
        ),
        Rule(
            "NV202",
            "missing-input-global-scale",
            "error",
            "nan-output",
            "a W4A4 module without its input global scale",
        ),
        Rule("NV203", "missing-weight-scale", "error", "nan-output", "an NVFP4 module without its group scales"),
        Rule(
            "NV301", "invalid-scale-value", "error", "nan-output", "a global scale that is zero, negative, NaN or Inf"
        ),
        Rule(
            "NV302",
            "other-convention",
            "error",
            "wrong-output",
            "a global scale stored in the other producer's convention",
        ),
        Rule(
            "NV303",
            "fused-scales-differ",
            "error",
            "wrong-output",
            "fused partners (gate/up, q/k/v) with different global scales",
        ),
        Rule(
            "NV401",
            "weight-scale-shape",
            "error",
            "nan-output",
            "group scales whose shape does not fit the packed weight",
        ),
        Rule("NV402", "wrong-dtype", "error", "nan-output", "an NVFP4 tensor of the wrong dtype"),
        Rule(
            "NV501",
            "index-names-missing-tensor",
            "warning",
            "none",
            "the index names a tensor its shard does not hold",
        ),
        Rule("NV502", "tensor-not-in-index", "warning", "none", "a shard holds a tensor the index does not name"),
        Rule("NV601", "quantized-but-ignored", "error", "load-error", "an NVFP4 module the config leaves unquantized"),
        Rule(
            "NV602",
            "quantized-but-not-targeted",
            "error",
            "load-error",
            "an NVFP4 module no NVFP4 config group targets",
        ),
        Rule(
            "NV603",
            "targeted-but-not-nvfp4",
            "error",
            "load-error",
            "a module an NVFP4 group targets, stored otherwise",
        ),
        Rule(
            "NV604",
            "input-scale-for-weight-only",
            "error",
            "load-error",
            "an input scale stored for a weight-only group",
        ),
        Rule(
            "NV605",
            "kv-scales-missing",
            "error",
            "wrong-output",
            "a declared KV-cache quantization without k_scale/v_scale",
        ),
        Rule("NV606", "kv-scales-undeclared", "info", "none", "k_scale/v_scale stored without a KV-cache quantization"),
        Rule("NV607", "nvfp4-undeclared", "error", "load-error", "NVFP4 modules in the shards, no NVFP4 in the config"),
    )
}
"""Every rule. The effects are the ones docs/check-evidence.md records; tests/base/doctor/test_evidence.py fails
where they differ."""


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

    @property
    def effect(self) -> Effect:
        return RULES[self.code].effect


@dataclass
class Findings:
    """Findings in order, as batches of one rule in one file; iterating gives each as a :class:`Finding`.

    A shard's job finds thousands (one per legacy scale of a large MoE), and
    a batch's columns travel back from a worker process at C speed, where a
    :class:`Finding` each costs more to build and to pickle than the checks
    that found them. A batch's messages are one for all, one each, or what
    writes each from columns of values (:meth:`add_written`), written only
    for a finding shown; its rule is counted without a look at its findings.
    """

    batches: list[Batch] = field(default_factory=list)

    def add(self, code: str, tensor: str | None, file: str, message: str) -> None:
        last = self.batches[-1] if self.batches else None
        if last is not None and (last.code, last.file) == (code, file) and isinstance(last.messages, list):
            last.tensors.append(tensor)
            last.messages.append(message)
        else:
            self.batches.append(Batch(code, file, [tensor], [message]))

    def add_each(self, code: str, tensors: list[str | None], file: str, message: str) -> None:
        """One finding for each of ``tensors``, all with the same message."""
        if tensors:
            self.batches.append(Batch(code, file, tensors, message))

    def add_written(
        self, code: str, tensors: list[str | None], file: str, write: Callable[..., str], *arguments: Any
    ) -> None:
        """One finding for each of ``tensors``, whose message ``write`` writes from ``arguments`` (each a list
        with a value for each finding, or one value for all) when it is shown."""
        if tensors:
            self.batches.append(Batch(code, file, tensors, (write, *arguments)))

    def extend(self, findings: Iterable[Finding]) -> None:
        if isinstance(findings, Findings):
            self.batches += findings.batches
            return
        for finding in findings:
            self.add(*finding)

    def selected(self, codes: Collection[str]) -> Findings:
        """The findings of the rules ``codes``, in order."""
        return Findings([batch for batch in self.batches if batch.code in codes])

    def counts(self) -> Counter[str]:
        counted: Counter[str] = Counter()
        for batch in self.batches:
            counted[batch.code] += len(batch.tensors)
        return counted

    def __len__(self) -> int:
        return sum(len(batch.tensors) for batch in self.batches)

    def __iter__(self) -> Iterator[Finding]:
        return chain.from_iterable(map(Batch.findings, self.batches))


class Batch(NamedTuple):
    """Findings of one rule in one file (:class:`Findings`)."""

    code: str
    file: str
    tensors: list[str | None]
    messages: str | list[str] | tuple[Any, ...]
    """One message for all, one each, or (a function, its arguments) that writes each."""

    def findings(self) -> Iterator[Finding]:
        code, file, tensors, messages = self
        if isinstance(messages, str):
            texts: Iterable[str] = repeat(messages)
        elif isinstance(messages, list):
            texts = messages
        else:
            write, *arguments = messages
            texts = map(write, *(a if isinstance(a, list) else repeat(a) for a in arguments))
        return map(Finding, repeat(code), tensors, repeat(file), texts)


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
