"""Check a checkpoint on the Hugging Face Hub without downloading it: ``hf://ORG/NAME[@REVISION]``, or the
address of its page (:mod:`.hub_address`).

Only what the checks need is fetched: the repository's file list (the
model-info endpoint), then ``config.json`` and the index together, then each
shard's header and the bytes of its global scales, all through HTTP range
requests on the files' resolve addresses, several shards at once. On a
DeepSeek-V4-Flash-sized checkpoint that is well under 1% of its bytes.

Round trips, not bytes, are what a remote check waits on, so a shard is read
in one request where it can be: the index says which tensors each shard
holds, and so about how long its header is (:func:`header_estimate`); the
first range asks for that much and a little more (at most
:data:`FIRST_READ_CAP`), which on a shard from the
reference writer (tensors sorted by dtype, then name, so that the F32 global
scales lead the data section) holds the header and the scales too. Where
the header is longer, the rest is a second range; scales that lie elsewhere
(a writer that scatters them among the weights) are read in ranges merged
across gaps of up to :data:`MERGE_GAP`, each at most :data:`SPAN_CAP` long
(:func:`coalesce`). No byte is fetched twice: bytes inside an earlier range
are taken from it.

Requests go through ``huggingface_hub``, the optional ``hub`` extra, so its
endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or a saved login), offline
mode and cache, timeouts (``HF_HUB_ETAG_TIMEOUT`` for the model info,
``HF_HUB_DOWNLOAD_TIMEOUT`` for files: 10 seconds each unless set),
repository-id rules, redirects and progress bars behave as everywhere else
it is used. It is imported only here, and only when a Hub address is
checked. With ``HF_HUB_OFFLINE=1`` the snapshot in its cache is checked as a
local folder, at the commit the cache's ``refs/`` name.

A server is not trusted. Every read is pinned to the commit the model info
names, so a push during a check cannot mix two commits. A range reply must
be 206, uncompressed, and hold exactly the bytes asked for, starting where
its Content-Range says; bodies are read with a bound, so memory stays
bounded whatever the server sends, and each request (connecting, its
redirects, retries, headers and body together) must finish within
:data:`~.hub_client.DEADLINE_FACTOR` times its timeout
(:mod:`.hub_client`). Anything else (a malformed model info, a short or
long body, a hang) is one line naming the address, exit 2.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import header_length_of, parse_header
from scalar_scales.files.json_document import MAX_JSON_BYTES, json_object
from scalar_scales.files.scalars import read_scalars
from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    UNIQUE_KEYS,
    OpenedCheckpoint,
    ScaleSelector,
    ShardRead,
    gather,
    shard_name,
    shard_names,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME
from scalar_scales.sources.hub_address import HUB_PREFIX, HubAddress, parse_hub_address
from scalar_scales.sources.hub_client import Client, Reply

__all__ = [
    "HubShards",
    "RemoteCheckpoint",
    "coalesce",
    "header_estimate",
    "open_hub_checkpoint",
]

FIRST_READ = 64 * 1024
"""Bytes asked for first from a shard the index does not describe (a lone ``model.safetensors``)."""
ENTRY_BYTES = 88
"""A header entry's bytes beyond its tensor's name, as the reference writer writes them, with room to spare
(``"NAME":{"dtype":"F8_E4M3","shape":[7168,256],"data_offsets":[1234567890,1234567891]},`` is 81 beyond it)."""
SCALE_ROOM = 4
"""Bytes after the header asked for with it per tensor of the shard: room for an F32 scale of each, so that scales
leading the data section come in the same range."""
FIRST_READ_CAP = 4 << 20
"""The most a shard's first range asks for, however long the index says its header is: 32 shards are read at once,
and each holds its first range until it is parsed. A longer header is read by a second range, one shard at a time
(:attr:`HubShards.long_headers`)."""
AFTER_HEADER = 64 * 1024
"""Bytes asked for after a header whose length was not known: where the reference writer puts the scales."""
RANGE_GAP = 4096
"""Scales closer than this in a shard's first range are decoded from one slice of it."""
MERGE_GAP = 1 << 20
"""Scale ranges this close are fetched as one request: at 100 ms a round trip, a megabyte more costs about as much
as another request on a 100 Mbit/s link, and a scattered layout's scales are read in few requests."""
SPAN_CAP = 8 << 20
"""The most one merged range may hold: what a reader holds in memory at a time, however the header places its
scales. A range is only ever longer where one scale's own bytes are (never: a scale is at most 8 bytes)."""
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class RemoteCheckpoint:
    """A Hub repository's checkpoint: the same fields as a local :class:`~scalar_scales.sources.local.Checkpoint`,
    with the addresses of its files for paths."""

    root: str
    files: tuple[str, ...]
    config: str | None
    weight_map: dict[str, str] | None
    modelopt_config: str | None = None


def header_estimate(weight_map: dict[str, str] | None) -> dict[str, int]:
    """Bytes to ask for first from each shard the index names: its 8-byte length, a header of its tensors'
    entries (:data:`ENTRY_BYTES` each beyond the name) and :data:`SCALE_ROOM` per tensor after it; capped at
    :data:`FIRST_READ_CAP`, so that 32 shards read at once hold a bounded amount. Empty without an index."""
    if weight_map is None:
        return {}
    sizes: dict[str, int] = {}
    for tensor, shard in weight_map.items():
        sizes[shard] = sizes.get(shard, 8 + 4096) + len(tensor.encode()) + ENTRY_BYTES + SCALE_ROOM
    return {shard: min(size, FIRST_READ_CAP) for shard, size in sizes.items()}


def coalesce(spans: list[tuple[int, int]], gap: int = MERGE_GAP, cap: int = SPAN_CAP) -> list[tuple[int, int]]:
    """Sorted, non-overlapping ``(begin, end)`` byte spans merged into the ranges to request: across gaps under
    ``gap`` while the range stays within ``cap``, which bounds what one request holds in memory however densely
    a header places its scales (every 4,000 bytes across 400 MB is 25 ranges, not one). A span is never split,
    so a range holds whole scales."""
    merged: list[tuple[int, int]] = []
    for begin, end in spans:
        if merged and begin - merged[-1][1] < gap and end - merged[-1][0] <= cap:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    return merged


class HubShards:
    """Reads a repository's files at one commit by range requests, and counts the bytes that came."""

    network = True

    def __init__(self, address: str, repo_id: str, commit: str) -> None:
        from huggingface_hub import constants, hf_hub_url

        self.address = address
        self._url: Callable[[str], str] = lambda name: hf_hub_url(repo_id, name, revision=commit)
        self.cancelled = threading.Event()
        """Set when a read fails: the others give up at once (:class:`~.hub_client.Client`), so the check's one
        line comes without waiting for them."""
        self._client = Client(constants.HF_HUB_DOWNLOAD_TIMEOUT, self.cancelled)
        self._lock = threading.Lock()
        self.long_headers = threading.Lock()
        """Held while a header longer than :data:`FIRST_READ_CAP` is read and parsed: one at a time, since each may
        be as long as the reader accepts (100 MB)."""
        self.first_reads: dict[str, int] = {}
        """Bytes to ask for first from each shard (:func:`header_estimate`); :data:`FIRST_READ` for others."""
        self.bytes_fetched = 0
        self.file_sizes: dict[str, int] = {}
        """The size of each file read from, as the server reports it."""

    @property
    def bytes_total(self) -> int:
        """The size of the files read from: what ``bytes_fetched`` is a share of."""
        return sum(self.file_sizes.values())

    def label(self, name: str) -> str:
        return f"{self.address}/{name}"

    @contextmanager
    def progress(self, total: int) -> Iterator[Callable[[], None]]:
        """A progress bar over ``total`` shards, huggingface_hub's (its tqdm honours ``HF_HUB_DISABLE_PROGRESS_BARS``
        and ``disable_progress_bars()``), on stderr and only where stderr is a terminal, so that stdout (JSON)
        stays clean; cleared when done or failed, so that what is printed next starts on its own line."""
        from huggingface_hub.utils import tqdm

        progress_bar: Any = tqdm  # untyped in some huggingface_hub versions
        bar = progress_bar(
            total=total,
            unit="shard",
            desc=f"Reading {self.address}",
            file=sys.stderr,
            leave=False,
            disable=not _is_terminal(sys.stderr),
        )
        try:
            yield lambda: bar.update(1)
        finally:
            bar.close()

    def read_shard(self, file: str, select: ScaleSelector, *, values: bool) -> ShardRead:
        """The shard's header and the values of the scales ``select`` picks, in one range where the index's
        estimate holds them (:func:`header_estimate`), else in a second for the rest of the header and ranges
        merged by :func:`coalesce` for scales elsewhere. A failure cancels the check's other reads."""
        with self._cancelling():
            return self._read_shard(file, select, values=values)

    def _read_shard(self, file: str, select: ScaleSelector, *, values: bool) -> ShardRead:
        name = shard_name(file)
        first, size = self._get(name, 0, self.first_reads.get(name, FIRST_READ) - 1)
        with self._lock:
            self.file_sizes[name] = size
        length = header_length_of(file, first[:8], size)
        if len(first) < 8 + length:
            with self.long_headers:
                rest, _ = self._get(name, len(first), 8 + length + AFTER_HEADER - 1)
                first += rest
                header = parse_header(file, first[8 : 8 + length], size)
        else:
            header = parse_header(file, first[8 : 8 + length], size)
        indices = select(header)
        if not values or not indices:
            return ShardRead(header, indices, [None] * len(indices))
        start, held = header.data_start, len(first)
        spans = sorted(
            (max(start + header.begins[i], held), start + header.ends[i])
            for i in indices
            if header.ends[i] - header.begins[i] <= 8 and start + header.ends[i] > held
        )
        # Each range is fetched, its scales' bytes kept and the rest dropped, before the next: one range of at
        # most SPAN_CAP is held at a time. A scale that began inside the first range is kept from where it ended.
        pieces: dict[int, bytes] = {}
        k = 0
        for begin, end in coalesce(spans):
            data, _ = self._get(name, begin, end - 1)
            while k < len(spans) and spans[k][0] < end:
                at, stop = spans[k]
                pieces[at] = data[at - begin : stop - begin]
                k += 1

        def read(begin: int, end: int) -> bytes:
            """The bytes of a run of adjacent scales (of all the scales, where the first range held them all): from
            the first range, then from the pieces kept."""
            at, stop = start + begin, start + end
            found = first[at:stop]
            at = max(at, held)
            while at < stop:
                piece = pieces[at]
                found += piece
                at += len(piece)
            return found

        found = read_scalars(
            [header.dtypes[i] for i in indices],
            [header.begins[i] for i in indices],
            [header.ends[i] for i in indices],
            read,
            RANGE_GAP if not spans else 1,  # beyond the first range, only the scales' own bytes were kept
        )
        return ShardRead(header, indices, found)

    @contextmanager
    def _cancelling(self) -> Iterator[None]:
        """Set :attr:`cancelled` if the block fails: the first failure is the check's, the others' reads are given
        up."""
        try:
            yield
        except BaseException:
            self.cancelled.set()
            raise

    def read_json(self, name: str) -> dict[str, Any]:
        """A JSON file, whole (at most 256 MiB), parsed; a failure cancels the other reads."""
        with self._cancelling():
            return self._read_json(name)

    def _read_json(self, name: str) -> dict[str, Any]:
        where = self.label(name)
        body = self._client.fetch(self._url(name), where, {}, lambda response: MAX_JSON_BYTES, decoded=True)
        self._count(len(body))
        with self._lock:
            self.file_sizes[name] = len(body)
        return json_object(body, where, UNIQUE_KEYS.get(name))

    def _get(self, name: str, first: int, last: int) -> tuple[bytes, int]:
        """Bytes ``first``..``last`` (inclusive) of ``name``, or fewer at its end; and the file's size.

        The reply must be a 206 whose Content-Range starts at ``first`` and
        gives the file's size, not compressed, with exactly the bytes it says.
        """
        where = self.label(name)
        headers = {"Range": f"bytes={first}-{last}", "Accept-Encoding": "identity"}
        span: list[int] = []

        def limit(response: Reply) -> int:
            if response.status_code == 416:
                raise CheckpointError(where, "truncated: the file is empty")
            if response.status_code != 206:
                raise CheckpointError(
                    where, f"the server answered a range request with HTTP {response.status_code}, not 206"
                )
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise CheckpointError(where, f"the server sent a range {encoding}-encoded, where none was asked for")
            found = _content_range(response.headers.get("Content-Range", ""))
            if found is None:
                raise CheckpointError(where, "the server's reply has no Content-Range with the file's size")
            start, end, size = found
            if start != first or end != min(last, size - 1):
                raise CheckpointError(
                    where, f"the server sent bytes {start}-{end} of {size} where {first}-{last} were asked for"
                )
            span[:] = found
            return end - start + 1

        body = self._client.fetch(self._url(name), where, headers, limit, decoded=False)
        start, end, size = span
        self._count(len(body))
        if len(body) != end - start + 1:
            raise CheckpointError(where, f"the server sent {len(body)} bytes of the {end - start + 1} it announced")
        return body, size

    def _count(self, size: int) -> None:
        with self._lock:
            self.bytes_fetched += size


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def _content_range(header: str) -> tuple[int, int, int] | None:
    """(start, end, size) of ``bytes START-END/SIZE``, or None."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", header.strip())
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def _model_info(repo_id: str, revision: str | None, address: str) -> tuple[str, set[str]]:
    """The commit a revision names, and the repository's files at it, from the model-info endpoint.

    Asked for as ``HfApi.model_info`` asks, through huggingface_hub's session
    and token, but read and checked here, so that a reply of another shape is
    one line rather than an error inside huggingface_hub.
    """
    from huggingface_hub import constants

    url = f"{constants.ENDPOINT}/api/models/{repo_id}"
    if revision is not None:
        url += f"/revision/{quote(revision, safe='')}"
    client = Client(constants.HF_HUB_ETAG_TIMEOUT)
    body = client.fetch(url, address, {}, lambda response: MAX_JSON_BYTES, decoded=True)
    try:
        info = json_object(body, address)
    except CheckpointError as error:
        raise CheckpointError(address, f"the Hub's model-info reply is refused: {error.problem}") from None
    sha, siblings = info.get("sha"), info.get("siblings")
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
        raise CheckpointError(address, "the Hub's model-info reply names no commit (sha)")
    if not isinstance(siblings, list) or not all(
        isinstance(s, dict) and isinstance(s.get("rfilename"), str) for s in siblings
    ):
        raise CheckpointError(address, "the Hub's model-info reply has no list of files (siblings with rfilename)")
    return sha, {sibling["rfilename"] for sibling in siblings}


def _start_huggingface_hub(address: str) -> None:
    """Import huggingface_hub, which reads its settings as it is imported: a missing package, or a setting it
    refuses (``HF_ENDPOINT=http://[::1``), is one line."""
    try:
        import huggingface_hub.constants  # noqa: F401
        import huggingface_hub.utils  # noqa: F401
    except ImportError:
        raise CheckpointError(
            address, "checking a Hub repository needs huggingface_hub: pip install 'scalar-scales[hub]'"
        ) from None
    except Exception as error:
        raise CheckpointError(
            address, f"huggingface_hub refuses its settings ({type(error).__name__}: {error}); check HF_ENDPOINT"
        ) from None


def _open_cached(hub: HubAddress) -> OpenedCheckpoint:
    """The snapshot of the repository in huggingface_hub's cache, checked as a local folder, with the commit the
    cache's ``refs/`` name for the revision (or the revision, where it is a commit), and the Hub address, which a
    report names rather than the cache's folder.

    The snapshot is checked as it is: a shard its index names that is not
    cached is an error (``named in ... but missing``), but a file the Hub has
    and the snapshot lacks (a ``config.json`` left out by ``--include``) cannot
    be told offline, and the check goes on without it.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from scalar_scales.sources.local import open_local

    try:
        folder = Path(snapshot_download(hub.repo_id, revision=hub.revision, local_files_only=True))
    except LocalEntryNotFoundError:
        raise CheckpointError(
            hub.given,
            f"HF_HUB_OFFLINE is set and huggingface_hub's cache ({constants.HF_HUB_CACHE}) holds no snapshot of "
            f"it; unset HF_HUB_OFFLINE to check it over the network, or download it first (hf download "
            f"{hub.repo_id}" + (f" --revision {hub.revision}" if hub.revision else "") + ")",
        ) from None
    except Exception as error:
        raise CheckpointError(hub.given, f"huggingface_hub's cache cannot be read ({type(error).__name__})") from None
    commit = folder.name if _COMMIT.fullmatch(folder.name) else None
    return replace(open_local(folder), commit=commit, hub=hub)


def open_hub_checkpoint(address: str) -> OpenedCheckpoint:
    """The checkpoint at a Hub address (:func:`~.hub_address.parse_hub_address`), its parsed configs, and the
    reader of its files, all at the commit the revision names now; offline, the cached snapshot's.

    The address is read before huggingface_hub is imported, so that an
    address that is not the Hub's says so, installed or not.
    """
    hub = parse_hub_address(address)
    _start_huggingface_hub(address)
    from huggingface_hub import constants
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(hub.repo_id)
    except HFValidationError as error:
        raise CheckpointError(address, f"not a repository id huggingface_hub accepts: {error}") from None
    if constants.HF_HUB_OFFLINE:
        return _open_cached(hub)
    root = hub.canonical
    try:
        commit, siblings = _model_info(hub.repo_id, hub.revision, root)
    except CheckpointError as error:
        raise _with_subfolder_hint(error, hub) from None
    shards = HubShards(root, hub.repo_id, commit)
    wanted = [name for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME, INDEX_NAME) if name in siblings]
    pool = ThreadPoolExecutor(max_workers=max(1, len(wanted)), thread_name_prefix="scalar-scales-hub-json")
    try:
        documents = dict(zip(wanted, gather([pool.submit(shards.read_json, name) for name in wanted]), strict=True))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    config, modelopt_config = documents.get(CONFIG_NAME), documents.get(MODELOPT_CONFIG_NAME)
    names, weight_map = shard_names(siblings.__contains__, lambda: documents[INDEX_NAME], root, shards.label)
    shards.first_reads = header_estimate(weight_map)
    checkpoint = RemoteCheckpoint(
        root=root,
        files=tuple(map(shards.label, names)),
        config=shards.label(CONFIG_NAME) if config is not None else None,
        weight_map=weight_map,
        modelopt_config=shards.label(MODELOPT_CONFIG_NAME) if modelopt_config is not None else None,
    )
    return OpenedCheckpoint(checkpoint, config, shards, modelopt_config, commit, hub)


def _with_subfolder_hint(error: CheckpointError, hub: HubAddress) -> CheckpointError:
    """``error``, with a hint where a page's address names a subfolder: ``.../tree/main/subdir``, a browser's page
    for a folder of the repository, reads as the revision ``main/subdir``, which the Hub does not know. A
    checkpoint in a subfolder is not read remotely; downloading that folder is the way to check it."""
    revision = hub.revision
    if (
        revision is None
        or hub.given.startswith(HUB_PREFIX)
        or "/" not in revision
        or revision.startswith("refs/")
        or not error.problem.startswith("revision not found (HTTP 404)")
    ):
        return error
    branch, _, folder = revision.partition("/")
    return CheckpointError(
        error.path,
        f"{error.problem}; if {folder!r} is a folder of revision {branch!r}, a checkpoint in a subfolder is not "
        f"supported: download it (hf download {hub.repo_id} --revision {branch} --include '{folder}/*') and check "
        "the folder",
    )
