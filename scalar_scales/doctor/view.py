"""What the rules look at: a checkpoint as the scan read it, seen shard by shard (:class:`ShardView`) or as a
whole (:class:`CheckpointView`).

The whole checkpoint's tensors are one table, whichever shard holds each, so
that a module whose tensors straddle two shards is judged like any other.
What several rules need (the NVFP4 modules and their tensors, each module's
kind and config verdict) is worked out once, when a rule first asks for it,
on whole columns: a large MoE has tens of thousands of modules.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, chain, repeat

from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.matching import Kind, Verdict, module_kind
from scalar_scales.files.header import stems
from scalar_scales.nvfp4 import ProducerLayout
from scalar_scales.scan import KV_SCALES, CheckpointScan, ShardScan

__all__ = ["KV_SCALES", "CheckpointView", "ModuleCounts", "NvFp4Modules", "ShardView"]

ModuleCounts = Counter[tuple[str | None, Kind]]
"""Modules by (the name of the NVFP4 group that quantizes them, or None; their kind)."""
_JUDGED_KINDS: tuple[Kind, ...] = ("nvfp4", "quantized", "linear")


@dataclass(frozen=True)
class ShardView:
    """One shard's per-tensor scales in scope, as columns, and the checkpoint's layout (None: not NVFP4, only the
    scales ``--include`` names); apart, its declared KV-cache scales and their values."""

    file: str
    names: list[str]
    shapes: list[tuple[int, ...]]
    values: list[float | None]
    layout: ProducerLayout | None
    kv_names: list[str]
    kv_values: list[float | None]
    ending_with: Callable[[str | tuple[str, ...]], Sequence[int]]
    """The positions of the scales whose name ends with a suffix (or one of several): :meth:`ShardScan.ending_with`,
    which finds each once for every rule that asks."""

    @classmethod
    def of(cls, shard: ShardScan, layout: ProducerLayout | None) -> ShardView:
        return cls(
            str(shard.path),
            shard.names,
            shard.shapes,
            shard.values,
            layout,
            shard.kv_names,
            shard.kv_values,
            shard.ending_with,
        )


@dataclass(frozen=True)
class NvFp4Modules:
    """The checkpoint's NVFP4 modules (those with a packed FP4 weight): each one's name, and for each tensor a
    module has (``layout.leaves``), its index in the tensor table, or :attr:`CheckpointView.absent` where the
    module lacks it."""

    bases: list[str]
    members: dict[str, list[int]]


@dataclass(frozen=True)
class Classified:
    """The modules the config rules judge, by kind, and each one's verdict."""

    modules: dict[Kind, list[str]]
    verdicts: dict[Kind, list[Verdict]]


class CheckpointView:
    """The whole checkpoint: the scan, what the config makes a server expect, and every tensor of every shard as
    one table (``names[i]``, ``dtypes[i]``, ``shapes[i]``, and ``file_of(i)``)."""

    def __init__(self, scan: CheckpointScan, expectations: Expectations) -> None:
        self.scan = scan
        self.expectations = expectations
        headers = [shard.header for shard in scan.shards]
        self.names: list[str] = list(chain.from_iterable(header.names for header in headers))
        self.dtypes: list[str] = list(chain.from_iterable(header.dtypes for header in headers))
        self.shapes: list[tuple[int, ...]] = list(chain.from_iterable(header.shapes for header in headers))
        self._files = [str(header.path) for header in headers]
        self._ending_in: dict[str, tuple[list[str], list[int]]] = {}
        self._scales_ending_in: dict[str, tuple[list[str], list[int], list[float | None]]] = {}
        self._starts = list(accumulate((len(header.names) for header in headers), initial=0))[:-1]
        """Where each shard's tensors start in the table."""

    @property
    def layout(self) -> ProducerLayout | None:
        return self.scan.layout

    @property
    def absent(self) -> int:
        """The index of a tensor a module lacks: past the end of the table."""
        return len(self.names)

    def file_of(self, index: int) -> str:
        return self._files[bisect_right(self._starts, index) - 1]

    @cached_property
    def shards(self) -> list[ShardView]:
        return [ShardView.of(shard, self.layout) for shard in self.scan.shards]

    @cached_property
    def position(self) -> dict[str, int]:
        """Each tensor's index in the table (a name two shards hold: the later one's)."""
        return dict(zip(self.names, range(len(self.names)), strict=True))

    def ending_in(self, leaf: str) -> dict[str, int]:
        """The tensors whose name's last part is ``leaf``, by the name of their module: each one's index."""
        return dict(zip(*self._tensors_of(leaf), strict=True))

    def _tensors_of(self, leaf: str) -> tuple[list[str], list[int]]:
        """The tensors whose name's last part is ``leaf``, in order: their modules' names, and their indices."""
        if leaf not in self._ending_in:
            at, modules = stems(self.names, "." + leaf)
            self._ending_in[leaf] = modules, at
        return self._ending_in[leaf]

    def scales_of(self, leaf: str) -> tuple[list[str], list[int], list[float | None]]:
        """The per-tensor scales whose name's last part is ``leaf``, found among the scan's scales rather than every
        tensor, in order: their modules' names, their indices in the table, and their values. Kept for the rules
        that ask again."""
        if leaf not in self._scales_ending_in:
            self._scales_ending_in[leaf] = self._scales(leaf)
        return self._scales_ending_in[leaf]

    def _scales(self, leaf: str) -> tuple[list[str], list[int], list[float | None]]:
        modules: list[str] = []
        indices: list[int] = []
        values: list[float | None] = []
        for start, shard in zip(self._starts, self.scan.shards, strict=True):
            at, stemmed = shard.stems("." + leaf)
            modules += stemmed
            indices += map(start.__add__, map(shard.indices.__getitem__, at))
            values += map(shard.values.__getitem__, at)
        return modules, indices, values

    @cached_property
    def nvfp4(self) -> NvFp4Modules:
        """The NVFP4 modules: compressed-tensors' every module with a ``weight_packed``; ModelOpt's with a
        ``weight`` that is U8, or that has a ``weight_scale_2`` (a packed weight of the wrong dtype, then)."""
        layout = self.layout
        if layout is None:
            return NvFp4Modules([], {})
        # The group scales' module names are compared here alone: not kept (a large MoE has tens of thousands);
        # the global scales' are, for NV303 and the sibling rules (NV304, NV305).
        at, modules = stems(self.names, "." + layout.weight_scale)
        held = {layout.weight: self._tensors_of(layout.weight), layout.weight_scale: (modules, at)}
        held[layout.weight_global] = self.scales_of(layout.weight_global)[:2]
        held[layout.input_global] = self.scales_of(layout.input_global)[:2]
        bases, packed = held[layout.weight]
        if layout.weight_named_plainly:
            scaled, dtypes = set(held[layout.weight_global][0]), self.dtypes
            kept = [
                k for k, (base, i) in enumerate(zip(bases, packed, strict=True)) if dtypes[i] == "U8" or base in scaled
            ]
            bases, packed = [bases[k] for k in kept], [packed[k] for k in kept]
        members = {layout.weight: packed}
        for leaf in layout.leaves[1:]:
            modules, at = held[leaf]
            if modules == bases:  # every module has it, listed in the same order, as writers list them
                members[leaf] = at
            else:
                members[leaf] = list(map(dict(zip(modules, at, strict=True)).get, bases, repeat(self.absent)))
        return NvFp4Modules(bases, members)

    @cached_property
    def classified(self) -> Classified:
        """Every module the config rules judge (NVFP4, quantized another way, unquantized linear), by kind, each
        with its verdict against the declaration."""
        modules: dict[Kind, list[str]] = {"nvfp4": self.nvfp4.bases, "quantized": [], "linear": []}
        if self.layout is not None:
            dtypes, shapes = self.dtypes, self.shapes
            weights = self.ending_in("weight")
            packed = set(self.nvfp4.bases) if weights else set()
            others = {base: i for base, i in weights.items() if base not in packed}
            routers = self.ending_in("e_score_correction_bias") if others else {}
            for base, i in others.items():
                kind = module_kind(base, (dtypes[i], shapes[i]), packed=False, extra=base in routers)
                if kind in _JUDGED_KINDS:
                    modules[kind].append(base)
        verdicts = {kind: self.expectations.classify_each(found, kind) for kind, found in modules.items()}
        return Classified(modules, verdicts)

    @cached_property
    def module_counts(self) -> ModuleCounts:
        """The modules the rules judged, by (the NVFP4 group that quantizes them, or None; their kind)."""
        counted: ModuleCounts = Counter()
        for kind, verdicts in self.classified.verdicts.items():
            if verdicts and verdicts.count(verdicts[0]) == len(verdicts):  # one verdict for all, as nearly always
                groups, ignored = verdicts[0]
                counted[(groups[0].name if groups and not ignored else None, kind)] += len(verdicts)
                continue
            distinct = dict(zip(map(id, verdicts), verdicts, strict=True))  # a few distinct verdicts, shared
            for key, n in Counter(map(id, verdicts)).items():
                groups, ignored = distinct[key]
                counted[(groups[0].name if groups and not ignored else None, kind)] += n
        return counted

    @cached_property
    def kv_scales(self) -> int:
        """How many ``k_scale``/``v_scale`` tensors the shards hold."""
        return sum(map(str.endswith, self.names, repeat(KV_SCALES)))
