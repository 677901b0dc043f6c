"""What one consumer was seen to do with each shape of global scale: one row of the round trip's decision guide
(docs/compatibility.md), as the package carries it."""

from __future__ import annotations

from dataclasses import dataclass

from scalar_scales.files import Layout

__all__ = ["NO_FIX", "Observation", "Outcome", "RuleObservation"]

NO_FIX = "none"
"""The fix of a consumer as released."""


@dataclass(frozen=True)
class Outcome:
    """Whether the consumer loads checkpoints of one shape, and the error where it does not, or what differs where it
    loads them otherwise than the (1,) ones."""

    loads: bool
    note: str = ""

    def __str__(self) -> str:
        if not self.loads:
            return f"fails: {self.note}"
        return f"loads, {self.note}" if self.note else "loads"


@dataclass(frozen=True)
class Observation:
    """A consumer, with a fix or none, and its outcome for (1,) global scales (``legacy``) and for 0-D ones
    (``scalar``).

    ``architecture`` is the model class the outcome belongs to, where it is
    that class's own (SGLang's loaders differ by model); None where the
    consumer loads scales the same way for every model, as vLLM's and
    compressed-tensors' scale loading does. ``fused`` names the modules whose
    global scales the outcome is about: it holds for checkpoints that have
    them.
    """

    family: str
    consumer: str
    fix: str
    legacy: Outcome
    scalar: Outcome
    architecture: str | None = None
    fused: tuple[str, ...] = ()

    def outcome(self, layout: Layout) -> Outcome:
        return self.scalar if layout == "scalar" else self.legacy


@dataclass(frozen=True)
class RuleObservation:
    """What one consumer run here was seen to do with the defect of the rule named ``rule`` (by name, as the package
    names no rule by its code outside the rule's definition), on checkpoints of one producer: the toy Qwen3-MoE's
    NVFP4 artifact broken the way the rule's examples break a checkpoint (docs/check-evidence.md)."""

    rule: str
    consumer: str
    checkpoints: str
    consequence: str
