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
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Literal, NamedTuple

__all__ = ["EFFECTS", "RULES", "SEVERITIES", "Effect", "Finding", "Findings", "Rule", "Severity", "selected_codes"]

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
    """Findings as four columns, in order; iterating gives each as a :class:`Finding`.

    A shard's job finds thousands (one per legacy scale of a large MoE), and
    columns of strings travel back from a worker process at C speed, where
    a :class:`Finding` each costs more to build and to pickle than the
    checks that found them.
    """

    codes: list[str] = field(default_factory=list)
    tensors: list[str | None] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def add(self, code: str, tensor: str | None, file: str, message: str) -> None:
        self.codes.append(code)
        self.tensors.append(tensor)
        self.files.append(file)
        self.messages.append(message)

    def add_each(self, code: str, tensors: list[str], file: str, message: str) -> None:
        """One finding for each of ``tensors``, all with the same message."""
        self.codes += repeat(code, len(tensors))
        self.tensors += tensors
        self.files += repeat(file, len(tensors))
        self.messages += repeat(message, len(tensors))

    def extend(self, findings: Iterable[Finding]) -> None:
        if isinstance(findings, Findings):
            self.codes += findings.codes
            self.tensors += findings.tensors
            self.files += findings.files
            self.messages += findings.messages
            return
        for finding in findings:
            self.add(*finding)

    def selected(self, codes: Collection[str]) -> Findings:
        """The findings of the rules ``codes``, in order."""
        keep = list(map(codes.__contains__, self.codes))
        if all(keep):
            return self
        columns = (self.codes, self.tensors, self.files, self.messages)
        return Findings(*(list(compress(column, keep)) for column in columns))

    def counts(self) -> Counter[str]:
        return Counter(self.codes)

    def __len__(self) -> int:
        return len(self.codes)

    def __iter__(self) -> Iterator[Finding]:
        return map(Finding, self.codes, self.tensors, self.files, self.messages)


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
