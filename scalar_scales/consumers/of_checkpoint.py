"""What the round trip's consumers do with one checkpoint, as it is and after a migration: what ``check`` says
of the engines that cannot load it, and what ``migrate`` names before it writes."""

from __future__ import annotations

from typing import NamedTuple

from scalar_scales.consumers.observation import NO_FIX, Observation, Outcome
from scalar_scales.consumers.observed import OBSERVED
from scalar_scales.files import Layout
from scalar_scales.nvfp4 import COMPRESSED_TENSORS
from scalar_scales.scan import CheckpointScan

__all__ = ["ENGINES", "Change", "Refusal", "changes", "observations_of", "refusals", "scales_layout"]


class Refusal(NamedTuple):
    """A consumer, as released, that does not load the checkpoint: its error, and the fixes that load it."""

    consumer: str
    error: str
    loaded_by: tuple[str, ...]

    def __str__(self) -> str:
        fixed = f"; it loads with {' or '.join(self.loaded_by)}" if self.loaded_by else ""
        return f"{self.consumer}: {self.error}{fixed}"


class Change(NamedTuple):
    """What a migration changes for one consumer, with one fix or none."""

    observation: Observation
    before: Outcome
    after: Outcome

    def __str__(self) -> str:
        fix = "" if self.observation.fix == NO_FIX else f" with {self.observation.fix}"
        return f"{self.observation.consumer}{fix}: {self.before} -> {self.after}"


ENGINES = ("transformers", "vllm", "sglang")
"""The families of consumers people serve or load models with; the round trip's other one, a loader that copies
each scale into a 0-D slot, stands for loaders in general, and NV101 already says what it does with (1,)."""


def scales_layout(scan: CheckpointScan) -> Layout | None:
    """The shape every global scale in scope has; None where they have both, or there is none."""
    if not scan.scale_count or 0 < scan.legacy_count < scan.scale_count:
        return None
    return "legacy" if scan.legacy_count else "scalar"


def observations_of(scan: CheckpointScan) -> list[Observation]:
    """The observations that hold for a compressed-tensors checkpoint: those of any model class or of one its
    config names, about modules all of which have global scales in it (the last part of each module's name);
    none for another producer's checkpoint, which the round trip did not serve."""
    declared = scan.declared
    if declared is None or declared.producer != COMPRESSED_TENSORS or scan.layout is None:
        return []
    architectures = _architectures(scan)
    of_class = [o for o in OBSERVED if o.architecture is None or o.architecture in architectures]
    modules = _scaled_modules(scan) if any(o.fused for o in of_class) else set()
    return [o for o in of_class if modules.issuperset(o.fused)]


def refusals(scan: CheckpointScan) -> list[Refusal]:
    """The engines, as released, observed not to load a checkpoint of this one's shape, model and modules."""
    layout = scales_layout(scan)
    if layout is None:
        return []
    observations = observations_of(scan)
    return [
        Refusal(o.consumer, o.outcome(layout).note, _loaded_by(observations, o, layout))
        for o in observations
        if o.family in ENGINES and o.fix == NO_FIX and not o.outcome(layout).loads
    ]


def changes(scan: CheckpointScan, to: Layout) -> list[Change]:
    """What putting every global scale into ``to`` changes for each consumer and fix, as observed; nothing where
    the scales have both shapes now (the outcome of a mixed checkpoint was not observed)."""
    layout = scales_layout(scan)
    if layout is None or layout == to:
        return []
    found = (Change(o, o.outcome(layout), o.outcome(to)) for o in observations_of(scan))
    return [change for change in found if change.before != change.after]


def _loaded_by(observations: list[Observation], refusing: Observation, layout: Layout) -> tuple[str, ...]:
    return tuple(
        o.fix for o in observations if o.consumer == refusing.consumer and o.fix != NO_FIX and o.outcome(layout).loads
    )


def _architectures(scan: CheckpointScan) -> frozenset[str]:
    """config.json's model classes: the strings of its ``architectures`` list (a hostile config may hold
    anything)."""
    named = (scan.config or {}).get("architectures")
    return frozenset(a for a in named if isinstance(a, str)) if isinstance(named, list) else frozenset()


def _scaled_modules(scan: CheckpointScan) -> set[str]:
    """The last part of the name of each module that has a global scale: ``q_a_proj`` for
    ``model.layers.0.self_attn.q_a_proj.weight_global_scale``."""
    return {part for shard in scan.shards for name in shard.names for part in name.split(".")[-2:-1]}
