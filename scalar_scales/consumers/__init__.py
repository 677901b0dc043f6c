"""What each consumer the round trip observed (vLLM, transformers, SGLang, a ``copy_`` loader) does with a
checkpoint's global scales, by shape: ``check`` says which engines do not load a checkpoint, ``migrate`` what
its change does to each. :data:`READ_CONSUMERS` are the consumers it does not run: read, or run here by hand.
:data:`OBSERVED_RULES` is what the consumers run here did with each rule's defect (scripts/check_evidence.py
generates it, with docs/check-evidence.md), which ``scalar-scales rule CODE`` prints.

The observations (:data:`OBSERVED`) are generated from the round trip by
scripts/compatibility_matrix.py, with docs/compatibility.md and the README's
decision guide; the test command fails where they differ from its run.

The per-rule consequences (``OBSERVED_RULES`` and ``READ_CONSUMERS``, and what reads them) are imported when first
asked for: only ``scalar-scales rule`` prints them, and every ``check`` imports this package for its refusals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scalar_scales.consumers.observation import NO_FIX, Observation, Outcome, RuleObservation
from scalar_scales.consumers.observed import OBSERVED
from scalar_scales.consumers.of_checkpoint import (
    Change,
    Refusal,
    announcement,
    changes,
    observations_of,
    refusals,
    scales_layout,
    unchanged,
)

if TYPE_CHECKING:
    from scalar_scales.consumers.by_rule import observed_consequences, observed_lines
    from scalar_scales.consumers.observed_rules import OBSERVED_RULES
    from scalar_scales.consumers.read import READ_CONSUMERS, ReadConsumer, Source, consequences

__all__ = [
    "NO_FIX",
    "OBSERVED",
    "OBSERVED_RULES",
    "READ_CONSUMERS",
    "Change",
    "Observation",
    "Outcome",
    "ReadConsumer",
    "Refusal",
    "RuleObservation",
    "Source",
    "announcement",
    "changes",
    "consequences",
    "observations_of",
    "observed_consequences",
    "observed_lines",
    "refusals",
    "scales_layout",
    "unchanged",
]

_WHERE = {
    "observed_consequences": "scalar_scales.consumers.by_rule",
    "observed_lines": "scalar_scales.consumers.by_rule",
    "OBSERVED_RULES": "scalar_scales.consumers.observed_rules",
    "READ_CONSUMERS": "scalar_scales.consumers.read",
    "ReadConsumer": "scalar_scales.consumers.read",
    "Source": "scalar_scales.consumers.read",
    "consequences": "scalar_scales.consumers.read",
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'scalar_scales.consumers' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(_WHERE[name]), name)
