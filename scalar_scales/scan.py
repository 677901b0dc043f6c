"""Read every shard of a checkpoint once: its per-tensor scales (name, dtype, shape, value), and whatever else a
caller asks of each shard's header; then check the index against the shards.

The scope is the NVFP4 per-tensor scales of the checkpoint's layout
(:class:`~scalar_scales.nvfp4.ProducerLayout`): compressed-tensors'
``*_global_scale``, or ModelOpt's ``weight_scale_2`` and ``input_scale``,
plus any tensors that ``include`` globs name. The layout is the one the
config declares; a checkpoint whose config declares no NVFP4, or that has no
config, has the layout whose scales its shards hold. Values are read straight from the files, so
that a scale of zero (an expert that never saw a calibration token gets
``input_global_scale`` 0.0), a negative one, NaN or Inf can be flagged.

Shards are independent, so each is read and validated by one job, and the
jobs run in worker processes (:mod:`scalar_scales.system.workers`), or in
threads for a source on the network. A job hands back only its scales, the
result of the caller's :class:`ShardWork` on its header (the doctor's
per-shard rules, migrate's planned edit), and a digest of its tensor names,
never the parsed header: sending a header between processes costs as much
as parsing it. The digests are checked against the index's ``weight_map``,
both ways, before anything is reported or written.

The jobs start on the shards the folder holds while this process reads the
index, which names every tensor of a large MoE: they are nearly always the
shards it names, and where they are not the jobs run again on those.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property, partial
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, ending_with
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, LAYOUTS, MODELOPT_LAYOUT, ProducerLayout
from scalar_scales.sources.checkpoint import INDEX_NAME, CheckpointLocation, OpenedCheckpoint, ShardSource, shard_name
from scalar_scales.sources.declaration import Declaration
from scalar_scales.system.workers import workers_for

__all__ = [
    "CheckpointScan",
    "ScaleRecord",
    "ShardScales",
    "ShardScan",
    "ShardWork",
    "UnlistedTensor",
    "declared_layout",
    "scan_shards",
]


class ScaleRecord(NamedTuple):
    """One per-tensor scale: where it is, its shape and its value (``check --list``).

    A named tuple: a large MoE has tens of thousands of them.
    """

    file: Path | str
    name: str
    dtype: str
    shape: tuple[int, ...]
    value: float | None

    @property
    def layout(self) -> str:
        """``scalar`` for (), ``legacy`` for (1,)."""
        return "scalar" if self.shape == () else "legacy"


class ShardScales(NamedTuple):
    """The per-tensor scales a shard's job found, as columns: header ``indices``, and their names, shapes and
    values. ``layout``: the shard's NVFP4 layout; None where the checkpoint is not NVFP4."""

    indices: list[int]
    names: list[str]
    shapes: list[tuple[int, ...]]
    values: list[float | None]
    layout: ProducerLayout | None


class ShardWork(Protocol):
    """What a caller does with each shard's header in the shard's job; what it returns travels back in
    :attr:`ShardScan.work`. It must pickle: jobs may run in spawned processes."""

    def __call__(self, header: SafetensorsHeader, scales: ShardScales) -> Any: ...


class ShardScan(NamedTuple):
    """What one shard's job found: its per-tensor scales (columns), the digest of its tensor names, and the
    result of the caller's work."""

    path: Path | str
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    values: list[float | None]
    index_digest: tuple[int, int]
    """The shard's tensor names as (count, digest) for its file: what the index is checked against."""
    work: Any
    layout: ProducerLayout | None


@dataclass
class CheckpointScan:
    """What a scan read: the checkpoint, its config and declaration, each shard's scales, and the index's
    disagreements with the shards."""

    checkpoint: CheckpointLocation
    config: dict[str, Any] | None
    declared: Declaration | None
    """What the configs declare; None without config.json and hf_quant_config.json."""
    shards: list[ShardScan]
    index_errors: list[CheckpointError] = field(default_factory=list)
    """Every disagreement between the index and the shards, first to last; ``migrate`` refuses on any."""

    @property
    def scale_count(self) -> int:
        return sum(len(shard.names) for shard in self.shards)

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
    def layout(self) -> ProducerLayout | None:
        """The NVFP4 layout of the checkpoint; None where it is not NVFP4."""
        return next((shard.layout for shard in self.shards if shard.layout is not None), None)

    @property
    def is_nvfp4(self) -> bool:
        """NVFP4 by its config, or, for a lone file without one, by holding one layout's scales."""
        return self.layout is not None

    @property
    def declared_format_version(self) -> int | None:
        """compressed-tensors' marker (legacy 1 when the key is absent); None without a compressed-tensors
        config."""
        return None if self.declared is None else self.declared.format_version

    @property
    def legacy_count(self) -> int:
        return sum(shard.shapes.count((1,)) for shard in self.shards)


def scan_shards(
    opened: OpenedCheckpoint,
    *,
    include: Sequence[str] = (),
    read_values: bool = True,
    work: ShardWork | None = None,
    index: bool = True,
) -> CheckpointScan:
    """Read and validate every shard header, and find the per-tensor scales in scope; run ``work`` on each.

    ``read_values``: also read each scale's value (a migration needs only
    shapes). ``index``: hold the index to the shards (a check that does
    not apply the index rules leaves ``index_errors`` empty).
    """
    checkpoint, config, source = opened.location, opened.config, opened.source
    declared = opened.declared
    likely = list(checkpoint.likely_files)
    workers = workers_for(len(likely), network=source.network)
    undecided = declared is None or not declared.is_nvfp4
    job = partial(
        _scan_shard,
        source=source,
        layout=None if undecided else declared_layout(declared),
        held_layout=undecided,
        include=tuple(include),
        read_values=read_values,
        work=work,
        pair_hash=workers.pair_hash if index else None,
    )
    run = workers.start(job, likely)
    try:  # the index, read while the shards are
        files, weight_map = list(checkpoint.files), checkpoint.weight_map
        listed = (
            None if not index or weight_map is None else _digest(weight_map, weight_map.values(), workers.pair_hash)
        )
    except BaseException:
        run.cancel()
        raise
    if files == likely:
        shards = run.results()
    else:  # the folder holds shards its index does not name
        run.cancel()
        shards = workers.map(job, files)
    if listed is None:
        return CheckpointScan(checkpoint, config, declared, shards)
    index_errors = _index_errors(checkpoint, shards, source, listed)
    return CheckpointScan(checkpoint, config, declared, shards, index_errors)


def declared_layout(declared: Declaration) -> ProducerLayout | None:
    """The NVFP4 layout a declaration makes a server expect; None where it declares no NVFP4."""
    return LAYOUTS[declared.producer] if declared.producer is not None and declared.is_nvfp4 else None


def _held_layout(names: list[str]) -> ProducerLayout | None:
    """The layout a shard holds: compressed-tensors' if it has a global scale, ModelOpt's if it has a
    ``weight_scale_2``."""
    for layout in (COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT):
        if any(map(str.endswith, names, repeat(layout.scale_suffixes[0]))):
            return layout
    return None


def _digest(
    names: Collection[str], files: Iterable[str], pair_hash: Callable[[tuple[str, str]], int]
) -> tuple[int, int]:
    """An order-free digest of (tensor, file) pairs: their count, and the sum of their hashes.

    The shards' digests add up to the index's when, and (but for a chance of
    about 2^-64) only when, they agree, as long as every process hashes
    alike (``pair_hash``). Every step runs at C speed over hundreds of
    thousands of names.
    """
    return len(names), sum(map(pair_hash, zip(names, files, strict=False)))  # files: maybe one file, repeated


def _index_errors(
    checkpoint: CheckpointLocation, shards: list[ShardScan], source: ShardSource, listed: tuple[int, int]
) -> list[CheckpointError]:
    """Every tensor of the index missing from its shard, and every tensor of a shard missing from the index
    (``listed``: the index's digest)."""
    assert checkpoint.weight_map is not None
    if tuple(map(sum, zip(*(shard.index_digest for shard in shards), strict=True))) == listed:
        return []
    listed: dict[str, set[str]] = {shard_name(shard.path): set() for shard in shards}
    for tensor, file in checkpoint.weight_map.items():
        listed[file].add(tensor)
    errors = []
    for file, shard in zip(checkpoint.files, shards, strict=True):
        names = set(source.read_header(file).names)
        listed_here = listed[shard_name(shard.path)]
        for missing, problem, kind in (
            (listed_here - names, _LISTED_NOT_HELD, CheckpointError),
            (names - listed_here, _HELD_NOT_LISTED, UnlistedTensor),
        ):
            errors += [kind(shard.path, problem, tensor=tensor) for tensor in sorted(missing)]
    return errors


class UnlistedTensor(CheckpointError):
    """A tensor a shard holds that the index does not name (any other index error: one it names and the shard
    does not hold)."""


_LISTED_NOT_HELD = (
    f"named for this shard in {INDEX_NAME} but not in it: vLLM loads every tensor of the files the index lists and "
    "serves the checkpoint as it would without the entry (observed); a tool that looks tensors up by the index's "
    "names does not find it"
)
_HELD_NOT_LISTED = (
    f"in this shard but not in {INDEX_NAME}'s weight_map: vLLM loads every tensor of the files the index lists, "
    "this one too (observed); a tool that reads only what the index names leaves it out"
)


def _scan_shard(
    file: Any,
    *,
    source: ShardSource,
    layout: ProducerLayout | None,
    held_layout: bool,
    include: tuple[str, ...],
    read_values: bool,
    work: ShardWork | None,
    pair_hash: Callable[[tuple[str, str]], int] | None,
) -> ShardScan:
    """One shard's job. ``held_layout``: the shard's layout is the one whose scales it holds, for a checkpoint
    whose config declares no NVFP4 (or that has no config), so that NVFP4 tensors a config does not declare are
    still found. ``pair_hash`` None: the index is not checked, so no digest is taken."""
    header = source.read_header(file)
    names = header.names
    index_digest = (0, 0) if pair_hash is None else _digest(names, repeat(shard_name(header.path)), pair_hash)
    if held_layout:
        layout = _held_layout(names)
    indices = [] if layout is None else ending_with(names, layout.scale_suffixes)
    if include:
        indices = sorted({*indices, *(i for i, name in enumerate(names) if _included(name, include))})
    _check_single_values(header, indices)
    scale_names = list(map(names.__getitem__, indices))
    shapes = list(map(header.shapes.__getitem__, indices))
    values = source.read_values(header, indices) if read_values else [None] * len(indices)
    scales = ShardScales(indices, scale_names, shapes, values, layout)
    return ShardScan(
        path=header.path,
        names=scale_names,
        dtypes=list(map(sys.intern, map(header.dtypes.__getitem__, indices))),  # one object each to send
        shapes=shapes,
        values=values,
        index_digest=index_digest,
        work=None if work is None else work(header, scales),
        layout=layout,
    )


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
