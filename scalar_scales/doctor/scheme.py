"""What a checkpoint's ``config.json`` requires of each NVFP4 module: its group size, and whether it quantizes
activations (so that the module needs an ``input_global_scale``).

A config group's ``re:`` targets come from the checkpoint, so they are matched
by :mod:`scalar_scales.doctor.patterns`, in time linear in a module's name
whatever the pattern; one that cannot be matched so is refused, naming the
config and the pattern.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scalar_scales.doctor.patterns import PatternError, PatternSet
from scalar_scales.errors import CheckpointError
from scalar_scales.nvfp4 import GROUP_SIZE, NVFP4_FORMAT

__all__ = ["Scheme", "group_size_of", "scheme_of"]


@dataclass(frozen=True)
class Scheme:
    """What the config's NVFP4 scheme requires of each module.

    ``input_activations`` is True when every NVFP4 config group quantizes
    activations (W4A4), False when none does (W4A16), and None when they
    differ; then ``groups`` gives each group's targets and whether it does,
    and a module needs an input scale only when every group that may
    target it does.
    """

    group_size: int = GROUP_SIZE
    input_activations: bool | None = None
    groups: tuple[tuple[tuple[str, ...], bool], ...] = ()
    patterns: PatternSet = field(default_factory=lambda: PatternSet([]), compare=False)
    """Every group's ``re:`` targets, without the prefix, in the groups' order."""

    def needs_input_scale(self, module: str) -> bool:
        if self.input_activations is not None:
            return self.input_activations
        matching = self.patterns.matching(module)
        candidates, index = [], 0
        for targets, activations in self.groups:
            patterns = sum(target.startswith("re:") for target in targets)
            may = any(not target.startswith("re:") for target in targets) or bool(
                matching & set(range(index, index + patterns))
            )
            index += patterns
            if may:
                candidates.append(activations)
        return bool(candidates) and all(candidates)


def group_size_of(scheme: Scheme | None) -> int:
    """The scheme's NVFP4 group size; the default without a config."""
    return GROUP_SIZE if scheme is None else scheme.group_size


def scheme_of(config: Mapping[str, Any] | None, path: str | os.PathLike[str] = "config.json") -> Scheme | None:
    """The NVFP4 scheme that ``config.json`` (the parsed ``path``) declares; None without a config (then NV202 is
    not checked). A target is a module's name or class name, which a header does not tell, so any target but a
    ``re:`` one may match a module.

    A malformed ``quantization_config`` gives the scheme of no NVFP4 group
    here: the scan refuses it, naming what is wrong
    (:func:`scalar_scales.sources.declaration`).
    """
    if config is None:
        return None
    quantization_config = _field(config, "quantization_config", dict)
    top_format = quantization_config.get("format")
    groups = [
        group
        for group in _field(quantization_config, "config_groups", dict).values()
        if isinstance(group, dict) and (group.get("format") or top_format) == NVFP4_FORMAT
    ]
    if not groups:
        return Scheme(input_activations=False)
    sizes = [_field(group, "weights", dict).get("group_size") for group in groups]
    size = sizes[0] if sizes.count(sizes[0]) == len(sizes) else None
    size = size if type(size) is int and size > 0 else GROUP_SIZE
    activations = tuple(group.get("input_activations") is not None for group in groups)
    if len(set(activations)) == 1:
        return Scheme(size, activations[0])
    targets = tuple(tuple(t for t in _field(group, "targets", list) if isinstance(t, str)) for group in groups)
    patterns = [target[3:] for group in targets for target in group if target.startswith("re:")]
    try:
        compiled = PatternSet(patterns)
    except PatternError as error:
        raise CheckpointError(path, f"a config group's re: target {error}") from None
    return Scheme(size, None, tuple(zip(targets, activations, strict=True)), compiled)


def _field(group: Mapping[str, Any], key: str, kind: type) -> Any:
    """A config group's field if it has the expected JSON kind, else an empty one: a malformed field must not
    stop the other checks."""
    value = group.get(key)
    return value if isinstance(value, kind) else kind()
