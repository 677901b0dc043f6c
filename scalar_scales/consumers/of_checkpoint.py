"""What the round trip's consumers do with one checkpoint, as it is and after a migration: what ``check`` says
of the engines that cannot load it, and what ``migrate`` names before it writes."""

from __future__ import annotations

from typing import NamedTuple

from scalar_scales.consumers.observation import NO_FIX, Observation, Outcome
from scalar_scales.consumers.observed import OBSERVED
from scalar_scales.files import Layout
from scalar_scales.nvfp4 import COMPRESSED_TENSORS
from scalar_scales.scan import CheckpointScan

__all__ = [
    "ENGINES",
    "Change",
    "Refusal",
    "announcement",
    "changes",
    "observations_of",
    "refusals",
    "scales_layout",
    "unchanged",
]


class Refusal(NamedTuple):
    """A consumer, as released, that does not load the checkpoint: its error, and the fixes that load it."""

    consumer: str
    error: str
    loaded_by: tuple[str, ...]

    def __str__(self) -> str:
        fixed = f"; it loads with {' or '.join(self.loaded_by)}" if self.loaded_by else ""
        return f"{self.consumer}: {self.error}{fixed}"


class Change(NamedTuple):
    """What a migration changes for one consumer, with one fix or none; ``kept_by``: the fixes of that consumer with
    which it loads checkpoints of either shape alike, so that nothing changes for it."""

    observation: Observation
    before: Outcome
    after: Outcome
    kept_by: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The consumer, and its fix where it has one."""
        fix = "" if self.observation.fix == NO_FIX else f" with {self.observation.fix}"
        return f"{self.observation.consumer}{fix}"

    @property
    def breaks(self) -> bool:
        """The consumer loaded checkpoints of the old shape, and does not load those of the new."""
        return self.before.loads and not self.after.loads

    @property
    def what(self) -> str:
        """What changes for the consumer, in words: whether it stops or starts loading the checkpoint first, since
        that is what a user must know; then how, in the observation's own words."""
        before, after = self.before, self.after
        if self.breaks:
            said = f"stops loading it: {after.note}"
        elif after.loads and not before.loads:
            said = f"starts loading it (it failed: {before.note})"
        elif not after.loads:
            said = f"fails on either shape, now: {after.note} (it failed: {before.note})"
        elif after.note:
            said = f"still loads it; now {after.note}"
        else:
            said = f"still loads it; no longer: {before.note}"
        return said + (f"; with {' or '.join(self.kept_by)}, nothing changes" if self.kept_by else "")

    def __str__(self) -> str:
        return f"{self.label}: {self.before} -> {self.after}"


ENGINES = ("transformers", "transformers-from-pretrained", "vllm", "sglang")
"""The families of consumers people serve or load models with (transformers as the test kit loads a quantizable
MoE and as plain ``from_pretrained`` loads it, whose refusals differ, vLLM, SGLang); the round trip's other one, a
loader that copies each scale into a 0-D slot, stands for loaders in general, and NV101 already says what it does
with (1,)."""


def scales_layout(scan: CheckpointScan) -> Layout | None:
    """The shape every global scale in scope has; None where they have both, or there is none."""
    if not scan.scale_count or 0 < scan.legacy_count < scan.scale_count:
        return None
    return "legacy" if scan.legacy_count else "scalar"


def observations_of(scan: CheckpointScan) -> list[Observation]:
    """The observations that hold for a compressed-tensors checkpoint: those of any model class or of one its
    config names, about modules all of which have global scales in it (the last part of each module's name);
    none for another producer's checkpoint, or one of another format (``migrate --include`` on FP8 scales), which
    the round trip did not serve."""
    declared = scan.declared
    if declared is None or declared.producer != COMPRESSED_TENSORS or not declared.is_nvfp4 or scan.layout is None:
        return []
    architectures = _architectures(scan)
    loaded = {family: resolve(architectures, _observed_classes(family)) for family, resolve in RESOLVED_BY.items()}
    of_class = [o for o in OBSERVED if o.architecture is None or o.architecture == loaded.get(o.family)]
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
    observations = observations_of(scan)
    found = (Change(o, o.outcome(layout), o.outcome(to), _kept_by(observations, o)) for o in observations)
    return [change for change in found if change.before != change.after]


def unchanged(scan: CheckpointScan, to: Layout) -> list[Observation]:
    """The consumers, as released, that a migration to ``to`` changes nothing for, where it changes something for
    another (:func:`changes`): those the announcement reassures."""
    layout = scales_layout(scan)
    if layout is None or layout == to:
        return []
    return [o for o in observations_of(scan) if o.fix == NO_FIX and o.outcome(layout) == o.outcome(to)]


def announcement(changed: list[Change], kept: list[Observation], *, dry_run: bool) -> list[str]:
    """What a migration says of the consumers before it writes: whether any that loads the checkpoint stops
    loading it, in the heading, since that is the one thing that breaks something; then each change, the ones
    that break first, and those it changes nothing for. Consumers with the same change share a line. Empty where
    nothing changes for any consumer."""
    if not changed:
        return []
    stopping = len({change.label for change in changed if change.breaks})
    if stopping:
        stop = "would stop" if dry_run else ("stops" if stopping == 1 else "stop")
        verdict = f"{stopping} {stop} loading the checkpoint"
    else:
        verdict = f"none {'would stop' if dry_run else 'stops'} loading the checkpoint"
    verb = "would change" if dry_run else "changes"
    lines = [f"What this {verb} for the consumers the round trip observed: {verdict}"]
    by_what: dict[tuple[int, str], list[str]] = {}
    for change in changed:
        rank = 0 if change.breaks else 1 if change.after.loads and not change.before.loads else 2
        by_what.setdefault((rank, change.what), []).append(change.label)
    lines += [f"  {', '.join(labels)}: {what}" for (_, what), labels in sorted(by_what.items(), key=lambda i: i[0][0])]
    same: dict[str, list[str]] = {}
    for observation in kept:
        outcome = observation.legacy
        either = "it loads either shape" if outcome.loads else f"it fails on either shape: {outcome.note}"
        same.setdefault(either, []).append(observation.consumer)
    lines += [f"  {', '.join(consumers)}: nothing changes, {either}" for either, consumers in same.items()]
    return lines


def _kept_by(observations: list[Observation], changing: Observation) -> tuple[str, ...]:
    """The fixes of ``changing``'s consumer with which it loads both shapes, and alike."""
    return tuple(
        o.fix
        for o in observations
        if o.consumer == changing.consumer and o.fix != NO_FIX and o.legacy.loads and o.legacy == o.scalar
    )


def _loaded_by(observations: list[Observation], refusing: Observation, layout: Layout) -> tuple[str, ...]:
    return tuple(
        o.fix for o in observations if o.consumer == refusing.consumer and o.fix != NO_FIX and o.outcome(layout).loads
    )


def _first_registered(architectures: tuple[object, ...], observed: frozenset[str]) -> str | None:
    """vLLM's and SGLang's rule: the model class is the first entry of ``architectures`` the engine registers.

    vLLM (0.23, 0.32, 0.33): ``_ModelRegistry.resolve_model_cls`` and
    ``inspect_model_cls`` (``vllm/model_executor/models/registry.py``) try
    each entry in order and take the first one they load. SGLang 0.5.23:
    ``get_model_architecture`` (``sglang/srt/model_loader/utils.py``) hands
    the list to ``ModelRegistry.resolve_model_cls``
    (``sglang/srt/models/registry.py``), which takes ``architectures[0]``
    where it is registered, else the first registered entry. Which names an
    engine registers is known here only for the classes it was observed with
    (``observed``); any other name may be one it registers, and then it is
    the class. So the first entry decides: its class where it is an observed
    one, else None (no class's outcome holds)."""
    first = architectures[0] if architectures else None
    return first if isinstance(first, str) and first in observed else None


def _by_model_type(architectures: tuple[object, ...], observed: frozenset[str]) -> str | None:
    """transformers' rule: ``AutoModelForCausalLM.from_pretrained`` picks the class that config.json's
    ``model_type`` maps to (``_BaseAutoModelClass.from_pretrained`` and ``_get_model_class`` in
    ``transformers/models/auto/auto_factory.py``, 5.17), and reads ``architectures`` only to choose among the
    classes of that one model type. No class follows from ``architectures`` alone: None."""
    return None


RESOLVED_BY = {"vllm": _first_registered, "sglang": _first_registered, "transformers": _by_model_type}
"""Each engine's own rule for the model class it loads a checkpoint as, from config.json's ``architectures``: an
observation of one class holds where the engine's rule gives that class. A consumer without a rule here (the
``copy_`` loader) has no observation of one class."""


def _observed_classes(family: str) -> frozenset[str]:
    return frozenset(o.architecture for o in OBSERVED if o.family == family and o.architecture is not None)


def _architectures(scan: CheckpointScan) -> tuple[object, ...]:
    """config.json's ``architectures`` list, in its order, as it is (a hostile config may hold anything): empty
    where it is not a list."""
    named = (scan.config or {}).get("architectures")
    return tuple(named) if isinstance(named, list) else ()


def _scaled_modules(scan: CheckpointScan) -> set[str]:
    """The last part of the name of each module that has a global scale: ``q_a_proj`` for
    ``model.layers.0.self_attn.q_a_proj.weight_global_scale``."""
    return {part for shard in scan.shards for name in shard.names for part in name.split(".")[-2:-1]}
