"""Read every shard of a checkpoint once: its per-tensor scales (name, dtype, shape, value), and whatever else a
caller asks of each shard's header; then check the index against the shards.

The scope is the NVFP4 per-tensor global scales (``*_global_scale``) of a
compressed-tensors ``nvfp4-pack-quantized`` checkpoint, plus any tensors
that ``include`` globs name. Values are read straight from the files, so
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
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.nvfp4 import NVFP4_FORMAT, is_global_scale
from scalar_scales.sources.checkpoint import (
    INDEX_NAME,
    CheckpointLocation,
    Declaration,
    OpenedCheckpoint,
    ShardSource,
    declaration,
    shard_name,
)
from scalar_scales.system.workers import workers_for

__all__ = ["CheckpointScan", "ScaleRecord", "ShardScales", "ShardScan", "ShardWork", "scan_shards"]


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
    values. ``nvfp4``: the shard belongs to an NVFP4 checkpoint (by its config, or for a lone file by holding
    global scales)."""

    indices: list[int]
    names: list[str]
    shapes: list[tuple[int, ...]]
    values: list[float | None]
    nvfp4: bool


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


@dataclass
class CheckpointScan:
    """What a scan read: the checkpoint, its config and declaration, each shard's scales, and the index's
    disagreements with the shards."""

    checkpoint: CheckpointLocation
    config: dict[str, Any] | None
    declared: Declaration | None
    """What config.json declares; None without a config.json."""
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
    def is_nvfp4(self) -> bool:
        """NVFP4 by its config, or, for a lone file without one, by having global scales."""
        if self.declared is None:
            return self.scale_count > 0
        return self.quantization_format == NVFP4_FORMAT

    @property
    def declared_format_version(self) -> int | None:
        """The config's version (legacy 1 when the key is absent); None without a config."""
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
) -> CheckpointScan:
    """Read and validate every shard header, and find the per-tensor scales in scope; run ``work`` on each.

    ``read_values``: also read each scale's value (a migration needs only
    shapes).
    """
    checkpoint, config, source = opened.location, opened.config, opened.source
    declared = None if config is None else declaration(config, str(checkpoint.config))
    nvfp4 = None if declared is None else declared.quantization_format == NVFP4_FORMAT
    files = list(checkpoint.files)
    workers = workers_for(len(files), network=source.network)
    job = partial(
        _scan_shard,
        source=source,
        nvfp4=nvfp4,
        include=tuple(include),
        read_values=read_values,
        work=work,
        name_hash=workers.name_hash,
    )
    shards = workers.map(job, files)
    index_errors = [] if checkpoint.weight_map is None else _index_errors(checkpoint, shards, source, workers.name_hash)
    return CheckpointScan(checkpoint, config, declared, shards, index_errors)


def _digest(names: Collection[str], files: Collection[str], name_hash: Callable[[str], int]) -> tuple[int, int]:
    """An order-free digest of (tensor, file) pairs: their count, and the sum of hash(tensor) x its file's weight.

    The shards' digests add up to the index's when, and (but for a chance of
    about 2^-64) only when, they agree, as long as every process hashes
    alike (``name_hash``). Every step runs at C speed over hundreds of
    thousands of names.
    """
    weights = {file: name_hash(file) | 1 for file in set(files)}
    return len(names), sum(map(operator.mul, map(name_hash, names), map(weights.__getitem__, files)))


def _index_errors(
    checkpoint: CheckpointLocation, shards: list[ShardScan], source: ShardSource, name_hash: Callable[[str], int]
) -> list[CheckpointError]:
    """Every tensor of the index missing from its shard, and every tensor of a shard missing from the index."""
    assert checkpoint.weight_map is not None
    found = tuple(map(sum, zip(*(shard.index_digest for shard in shards), strict=True)))
    if found == _digest(checkpoint.weight_map.keys(), checkpoint.weight_map.values(), name_hash):
        return []
    listed: dict[str, set[str]] = {shard_name(shard.path): set() for shard in shards}
    for tensor, file in checkpoint.weight_map.items():
        listed[file].add(tensor)
    errors = []
    for file, shard in zip(checkpoint.files, shards, strict=True):
        names = set(source.read_header(file).names)
        listed_here = listed[shard_name(shard.path)]
        for missing, problem in ((listed_here - names, _LISTED_NOT_HELD), (names - listed_here, _HELD_NOT_LISTED)):
            errors += [CheckpointError(shard.path, problem, tensor=tensor) for tensor in sorted(missing)]
    return errors


_LISTED_NOT_HELD = f"named for this shard in {INDEX_NAME} but not in it: the index promises a tensor no shard holds"
_HELD_NOT_LISTED = f"in this shard but not in {INDEX_NAME}'s weight_map: what reads the index does not know it exists"


def _scan_shard(
    file: Any,
    *,
    source: ShardSource,
    nvfp4: bool | None,
    include: tuple[str, ...],
    read_values: bool,
    work: ShardWork | None,
    name_hash: Callable[[str], int],
) -> ShardScan:
    header = source.read_header(file)
    names = header.names
    index_digest = _digest(names, [shard_name(header.path)] * len(names), name_hash)
    if nvfp4 is None:  # a lone file without a config: NVFP4 if it has global scales
        nvfp4 = any(map(is_global_scale, names))
    indices = [i for i, name in enumerate(names) if nvfp4 and is_global_scale(name)]
    if include:
        indices = sorted({*indices, *(i for i, name in enumerate(names) if _included(name, include))})
    _check_single_values(header, indices)
    scale_names = [names[i] for i in indices]
    shapes = [header.shapes[i] for i in indices]
    values = source.read_values(header, indices) if read_values else [None] * len(indices)
    scales = ShardScales(indices, scale_names, shapes, values, nvfp4)
    return ShardScan(
        path=header.path,
        names=scale_names,
        dtypes=[header.dtypes[i] for i in indices],
        shapes=shapes,
        values=values,
        index_digest=index_digest,
        work=None if work is None else work(header, scales),
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
