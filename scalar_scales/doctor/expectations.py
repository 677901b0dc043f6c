"""What a checkpoint's declaration makes a server expect of each module: the producer's layout, the group that
quantizes it, its group size, and whether it needs an input scale.

Without a config (a lone ``.safetensors`` file) nothing is declared: the
module checks run in the layout whose scales the file holds, with NVFP4's
default group size, and what needs a declaration (the config rules) is not
checked; NV202 tells which modules need an input scale from the tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from scalar_scales.doctor.matching import Kind, Matcher, Verdict
from scalar_scales.doctor.patterns import PatternError
from scalar_scales.errors import CheckpointError
from scalar_scales.nvfp4 import GROUP_SIZE, MODELOPT
from scalar_scales.sources.declaration import Declaration, Group

__all__ = ["Expectations", "expectations_of"]


@dataclass(frozen=True)
class Expectations:
    """A declaration (None without a config) and how its groups match modules."""

    declared: Declaration | None
    matcher: Matcher | None

    @property
    def declares(self) -> bool:
        """The config declares a quantization this tool reads (compressed-tensors or ModelOpt)."""
        return self.declared is not None and self.declared.producer is not None

    @property
    def unjudged_classes(self) -> tuple[str, ...]:
        """Class names in the config that no module can be judged against (the NV601 to NV604 rules are not
        applied then)."""
        return () if self.matcher is None else self.matcher.unjudged_classes

    def classify(self, module: str, kind: Kind) -> Verdict:
        """The NVFP4 groups that quantize ``module`` (a module of ``kind``; none where nothing is declared), and
        whether the declaration leaves it out."""
        return self.classify_each([module], kind)[0]

    def classify_each(self, modules: list[str], kind: Kind) -> list[Verdict]:
        """:meth:`classify` of each of ``modules``, all of ``kind``; each distinct verdict is narrowed to its
        NVFP4 groups once."""
        if self.matcher is None:
            return [((), False)] * len(modules)
        verdicts = self.matcher.classify_each(modules, kind)
        if verdicts and verdicts.count(verdicts[0]) == len(verdicts):  # one verdict for all, as nearly always
            groups, ignored = verdicts[0]
            return [(tuple(group for group in groups if group.nvfp4), ignored)] * len(verdicts)
        distinct = dict(zip(map(id, verdicts), verdicts, strict=True))
        narrowed = {
            key: (tuple(group for group in groups if group.nvfp4), ignored)
            for key, (groups, ignored) in distinct.items()
        }
        return list(map(narrowed.__getitem__, map(id, verdicts)))

    @property
    def uniform_group_size(self) -> int | None:
        """The group size of every module, where the NVFP4 groups agree on one (NVFP4's default where there is
        none); None where they differ."""
        return next(iter(self._group_sizes), GROUP_SIZE) if len(self._group_sizes) <= 1 else None

    def group_size(self, module: str) -> int:
        """The group size of the NVFP4 groups that quantize ``module``; NVFP4's default where they differ or
        none does. Most configs have one, and then no module is matched for it."""
        if self.uniform_group_size is not None:
            return self.uniform_group_size
        groups, _ = self.classify(module, "nvfp4")
        sizes = {group.group_size for group in groups}
        return sizes.pop() if len(sizes) == 1 else GROUP_SIZE

    def needs_input_scale(self, module: str) -> bool:
        """Whether every NVFP4 group that quantizes ``module`` quantizes activations (W4A4); False where nothing
        is declared (NV202 asks the tensors then) or every group is weight-only, without matching the module."""
        if not self.declares or not any(group.input_activations for group in self.nvfp4_groups):
            return False
        groups, _ = self.classify(module, "nvfp4")
        return bool(groups) and all(group.input_activations for group in groups)

    @cached_property
    def nvfp4_groups(self) -> tuple[Group, ...]:
        return () if self.declared is None else self.declared.nvfp4_groups

    @cached_property
    def _group_sizes(self) -> frozenset[int]:
        return frozenset(group.group_size for group in self.nvfp4_groups)


def expectations_of(declared: Declaration | None) -> Expectations:
    """The expectations of a declaration: a pattern in it that cannot be matched in bounded time is refused,
    naming the file it is in."""
    if declared is None or declared.producer is None:
        return Expectations(declared, None)
    matcher = Matcher(declared)
    try:
        matcher.compile()
    except PatternError as error:
        where = "an ignore wildcard" if declared.producer == MODELOPT else "a re: target or ignore entry"
        raise CheckpointError(declared.source or "config.json", f"{where} {error}") from None
    return Expectations(declared, matcher)
