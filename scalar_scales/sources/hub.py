"""Check a checkpoint on the Hugging Face Hub without downloading it: ``hf://ORG/NAME[@REVISION]``, or the
address of its page (:mod:`.hub_address`).

Only what the checks need is fetched: the repository's file list (the
model-info endpoint), then ``config.json`` and the index together, then each
shard's header and the bytes of its global scales, all through HTTP range
requests on the files' resolve addresses, :data:`READERS` shards at once.
On a DeepSeek-V4-Flash-sized checkpoint that is well under 1% of its bytes.
Every request of a check is made by one mechanism (:mod:`.hub_client`):
huggingface_hub's async session, its requests tasks of one event loop (one
for opening the repository, one for reading its shards, whose headers one
thread beside it parses), each with its own deadline, and huggingface_hub's
rules for retries.

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
local folder, at the commit the cache's ``refs/`` name, and its files that are
not links to the cache's blobs are named as changed locally
(:func:`_changed_locally`).

Settings are checked before huggingface_hub is imported, as it reads them
there and would fail with an exception, or take one for what it cannot be:
``HF_ENDPOINT`` must be an ``http(s)://`` address with a host and a valid
port, and each timeout a whole number of seconds up to :data:`MAX_TIMEOUT`.
Each refusal is one line naming the setting, exit 2 (the proxies and
certificates its HTTP client reads: :mod:`.hub_client`). The cache is
checked before it is read (:func:`_cached_snapshot`): the ``refs/`` file must
hold a commit, the snapshot must be that commit's folder in the repository's
``snapshots/``, and each of its files must lie in the cache.

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

import json
import os
import re
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from scalar_scales.environment import others_setting
from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, header_length_of, parse_header
from scalar_scales.files.json_document import MAX_JSON_BYTES, json_object
from scalar_scales.files.scalars import read_scalars
from scalar_scales.shell import command
from scalar_scales.sources.checkpoint import (
    CONFIG_NAME,
    INDEX_NAMES,
    UNIQUE_KEYS,
    OpenedCheckpoint,
    ScaleSelector,
    ShardRead,
    shard_name,
    shard_names,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME
from scalar_scales.sources.hub_address import HUB_PREFIX, HubAddress, parse_hub_address
from scalar_scales.sources.hub_client import Client, Reply, run, together

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "READERS",
    "HubShards",
    "RemoteCheckpoint",
    "coalesce",
    "header_estimate",
    "open_hub_checkpoint",
]

READERS = 32
"""Shards read at once: at 100 ms a round trip, 16 at a time took 0.46x to 0.54x of ``get_safetensors_metadata``'s
time, 32 at a time 0.42x and 0.43x (``benchmarks/check_hub.py``)."""
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
(:meth:`HubShards.read_shards`)."""
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
MAX_TIMEOUT = 1_000_000
"""The longest ``HF_HUB_ETAG_TIMEOUT`` or ``HF_HUB_DOWNLOAD_TIMEOUT`` taken, in seconds (11 days): a request's deadline
is :data:`~.hub_client.DEADLINE_FACTOR` times it, and the clocks it is waited on hold no more than about 9.2e9 s."""
_TIMEOUTS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REF_BYTES = 4096
"""The most of a ``refs/`` file read: a commit is 40 bytes, and a link to ``/dev/zero`` is never read to its end."""


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
    """Reads a repository's files at one commit by range requests, and counts the bytes that came.

    Its reads are made on the event loop of a :func:`~.hub_client.run`, each
    with the client of that run: a checkpoint's shards together
    (:meth:`read_shards`), at most :data:`READERS` at once.
    """

    def __init__(self, address: str, repo_id: str, commit: str) -> None:
        from huggingface_hub import constants, hf_hub_url

        self.address = address
        self._url: Callable[[str], str] = lambda name: hf_hub_url(repo_id, name, revision=commit)
        self._timeout = float(constants.HF_HUB_DOWNLOAD_TIMEOUT)
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
    def _progress(self, total: int) -> Iterator[Callable[[], None]]:
        """A progress bar over ``total`` shards, huggingface_hub's, on stderr and only where stderr is a terminal, so
        that stdout (JSON) stays clean, and progress bars are not disabled (``HF_HUB_DISABLE_PROGRESS_BARS``,
        ``disable_progress_bars()``); cleared when done or failed, so that what is printed next starts on its own
        line. A bar not shown is not made: a disabled tqdm bar starts tqdm's monitor thread and never ends it."""
        from huggingface_hub.utils import are_progress_bars_disabled, tqdm

        if are_progress_bars_disabled() or not _is_terminal(sys.stderr):
            yield _nothing
            return
        progress_bar: Any = tqdm  # untyped in some huggingface_hub versions
        bar = progress_bar(total=total, unit="shard", desc=f"Reading {self.address}", file=sys.stderr, leave=False)
        try:
            yield lambda: bar.update(1)
        finally:
            bar.close()

    def read_shard(self, file: str, select: ScaleSelector, *, values: bool) -> ShardRead:
        """One shard, as :meth:`read_shards` reads each."""
        return self.read_shards([file], select, values=values)[0]

    def read_shards(self, files: Sequence[str], select: ScaleSelector, *, values: bool) -> list[ShardRead]:
        """Each shard's header and the values of the scales ``select`` picks, in order: :data:`READERS` shards at
        once, on one event loop, with huggingface_hub's progress bar where there are several (cleared before an
        error is raised, so the error starts on its own line). The first failure ends the others' reads where they
        wait, and reads not begun are not, so the error does not wait for every other read to reach its
        deadline.

        Headers are parsed, and their scales picked, by one thread beside the
        loop, one shard after another, so that the loop goes on with the
        others' requests meanwhile rather than each waiting for every header
        parsed before it: ``benchmarks/check_hub.py``'s V4-Flash-shaped
        checkpoint at 100 ms a request took 1.85 s so, 2.04 s parsed on the
        loop. The thread ends with the reads, whichever way they end.
        """
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        async def read_all(client: Client) -> list[ShardRead]:
            loop = asyncio.get_running_loop()
            long_headers = asyncio.Lock()

            async def parsed(file: str, data: bytes, size: int) -> tuple[SafetensorsHeader, list[int]]:
                return await loop.run_in_executor(parser, _parsed, file, data, size, select)

            progress: AbstractContextManager[Callable[[], None]] = (
                self._progress(len(files)) if len(files) > 1 else nullcontext(_nothing)
            )
            with progress as advance:

                async def read(file: str) -> ShardRead:
                    found = await self._read_shard(client, long_headers, parsed, file, values=values)
                    advance()
                    return found

                return await together([read(file) for file in files], READERS)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalar-scales-hub-parse") as parser:
            return run(read_all, where=self.address)

    async def _read_shard(
        self,
        client: Client,
        long_headers: asyncio.Lock,
        parsed: Callable[[str, bytes, int], Awaitable[tuple[SafetensorsHeader, list[int]]]],
        file: str,
        *,
        values: bool,
    ) -> ShardRead:
        """The shard's header and the values of the scales picked from it (``parsed``: the header of the bytes given,
        and the entries picked), in one range where the index's estimate holds them (:func:`header_estimate`), else
        in a second for the rest of the header and ranges merged by :func:`coalesce` for scales elsewhere.
        ``long_headers`` is held while a header longer than :data:`FIRST_READ_CAP` is read and parsed: one at a
        time, since each may be as long as the reader accepts (100 MB)."""
        name = shard_name(file)
        first, size = await self._get(client, name, 0, self.first_reads.get(name, FIRST_READ) - 1)
        self.file_sizes[name] = size
        length = header_length_of(file, first[:8], size)
        if len(first) < 8 + length:
            async with long_headers:
                rest, _ = await self._get(client, name, len(first), 8 + length + AFTER_HEADER - 1)
                first += rest
                header, indices = await parsed(file, first[8 : 8 + length], size)
        else:
            header, indices = await parsed(file, first[8 : 8 + length], size)
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
            data, _ = await self._get(client, name, begin, end - 1)
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
            header,
            indices,
            read,
            RANGE_GAP if not spans else 1,  # beyond the first range, only the scales' own bytes were kept
        )
        return ShardRead(header, indices, found)

    async def read_json(self, client: Client, name: str) -> dict[str, Any]:
        """A JSON file, whole (at most 256 MiB), parsed."""
        where = self.label(name)
        body = await client.fetch(
            self._url(name), where, {}, lambda response: MAX_JSON_BYTES, decoded=True, timeout=self._timeout
        )
        self.bytes_fetched += len(body)
        self.file_sizes[name] = len(body)
        return json_object(body, where, UNIQUE_KEYS.get(name))

    async def _get(self, client: Client, name: str, first: int, last: int) -> tuple[bytes, int]:
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

        body = await client.fetch(self._url(name), where, headers, limit, decoded=False, timeout=self._timeout)
        start, end, size = span
        self.bytes_fetched += len(body)
        if len(body) != end - start + 1:
            raise CheckpointError(where, f"the server sent {len(body)} bytes of the {end - start + 1} it announced")
        return body, size


def _parsed(file: str, data: bytes, size: int, select: ScaleSelector) -> tuple[SafetensorsHeader, list[int]]:
    """A shard's header, parsed from ``data``, and the entries ``select`` picks from it."""
    header = parse_header(file, data, size)
    return header, select(header)


def _nothing() -> None:
    """No progress shown: a lone shard, or no bar."""


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def _content_range(header: str) -> tuple[int, int, int] | None:
    """(start, end, size) of ``bytes START-END/SIZE``, or None."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", header.strip())
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


async def _model_info(client: Client, repo_id: str, revision: str | None, address: str) -> tuple[str, set[str]]:
    """The commit a revision names, and the repository's files at it, from the model-info endpoint.

    Asked for as ``HfApi.model_info`` asks, through huggingface_hub's session
    and token, but read and checked here, so that a reply of another shape is
    one line rather than an error inside huggingface_hub.
    """
    from huggingface_hub import constants

    url = f"{constants.ENDPOINT}/api/models/{repo_id}"
    if revision is not None:
        url += f"/revision/{quote(revision, safe='')}"
    body = await client.fetch(
        url, address, {}, lambda response: MAX_JSON_BYTES, decoded=True, timeout=float(constants.HF_HUB_ETAG_TIMEOUT)
    )
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


def _check_settings() -> None:
    """Refuse, in one line naming it, a setting huggingface_hub reads as it is imported and would fail on there or
    at its first request (an ``HF_ENDPOINT`` port of 99999, a timeout of ``abc``), or would take for what it cannot
    be (a timeout of -1 s, or of 10**23 s). Read from the environment as huggingface_hub reads it, before it is."""
    endpoint = others_setting("HF_ENDPOINT")
    problem = None if endpoint is None else _endpoint_problem(endpoint)
    if endpoint is not None and problem is not None:
        raise CheckpointError("HF_ENDPOINT", f"{_shown(endpoint)} is not an address huggingface_hub can use: {problem}")
    for name in _TIMEOUTS:
        value = others_setting(name)
        if value is None:
            continue
        try:
            seconds = int(value)  # as huggingface_hub reads it; 0 is its default, 10 s
        except ValueError:
            seconds = -1
        if not 0 <= seconds <= MAX_TIMEOUT:
            raise CheckpointError(
                name,
                f"{_shown(value)} is not a timeout: a whole number of seconds up to {MAX_TIMEOUT} is "
                "(0: huggingface_hub's default, 10)",
            )


def _endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is no address huggingface_hub can send requests to; None where it is one."""
    if not endpoint.isprintable() or any(c.isspace() for c in endpoint):
        return "it holds a space or a control character"
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError as error:
        return "its port is not a number from 1 to 65535" if "Port" in str(error) else f"it is not a URL ({error})"
    if parts.scheme.lower() not in ("http", "https"):
        return "it is not an http:// or https:// address"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    return None


def _shown(value: str) -> str:
    """A setting's value as a refusal quotes it: whole, unless it is long."""
    return repr(value if len(value) <= 80 else value[:80] + "...")


def _start_huggingface_hub(address: str) -> None:
    """Import huggingface_hub and what of it a check uses, which read their settings as they are imported, once
    the settings are checked (:func:`_check_settings`): a missing package, or a setting it still refuses, is one
    line."""
    _check_settings()
    try:
        import huggingface_hub.constants
        import huggingface_hub.errors  # noqa: F401
        from huggingface_hub import hf_hub_url, snapshot_download  # noqa: F401
        from huggingface_hub.utils import (  # noqa: F401
            are_progress_bars_disabled,
            build_hf_headers,
            get_async_session,
            hf_raise_for_status,
            parse_ratelimit_headers,
            tqdm,
        )
    except ImportError:
        raise CheckpointError(
            address, "checking a Hub repository needs huggingface_hub: pip install 'scalar-scales[hub]'"
        ) from None
    except Exception as error:
        raise CheckpointError(
            address, f"huggingface_hub refuses its settings ({type(error).__name__}: {_first_line(error)})"
        ) from None


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error).strip() else type(error).__name__


def _open_cached(hub: HubAddress) -> OpenedCheckpoint:
    """The snapshot of the repository in huggingface_hub's cache, checked as a local folder, with the commit the
    cache's ``refs/`` name for the revision (or the revision, where it is a commit), and the Hub address, which a
    report names rather than the cache's folder.

    The snapshot is checked as it is: a shard its index names that is not
    cached is an error (``named in ... but missing``), but a file the Hub has
    and the snapshot lacks (a ``config.json`` left out by ``--include``) cannot
    be told offline, and the check goes on without it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from scalar_scales.sources.local import open_local

    snapshot, commit = _cached_snapshot(hub)
    try:
        # huggingface_hub's own look-up, at the commit found: it also refuses a snapshot its record of the
        # commit's files says is incomplete.
        found = Path(snapshot_download(hub.repo_id, revision=commit, local_files_only=True))
    except LocalEntryNotFoundError as error:
        raise CheckpointError(
            hub.given,
            f"huggingface_hub refuses its cached snapshot {snapshot} ({type(error).__name__}: {_first_line(error)})",
        ) from None
    except Exception as error:
        raise CheckpointError(hub.given, f"huggingface_hub's cache cannot be read ({type(error).__name__})") from None
    if os.path.realpath(found) != os.path.realpath(snapshot):
        raise CheckpointError(hub.given, f"huggingface_hub finds its snapshot at {found}, not at {snapshot}")
    changed = _changed_locally(hub, snapshot)
    return replace(open_local(snapshot), commit=commit, hub=hub, changed_locally=changed)


def _changed_locally(hub: HubAddress, snapshot: Path) -> tuple[str, ...]:
    """The names of the snapshot's files that are not links to the repository's blobs, in name order.

    huggingface_hub caches each file of a commit as a blob named by its
    content's hash, and the snapshot links to it; ``migrate --materialize``
    replaces a link with an edited file of its own, which is no longer the
    commit's file, though the snapshot still bears the commit's name. A file
    of its own is found by what it is (not a link into ``blobs/``), without
    reading it: a blob edited in place through its link is not found (its
    hash is its name, and only reading it whole would tell). Where the file
    system holds no links (Windows without Developer Mode), huggingface_hub
    writes files of their own too, and each is named: what the check read
    cannot be told to be the commit's there either.
    """
    blobs = os.path.realpath(snapshot.parent.parent / "blobs")
    try:
        with os.scandir(snapshot) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        raise CheckpointError(hub.given, f"the cached snapshot {snapshot} cannot be read: {error.strerror}") from None
    return tuple(
        entry.name
        for entry in entries
        if entry.is_file() and not (entry.is_symlink() and os.path.dirname(os.path.realpath(entry.path)) == blobs)
    )


def _cached_snapshot(hub: HubAddress) -> tuple[Path, str]:
    """The folder of the repository's snapshot in huggingface_hub's cache, and its commit; each name the cache holds
    checked before it is followed, so that what is checked is that repository's snapshot, or nothing.

    The revision's ``refs/`` file (``refs/main``, ``refs/refs/pr/1``) must be a
    file that holds a commit, 40 hexadecimal digits, as huggingface_hub writes
    it; the snapshot, ``snapshots/COMMIT``, a folder there (a link to another of
    that repository's snapshots is one); and each of its files a file of the
    cache: a link out of it (to ``/etc``, another checkout) is not what the Hub
    holds at that commit. The revision holds no ``..`` (:mod:`.hub_address`).
    """
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    if cache.exists() and not cache.is_dir():
        named = [name for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE") if others_setting(name) is not None]
        setting = named[0] if named else "HF_HUB_CACHE"
        raise CheckpointError(setting, f"huggingface_hub's cache, {cache}, is not a folder")
    repository = cache / f"models--{hub.repo_id.replace('/', '--')}"
    revision = hub.revision or "main"
    commit = revision if _COMMIT.fullmatch(revision) else _cached_ref(hub, repository / "refs" / revision)
    snapshots = repository / "snapshots"
    snapshot = snapshots / (commit or "")
    if commit is None or not os.path.lexists(snapshot):
        raise CheckpointError(
            hub.given,
            f"HF_HUB_OFFLINE is set and huggingface_hub's cache ({constants.HF_HUB_CACHE}) holds no snapshot of "
            "it; unset HF_HUB_OFFLINE to check it over the network, or download it first ("
            + command("hf", "download", hub.repo_id, *(["--revision", hub.revision] if hub.revision else []))
            + ")",
        )
    real = os.path.realpath(snapshot)
    if os.path.dirname(real) != os.path.realpath(snapshots):
        raise CheckpointError(
            hub.given, f"the cached snapshot {snapshot} is a link to {real}, out of the repository's {snapshots}"
        )
    if not os.path.isdir(real):
        raise CheckpointError(hub.given, f"the cached snapshot {snapshot} is not a folder")
    inside = {os.path.realpath(folder) for folder in (cache, repository / "blobs", snapshot)}
    try:
        with os.scandir(snapshot) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        raise CheckpointError(hub.given, f"the cached snapshot {snapshot} cannot be read: {error.strerror}") from None
    for entry in entries:
        target = os.path.realpath(entry.path)
        if not any(target == folder or target.startswith(folder.rstrip(os.sep) + os.sep) for folder in inside):
            raise CheckpointError(
                hub.given,
                f"the cached snapshot's {entry.name} is a link to {target}, out of huggingface_hub's cache ({cache})",
            )
    return snapshot, commit


def _cached_ref(hub: HubAddress, ref: Path) -> str | None:
    """The commit the cache's ``refs/`` file ``ref`` names; None where there is none (nothing cached)."""
    try:
        if not stat.S_ISREG(os.stat(ref).st_mode):
            raise CheckpointError(hub.given, f"huggingface_hub's cache names the revision in {ref}, not a file")
        with open(ref, "rb") as file:
            held = file.read(_REF_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CheckpointError(hub.given, f"huggingface_hub's cache cannot be read: {ref}: {error.strerror}") from None
    text = held.decode("utf-8", "backslashreplace")
    if not _COMMIT.fullmatch(text):
        shown = repr(text if len(text) <= 60 else text[:60] + "...")
        raise CheckpointError(
            hub.given, f"{ref}, in huggingface_hub's cache, holds {shown}, not a commit (40 hexadecimal digits)"
        )
    return text


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

    async def opening(client: Client) -> tuple[str, set[str], HubShards, dict[str, dict[str, Any]]]:
        """The commit and files model info names, then the configs and the index, together, at that commit."""
        try:
            commit, siblings = await _model_info(client, hub.repo_id, hub.revision, root)
        except CheckpointError as error:
            raise _with_subfolder_hint(error, hub) from None
        shards = HubShards(root, hub.repo_id, commit)
        wanted = [name for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME, *INDEX_NAMES) if name in siblings]
        found = await together([shards.read_json(client, name) for name in wanted])
        return commit, siblings, shards, dict(zip(wanted, found, strict=True))

    commit, siblings, shards, documents = run(opening, where=root)
    config, modelopt_config = documents.get(CONFIG_NAME), documents.get(MODELOPT_CONFIG_NAME)
    names, weight_map = shard_names(siblings.__contains__, documents.__getitem__, root, shards.label)
    shards.first_reads = header_estimate(weight_map)
    checkpoint = RemoteCheckpoint(
        root=root,
        files=tuple(map(shards.label, names)),
        config=shards.label(CONFIG_NAME) if config is not None else None,
        weight_map=weight_map,
        modelopt_config=shards.label(MODELOPT_CONFIG_NAME) if modelopt_config is not None else None,
    )
    return OpenedCheckpoint(checkpoint, config, shards, modelopt_config, commit, hub)


MAX_LISTED = 10_000
"""The most models ``hf://ORG`` checks: more is refused, in one line, rather than read on without end."""


def author_models(address: str, author: str) -> list[str]:
    """The ``hf://ORG/NAME`` address of each model of ``author`` (``hf://ORG``: a user or an organization), as the
    Hub lists them (``HfApi.list_models(author=...)``: its ``/api/models`` endpoint, page after page by each
    reply's ``Link`` header, through huggingface_hub's session and token), in the Hub's order.

    A reply is held to what a listing is: a JSON array of objects each with
    an ``id`` of the author's; a next page on the endpoint's own origin (the
    token goes with each request) that no page named before, each model
    once, and at most :data:`MAX_LISTED` models. Any other is one line.
    Offline there is no listing to read.
    """
    _start_huggingface_hub(address)
    from huggingface_hub import constants
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(f"{author}/x")
    except HFValidationError as error:
        raise CheckpointError(address, f"not a user or organization name huggingface_hub accepts: {error}") from None
    if constants.HF_HUB_OFFLINE:
        raise CheckpointError(address, "listing a user's or an organization's models needs the Hub (HF_HUB_OFFLINE)")
    endpoint = constants.ENDPOINT.rstrip("/")
    origin = urlsplit(endpoint)

    async def listing(client: Client) -> list[str]:
        found: list[str] = []
        url: str | None = f"{endpoint}/api/models?author={quote(author, safe='')}"
        following: list[str | None] = [None]
        """The next page the last reply's ``Link`` header named."""

        def limit(response: Reply) -> int:
            following[0] = response.links.get("next", {}).get("url")  # as huggingface_hub's paginate follows it
            return MAX_JSON_BYTES

        pages: set[str] = set()
        while url is not None:
            if url in pages:
                raise CheckpointError(address, f"the Hub's listing names a page it gave already: {_shown(url)}")
            pages.add(url)
            following[0] = None
            timeout = float(constants.HF_HUB_ETAG_TIMEOUT)
            found += _listed_ids(
                await client.fetch(url, address, {}, limit, decoded=True, timeout=timeout), address, author
            )
            if len(set(found)) < len(found):
                raise CheckpointError(address, "the Hub's listing names a model twice")
            if len(found) > MAX_LISTED:
                raise CheckpointError(address, f"the Hub lists more than {MAX_LISTED} models of {author}; check fewer")
            url = following[0]
            if url is not None and urlsplit(url)[:2] != origin[:2]:
                raise CheckpointError(address, f"the Hub's listing names its next page on another host: {_shown(url)}")
        return found

    return [HUB_PREFIX + repo_id for repo_id in run(listing, where=address)]


def _listed_ids(body: bytes, address: str, author: str) -> list[str]:
    """The repository ids of one page of a listing of ``author``'s models, or the one line that refuses it."""
    try:
        page = json.loads(body)
    except (ValueError, RecursionError):
        raise CheckpointError(address, "the Hub's listing of models is not JSON") from None
    if not isinstance(page, list) or not all(
        isinstance(item, dict) and isinstance(item.get("id"), str) for item in page
    ):
        raise CheckpointError(address, "the Hub's listing of models is not a list of models, each with an id")
    ids = [item["id"] for item in page]
    if stranger := next((repo_id for repo_id in ids if not _of_author(repo_id, author)), None):
        raise CheckpointError(address, f"the Hub's listing of {author}'s models names {_shown(stranger)}")
    return ids


def _of_author(repo_id: str, author: str) -> bool:
    """``repo_id`` is a repository id huggingface_hub accepts (no revision, no path), of ``author`` (whose name an
    account's differs from only in case)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return False
    owner, slash, _ = repo_id.partition("/")
    return bool(slash) and owner.lower() == author.lower()


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
    download = command("hf", "download", hub.repo_id, "--revision", branch, "--include", f"{folder}/*")
    return CheckpointError(
        error.path,
        f"{error.problem}; if {folder!r} is a folder of revision {branch!r}, a checkpoint in a subfolder is not "
        f"supported: download it ({download}) and check the folder",
    )
