"""Find every per-tensor scale in a checkpoint and say what shape and value it has.

The scope is the NVFP4 per-tensor global scales (``*_global_scale``) of a
compressed-tensors ``nvfp4-pack-quantized`` checkpoint, plus any tensors that
``include`` globs name. Values are read straight from the mapped files, so that
a scale of zero (an expert that never saw a calibration token gets
``input_global_scale`` 0.0), a negative one, NaN or Inf can be flagged.

Shards are independent, so each is read, validated and (for ``migrate``)
planned by one job, and the jobs run in parallel worker processes. A job
hands back only its scales, its planned edit and a digest of its tensor
names, never the parsed header: sending a header between processes costs as
much as parsing it. The digest is checked against the index's
``weight_map``, both ways, before anything is reported or written.

Workers die with the process that started them, on any signal (SIGKILL
included): none outlives a run.

With ``diagnose``, each job also runs the module checks of
:mod:`scalar_scales.diagnose` on its header. Shards come from a
:class:`ShardSource`: local files, mapped, in forked workers; or a Hub
repository (:mod:`scalar_scales.hub`), read by range requests in threads.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import multiprocessing
import operator
import os
import signal
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypedDict, TypeVar, Unpack

from scalar_scales.checkpoint import (
    FORMAT_VERSION_KEY,
    INDEX_NAME,
    LEGACY_FORMAT_VERSION,
    NVFP4_FORMAT,
    Checkpoint,
    Declaration,
    declaration,
    is_global_scale,
    read_config,
    resolve_checkpoint,
)
from scalar_scales.diagnose import Scheme, ShardDiagnosis, checkpoint_findings, diagnose_shard, scheme_of
from scalar_scales.header_edit import HeaderEdit, Layout, plan_header_edit
from scalar_scales.rules import Finding
from scalar_scales.safetensors_header import CheckpointError, SafetensorsHeader, read_header

__all__ = [
    "LOCAL_FILES",
    "CheckpointLocation",
    "CheckpointScan",
    "ScaleFinding",
    "ScanOptions",
    "ShardScan",
    "ShardSource",
    "decode_scale",
    "file_name",
    "scan_checkpoint",
    "scan_shards",
]

PARALLEL_MIN_SHARDS = 8
"""Below this many shards, starting worker processes costs more than it saves."""
REMOTE_REQUESTS = 8
"""Shards of a remote checkpoint read at once."""

_DECODERS: dict[str, Any] = {
    "F32": struct.Struct("<f").unpack_from,
    "F64": struct.Struct("<d").unpack_from,
    "F16": struct.Struct("<e").unpack_from,
}


class ScaleFinding(NamedTuple):
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


class ShardScan(NamedTuple):
    """What one shard's job found: its per-tensor scales (columns), its planned edit and its module findings."""

    path: Path | str
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    values: list[float | None]
    edit: HeaderEdit | None
    tensors: tuple[int, int]
    """The shard's tensor names as (count, digest) for its file: what the index is checked against."""
    diagnosis: ShardDiagnosis
    """With ``diagnose``: the shard's findings, and what it shares with other shards (:mod:`scalar_scales.diagnose`)."""


class CheckpointLocation(Protocol):
    """A checkpoint as a scan needs it: a local :class:`Checkpoint`, or a Hub repository's."""

    @property
    def root(self) -> Path | str: ...

    @property
    def files(self) -> tuple[Any, ...]: ...

    @property
    def config(self) -> Path | str | None: ...

    @property
    def weight_map(self) -> dict[str, str] | None: ...


class ShardSource(Protocol):
    """Where a shard's bytes come from. ``threads``: its jobs wait on the network, so run them in threads."""

    threads: bool

    def read_header(self, file: Any) -> SafetensorsHeader: ...

    def read_values(self, header: SafetensorsHeader, indices: list[int]) -> list[float | None]: ...


@dataclass
class CheckpointScan:
    """Everything ``check`` reports, and what ``migrate`` plans from."""

    checkpoint: CheckpointLocation
    config: dict[str, Any] | None
    declared: Declaration | None
    """What config.json declares; None without a config.json."""
    shards: list[ShardScan]
    scheme: Scheme | None = None
    """The config's NVFP4 scheme, when the scan diagnosed the checkpoint; None without a config."""
    index_errors: list[CheckpointError] = field(default_factory=list)
    """Every disagreement between the index and the shards, first to last; ``migrate`` refuses on any."""

    @property
    def scale_count(self) -> int:
        return sum(len(shard.names) for shard in self.shards)

    @cached_property
    def scales(self) -> list[ScaleFinding]:
        return [
            ScaleFinding(shard.path, *entry)
            for shard in self.shards
            for entry in zip(shard.names, shard.dtypes, shard.shapes, shard.values, strict=True)
        ]

    @cached_property
    def findings(self) -> list[Finding]:
        """Every rule's findings (:func:`scalar_scales.diagnose.checkpoint_findings`)."""
        return checkpoint_findings(self)

    @property
    def edits(self) -> list[HeaderEdit]:
        return [shard.edit for shard in self.shards if shard.edit is not None]

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

    @property
    def marker_mismatch(self) -> str | None:
        """Why the config's declaration disagrees with the shards, if it does."""
        if self.declared is None or not self.scale_count or not self.is_nvfp4:
            return None
        declared, legacy = self.declared_format_version, self.legacy_count
        if legacy and declared != LEGACY_FORMAT_VERSION:
            return (
                f"config.json declares {FORMAT_VERSION_KEY} {declared} but {legacy} scales are (1,): "
                "a loader that trusts the marker expects 0-D scales"
            )
        if not legacy and declared == LEGACY_FORMAT_VERSION:
            return (
                f"every scale is 0-D but config.json does not declare {FORMAT_VERSION_KEY} 2: "
                "a loader that trusts the marker expects (1,) scales"
            )
        return None


class ScanOptions(TypedDict, total=False):
    """What a scan does besides reading the scales (the defaults are :func:`scan_shards`'s)."""

    include: Sequence[str]
    read_values: bool
    plan_to: Layout | None
    close_in_workers: Sequence[int]
    diagnose: bool


def scan_checkpoint(path: str | os.PathLike[str] | Checkpoint, **options: Unpack[ScanOptions]) -> CheckpointScan:
    """Read and validate every shard header of a local checkpoint and find the per-tensor scales in scope
    (:func:`scan_shards` says what ``options`` do)."""
    checkpoint = path if isinstance(path, Checkpoint) else resolve_checkpoint(path)
    config = read_config(checkpoint.root) if checkpoint.config else None
    return scan_shards(checkpoint, config, LOCAL_FILES, **options)


def scan_shards(
    checkpoint: CheckpointLocation,
    config: dict[str, Any] | None,
    source: ShardSource,
    *,
    include: Sequence[str] = (),
    read_values: bool = True,
    plan_to: Layout | None = None,
    close_in_workers: Sequence[int] = (),
    diagnose: bool = False,
) -> CheckpointScan:
    """Read and validate every shard header, from ``source``, and find the per-tensor scales in scope.

    ``config`` is the checkpoint's parsed ``config.json``. With ``plan_to``,
    also plan each shard's header edit into that layout; with ``diagnose``,
    also run every shard's checks. ``close_in_workers`` names file
    descriptors (a held lock) that forked workers must close at once, so
    that they cannot hold them past this call.
    """
    declared = None if config is None else declaration(config, str(checkpoint.config))
    nvfp4 = None if declared is None else declared.quantization_format == NVFP4_FORMAT
    scheme = scheme_of(config) if diagnose else None
    job = partial(
        _scan_shard,
        source=source,
        nvfp4=nvfp4,
        include=tuple(include),
        read_values=read_values,
        plan_to=plan_to,
        diagnose=diagnose,
        scheme=scheme,
    )
    shards = _map_shards(job, list(checkpoint.files), close_in_workers, threads=source.threads)
    index_errors = [] if checkpoint.weight_map is None else _index_errors(checkpoint, shards, source)
    return CheckpointScan(checkpoint, config, declared, shards, scheme, index_errors)


def _digest(names: Collection[str], files: Collection[str]) -> tuple[int, int]:
    """An order-free digest of (tensor, file) pairs: their count, and the sum of hash(tensor) x its file's weight.

    Forked workers share the parent's string hashing, so the shards' digests
    add up to the index's when, and (but for a chance of about 2^-64) only
    when, they agree. Every step runs at C speed over hundreds of thousands
    of names.
    """
    weights = {file: hash(file) | 1 for file in set(files)}
    return len(names), sum(map(operator.mul, map(hash, names), map(weights.__getitem__, files)))


def _index_errors(
    checkpoint: CheckpointLocation, shards: list[ShardScan], source: ShardSource
) -> list[CheckpointError]:
    """Every tensor of the index missing from its shard, and every tensor of a shard missing from the index."""
    assert checkpoint.weight_map is not None
    found = tuple(map(sum, zip(*(shard.tensors for shard in shards), strict=True)))
    if found == _digest(checkpoint.weight_map.keys(), checkpoint.weight_map.values()):
        return []
    listed: dict[str, set[str]] = {file_name(shard.path): set() for shard in shards}
    for tensor, shard_name in checkpoint.weight_map.items():
        listed[shard_name].add(tensor)
    errors = []
    for file, shard in zip(checkpoint.files, shards, strict=True):
        names = set(source.read_header(file).names)
        listed_here = listed[file_name(shard.path)]
        for missing, problem in ((listed_here - names, _LISTED_NOT_HELD), (names - listed_here, _HELD_NOT_LISTED)):
            errors += [CheckpointError(shard.path, problem, tensor=tensor) for tensor in sorted(missing)]
    return errors


_LISTED_NOT_HELD = f"named for this shard in {INDEX_NAME} but not in it: the index promises a tensor no shard holds"
_HELD_NOT_LISTED = f"in this shard but not in {INDEX_NAME}'s weight_map: what reads the index does not know it exists"


def file_name(path: Path | str) -> str:
    """A shard's file name, from a local path or an ``hf://`` address."""
    return str(path).rpartition("/")[2]


def _scan_shard(
    file: Any,
    *,
    source: ShardSource,
    nvfp4: bool | None,
    include: tuple[str, ...],
    read_values: bool,
    plan_to: Layout | None,
    diagnose: bool,
    scheme: Scheme | None,
) -> ShardScan:
    header = source.read_header(file)
    names = header.names
    tensors = _digest(names, [file_name(header.path)] * len(names))
    if nvfp4 is None:  # a lone file without a config: NVFP4 if it has global scales
        nvfp4 = any(map(is_global_scale, names))
    indices = [i for i, name in enumerate(names) if nvfp4 and is_global_scale(name)]
    if include:
        indices = sorted({*indices, *(i for i, name in enumerate(names) if _included(name, include))})
    _check_single_values(header, indices)
    scale_names = [names[i] for i in indices]
    shapes = [header.shapes[i] for i in indices]
    values = source.read_values(header, indices) if read_values else [None] * len(indices)
    diagnosis = ShardDiagnosis([], {}, {})
    if diagnose:
        diagnosis = diagnose_shard(header, (scale_names, shapes, values), scheme, modules=nvfp4)
    return ShardScan(
        path=header.path,
        names=scale_names,
        dtypes=[header.dtypes[i] for i in indices],
        shapes=shapes,
        values=values,
        edit=plan_header_edit(header, indices, plan_to) if plan_to else None,
        tensors=tensors,
        diagnosis=diagnosis,
    )


_T = TypeVar("_T")


def _map_shards(
    job: Callable[[Any], _T], paths: list[Any], close_in_workers: Sequence[int], *, threads: bool = False
) -> list[_T]:
    """Run ``job`` on every shard: in threads for a remote source, in forked worker processes when that pays,
    else here.

    Forking is only safe in a process with one thread, so a threaded caller
    gets the sequential path.
    """
    if threads:
        with ThreadPoolExecutor(max_workers=REMOTE_REQUESTS) as pool:
            return list(pool.map(job, paths))
    workers = min(os.cpu_count() or 1, 8)
    if len(paths) < PARALLEL_MIN_SHARDS or workers < 2 or threading.active_count() > 1:
        return [job(p) for p in paths]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(os.getpid(), tuple(close_in_workers)),
    ) as pool:
        return list(pool.map(job, paths, chunksize=max(1, len(paths) // (4 * workers))))


_PR_SET_PDEATHSIG = 1


def _start_worker(parent: int, fds: tuple[int, ...]) -> None:
    """Die with the parent, on any signal, and let go of what it holds (a lock) at once.

    Linux sends the worker SIGKILL when the thread that forked it ends, so a
    killed ``migrate`` takes its workers with it. A parent already gone
    before that was set is caught by the ``getppid`` check.
    """
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    for fd in fds:
        os.close(fd)


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


def decode_scale(dtype: str, data: Any, offset: int) -> float | None:
    """The value of a one-element tensor of ``dtype`` at ``offset`` in ``data``; None for a dtype we do not read."""
    decode = _DECODERS.get(dtype)
    if decode is not None:
        return decode(data, offset)[0]
    if dtype == "BF16":
        return struct.unpack("<f", b"\0\0" + data[offset : offset + 2])[0]
    return None


class _LocalFiles:
    """Shards on this machine: headers read from the file, values from its mapping."""

    threads = False
    read_header = staticmethod(read_header)

    @staticmethod
    def read_values(header: SafetensorsHeader, indices: list[int]) -> list[float | None]:
        if not indices:
            return []
        with open(header.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            base = header.data_start
            return [decode_scale(header.dtypes[i], data, base + header.begins[i]) for i in indices]


LOCAL_FILES: ShardSource = _LocalFiles()
