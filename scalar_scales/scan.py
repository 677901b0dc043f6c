"""Read every shard of a checkpoint once: its validated header and its per-tensor scales (name, dtype, shape,
value); and hold the index to the shards.

The scope is the NVFP4 per-tensor scales of the checkpoint's layout
(:class:`~scalar_scales.nvfp4.ProducerLayout`): compressed-tensors'
``*_global_scale``, or ModelOpt's ``weight_scale_2`` and ``input_scale``,
plus any tensors that ``include`` globs name. Values are read straight from
the files, so that a scale of zero (an expert that never saw a calibration
token gets ``input_global_scale`` 0.0), a negative one, NaN or Inf can be
flagged. Where the config declares a quantized KV cache, the values of its
single-value ``k_scale`` and ``v_scale`` tensors are read too, apart: only
their values are judged (vLLM takes them in either shape, and ``migrate``
leaves them alone), unless ``include`` names them.

Shards are read one after the other, each through one descriptor
(:meth:`~scalar_scales.sources.checkpoint.ShardSource.read_shard`), or
together by a source on the network, where each read waits on a server
(:meth:`~scalar_scales.sources.checkpoint.NetworkShardSource.read_shards`). A
plain sequential pass is fast enough: parsing the headers is the work, and
``benchmarks/check.py`` holds ``check`` to a bare ``json.loads`` and ``struct``
pass over the same checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, ending_with, stems
from scalar_scales.nvfp4 import LAYOUTS, ProducerLayout
from scalar_scales.sources.checkpoint import (
    INDEX_NAME,
    CheckpointLocation,
    NetworkShardSource,
    OpenedCheckpoint,
    ScaleSelector,
    ShardRead,
    ShardSource,
    shard_name,
)
from scalar_scales.sources.declaration import Declaration

__all__ = [
    "KV_SCALES",
    "CheckpointScan",
    "IndexDisagreement",
    "ScaleRecord",
    "ShardScan",
    "scan_shards",
]

KV_SCALES = (".k_scale", ".v_scale")
"""The endings of a KV-cache scale's name, in compressed-tensors' layout (``self_attn.k_scale``) and ModelOpt's
(``self_attn.k_proj.k_scale``) alike."""


class ScaleRecord(NamedTuple):
    """One per-tensor scale: where it is, its shape and its value (``check --list``)."""

    file: Path | str
    name: str
    dtype: str
    shape: tuple[int, ...]
    value: float | None

    @property
    def layout(self) -> str:
        """``scalar`` for (), ``legacy`` for (1,)."""
        return "scalar" if self.shape == () else "legacy"


@dataclass(frozen=True)
class ShardScan:
    """One shard as the scan read it: its header, and its per-tensor scales in scope as columns (``indices`` into
    the header, and each one's value); apart, its declared KV-cache scales and their values."""

    header: SafetensorsHeader
    indices: list[int]
    values: list[float | None]
    kv_indices: list[int]
    kv_values: list[float | None]
    scope: tuple[str, ...] = ()
    """Endings every scale's name here has: the layout's, where ``include`` named no others."""

    @property
    def path(self) -> Path | str:
        return self.header.path

    @cached_property
    def names(self) -> list[str]:
        return list(map(self.header.names.__getitem__, self.indices))

    @cached_property
    def shapes(self) -> list[tuple[int, ...]]:
        return list(map(self.header.shapes.__getitem__, self.indices))

    @cached_property
    def dtypes(self) -> list[str]:
        return list(map(self.header.dtypes.__getitem__, self.indices))

    @cached_property
    def kv_names(self) -> list[str]:
        return list(map(self.header.names.__getitem__, self.kv_indices))

    def ending_with(self, suffix: str | tuple[str, ...]) -> Sequence[int]:
        """The positions of the scales whose name ends with ``suffix`` (or one of several). Several rules ask the
        same of a shard's thousands of scales: each is found once, and the endings every scale has (``scope``)
        without a pass."""
        if suffix not in self._endings:
            if suffix == "" or (bool(self.scope) and (suffix == self.scope or (suffix,) == self.scope)):
                self._endings[suffix] = range(len(self.indices))
            else:
                self._endings[suffix] = ending_with(self.names, suffix)
        return self._endings[suffix]

    def stems(self, suffix: str) -> tuple[Sequence[int], list[str]]:
        """The positions of the scales whose name ends with ``suffix`` (not empty), and those names without it
        (:func:`~scalar_scales.files.header.stems`); the positions are kept for :meth:`ending_with`, the names
        (a module's each) are not."""
        at, found = stems(self.names, suffix)
        self._endings.setdefault(suffix, at)
        return self._endings[suffix], found

    @cached_property
    def _endings(self) -> dict[str | tuple[str, ...], Sequence[int]]:
        return {}


class IndexDisagreement(NamedTuple):
    """A tensor the index and its shard disagree on: ``listed`` True where the index names it and the shard does not
    hold it, False where the shard holds it and the index does not name it."""

    file: Path | str
    tensor: str
    listed: bool

    @property
    def detail(self) -> str:
        """What disagrees, without what it does (a check finding gives that in its rule's words)."""
        return _LISTED_NOT_HELD if self.listed else _HELD_NOT_LISTED

    @property
    def problem(self) -> str:
        return f"{self.detail}: {_LISTED_NOT_HELD_MEANS if self.listed else _HELD_NOT_LISTED_MEANS}"

    def error(self) -> CheckpointError:
        return CheckpointError(self.file, self.problem, tensor=self.tensor)


@dataclass(frozen=True)
class CheckpointScan:
    """What a scan read: the checkpoint, its configs and declaration, its NVFP4 layout, and each shard."""

    opened: OpenedCheckpoint
    layout: ProducerLayout | None
    """The NVFP4 layout of the checkpoint (:func:`checkpoint_layout`); None where it is not NVFP4."""
    shards: list[ShardScan]

    @property
    def checkpoint(self) -> CheckpointLocation:
        return self.opened.location

    @property
    def config(self) -> dict[str, Any] | None:
        return self.opened.config

    @property
    def declared(self) -> Declaration | None:
        """What the configs declare; None without config.json and hf_quant_config.json."""
        return self.opened.declared

    @property
    def scale_count(self) -> int:
        return sum(len(shard.indices) for shard in self.shards)

    @cached_property
    def global_scale_count(self) -> int:
        """The scales of the checkpoint's layout (the rest are those ``include`` adds)."""
        if self.layout is None:
            return 0
        suffixes = self.layout.scale_suffixes
        return sum(len(shard.ending_with(suffixes)) for shard in self.shards)

    @property
    def kv_scale_count(self) -> int:
        """The declared KV-cache scales whose values were read (not those ``include`` named: they are scales)."""
        return sum(len(shard.kv_indices) for shard in self.shards)

    @property
    def legacy_count(self) -> int:
        return sum(shard.shapes.count((1,)) for shard in self.shards)

    @cached_property
    def scales(self) -> list[ScaleRecord]:
        return [
            ScaleRecord(shard.path, *entry)
            for shard in self.shards
            for entry in zip(shard.names, shard.dtypes, shard.shapes, shard.values, strict=True)
        ]

    @property
    def quantization_format(self) -> str | None:
        return None if self.declared is None else self.declared.quantization_format

    @property
    def declared_format_version(self) -> int | None:
        """compressed-tensors' marker (legacy 1 when the key is absent); None without a compressed-tensors
        config."""
        return None if self.declared is None else self.declared.format_version

    @cached_property
    def index_disagreements(self) -> list[IndexDisagreement]:
        """Every tensor of the index missing from its shard, then every tensor of a shard missing from the index,
        shard by shard; empty without an index. ``migrate`` refuses on any."""
        weight_map = self.checkpoint.weight_map
        if weight_map is None:
            return []
        held = sum(len(shard.header.names) for shard in self.shards)
        if held == len(weight_map) and all(map(_agrees_with(weight_map), self.shards)):
            return []
        listed: dict[str, set[str]] = {shard_name(shard.path): set() for shard in self.shards}
        for tensor, file in weight_map.items():
            listed[file].add(tensor)
        found: list[IndexDisagreement] = []
        for shard in self.shards:
            names, listed_here = set(shard.header.names), listed[shard_name(shard.path)]
            found += [IndexDisagreement(shard.path, tensor, True) for tensor in sorted(listed_here - names)]
            found += [IndexDisagreement(shard.path, tensor, False) for tensor in sorted(names - listed_here)]
        return found


def scan_shards(opened: OpenedCheckpoint, *, include: Sequence[str] = (), read_values: bool = True) -> CheckpointScan:
    """Read and validate every shard's header, and find and read the per-tensor scales in scope.

    ``read_values``: also read each scale's value (a migration needs only
    shapes), and those of the KV-cache scales the config declares. Where the
    config declares no NVFP4 layout, each shard's scales of either layout are
    read, and the checkpoint's layout is decided once every shard is in
    (:func:`checkpoint_layout`).
    """
    declared = declared_layout(opened.declared)
    candidates = (declared,) if declared is not None else tuple(LAYOUTS.values())
    suffixes = tuple(suffix for layout in candidates for suffix in layout.scale_suffixes)
    patterns = tuple(include)
    kv = read_values and opened.declared is not None and opened.declared.kv_cache

    def is_kv(header: SafetensorsHeader, i: int) -> bool:
        return header.names[i].endswith(KV_SCALES) and header.shapes[i] in ((), (1,))

    def select(header: SafetensorsHeader) -> list[int]:
        chosen = ending_with(header.names, suffixes)
        if patterns:
            included = (i for i, name in enumerate(header.names) if _included(name, patterns))
            chosen = sorted({*chosen, *included})
        if kv:
            chosen = sorted({*chosen, *(i for i in ending_with(header.names, KV_SCALES) if is_kv(header, i))})
        return chosen

    reads = _each(opened.source, opened.location.files, select, values=read_values)
    layout = checkpoint_layout(opened.declared, [shard.header.names for shard in reads])
    kept = () if layout is None else layout.scale_suffixes
    scope = () if patterns else kept  # what is left once KV-cache scales are set apart, and other layouts' dropped
    shards = []
    for header, indices, values in reads:
        kv_at = {k for k, i in enumerate(indices) if is_kv(header, i)} if kv else set()
        kv_at -= {k for k in kv_at if _included(header.names[indices[k]], patterns)}
        apart = sorted(kv_at)
        kv_indices, kv_values = [indices[k] for k in apart], [values[k] for k in apart]
        if kv_at or declared is None:  # as nearly every checkpoint is not: the columns are kept as read
            names = header.names
            keep = [k for k in range(len(indices)) if k not in kv_at]
            if declared is None:  # the candidates of the layout it is not: gone, unless included
                keep = [k for k in keep if names[indices[k]].endswith(kept) or _included(names[indices[k]], patterns)]
            indices, values = [indices[k] for k in keep], [values[k] for k in keep]
        _check_single_values(header, indices)
        shards.append(ShardScan(header, indices, values, kv_indices, kv_values, scope))
    return CheckpointScan(opened, layout, shards)


def declared_layout(declared: Declaration | None) -> ProducerLayout | None:
    """The NVFP4 layout a declaration makes a server expect; None where it declares no NVFP4."""
    if declared is None or declared.producer is None or not declared.is_nvfp4:
        return None
    return LAYOUTS[declared.producer]


def checkpoint_layout(declared: Declaration | None, shards: Sequence[list[str]]) -> ProducerLayout | None:
    """The one decision of a checkpoint's NVFP4 layout: the one its config declares; for a checkpoint whose config
    declares no NVFP4 (or that has none), the layout whose scales its first shard that holds any holds
    (compressed-tensors' global scale, ModelOpt's ``weight_scale_2``), so that NVFP4 tensors a config does not
    declare are still found; None where no shard holds either."""
    layout = declared_layout(declared)
    if layout is not None:
        return layout
    for names in shards:
        for candidate in LAYOUTS.values():
            if any(map(str.endswith, names, repeat(candidate.scale_suffixes[0]))):
                return candidate
    return None


def _each(source: ShardSource, files: Sequence[Any], select: ScaleSelector, *, values: bool) -> list[ShardRead]:
    """Each file's read, in order: one after the other, or, from a source on the network, together
    (:meth:`~scalar_scales.sources.checkpoint.NetworkShardSource.read_shards`: a bounded number at once, with its
    progress display, and the first failure ending the others' reads, so that the error does not wait for every
    other read to reach its deadline)."""
    if isinstance(source, NetworkShardSource):
        return source.read_shards(files, select, values=values)
    return [source.read_shard(file, select, values=values) for file in files]


def _agrees_with(weight_map: dict[str, str]) -> Callable[[ShardScan], bool]:
    def agrees(shard: ShardScan) -> bool:
        file = shard_name(shard.path)
        names = shard.header.names
        if len(names) < 2:
            return all(weight_map.get(name) == file for name in names)
        try:
            listed: tuple[str, ...] = itemgetter(*names)(weight_map)  # one call for all the lookups
        except KeyError:
            return False
        return listed.count(file) == len(names)

    return agrees


def _included(name: str, include: Sequence[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in include)


def _check_single_values(header: SafetensorsHeader, indices: list[int]) -> None:
    shapes = set(map(header.shapes.__getitem__, indices))
    if shapes <= {(), (1,)}:
        return
    i = next(i for i in indices if header.shapes[i] not in ((), (1,)))
    shape = list(header.shapes[i])
    problem = (
        f"shape {shape} is neither (1,) nor 0-D"
        if math.prod(shape) == 1
        else f"a per-tensor scale must hold one value, this one has shape {shape}"
    )
    raise CheckpointError(header.path, problem, header.names[i])


_LISTED_NOT_HELD = f"named for this shard in {INDEX_NAME} but not in it"
_LISTED_NOT_HELD_MEANS = (
    "vLLM loads every tensor of the files the index lists and serves the checkpoint as it would without the entry "
    "(observed); a tool that looks tensors up by the index's names does not find it"
)
_HELD_NOT_LISTED = f"in this shard but not in {INDEX_NAME}'s weight_map"
_HELD_NOT_LISTED_MEANS = (
    "vLLM loads every tensor of the files the index lists, this one too (observed); a tool that reads only what "
    "the index names leaves it out"
)
