"""Check a checkpoint on the Hugging Face Hub without downloading it: ``hf://ORG/NAME[@REVISION]``.

Only what the checks need is fetched: the repository's file list (the
model-info endpoint), ``config.json`` and the index, each shard's header,
and the bytes of its global scales, all through HTTP range requests on the
files' resolve addresses. On a DeepSeek-V4-Flash-sized checkpoint that is
well under 1% of its bytes. No byte is fetched twice: scale bytes inside a
shard's first read are taken from it.

Requests go through ``huggingface_hub``, the optional ``hub`` extra, so its
endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or a saved login), offline
mode, timeouts (``HF_HUB_ETAG_TIMEOUT`` for the model info,
``HF_HUB_DOWNLOAD_TIMEOUT`` for files: 10 seconds each unless set),
repository-id rules and redirects behave as everywhere else it is used. It
is imported only here, and only when an ``hf://`` address is checked.

A server is not trusted. Every read is pinned to the commit the model info
names, so a push during a check cannot mix two commits. A range reply must
be 206, uncompressed, and hold exactly the bytes asked for, starting where
its Content-Range says; bodies are read with a bound, so memory stays
bounded whatever the server sends, and each request (connecting, its
redirects, headers and body together) must finish within
:data:`DEADLINE_FACTOR` times its timeout. Anything else (a malformed model
info, a short or long body, a hang) is one line naming the address, exit 2.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
    shard_name,
    shard_names,
)
from scalar_scales.sources.declaration import MODELOPT_CONFIG_NAME

__all__ = ["HUB_PREFIX", "HubShards", "RemoteCheckpoint", "is_hub_address", "open_hub_checkpoint"]

HUB_PREFIX = "hf://"
FIRST_READ = 64 * 1024
"""Bytes asked for first from each shard: the length and, for most shards, the whole header, in one request."""
RANGE_GAP = 4096
"""Scale byte ranges closer than this are fetched as one request."""
DEADLINE_FACTOR = 6
"""A request must end within this many times its timeout, however slowly the server trickles its bytes."""
_CHUNK = 1 << 16
_COMMIT = re.compile(r"[0-9a-f]{40}")
_ADDRESS = re.compile(r"hf://(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>\S+))?")


def is_hub_address(path: str) -> bool:
    return path.startswith(HUB_PREFIX)


@dataclass(frozen=True)
class RemoteCheckpoint:
    """A Hub repository's checkpoint: the same fields as a local :class:`~scalar_scales.sources.local.Checkpoint`,
    with the addresses of its files for paths."""

    root: str
    files: tuple[str, ...]
    config: str | None
    weight_map: dict[str, str] | None
    modelopt_config: str | None = None


class _Client:
    """GET requests through huggingface_hub's session, each with a timeout, a deadline and a bound on its body."""

    def __init__(self, timeout: float) -> None:
        from huggingface_hub.utils import build_hf_headers, get_session

        self._session = get_session()
        self._headers = build_hf_headers()
        self.timeout = timeout
        self.deadline = DEADLINE_FACTOR * timeout

    def fetch(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Any], int], *, decoded: bool
    ) -> bytes:
        """The body of the reply to a GET, whole within :attr:`deadline` (connecting, redirects, headers and
        body together), or a one-line :class:`CheckpointError` naming ``where``.

        ``limit(response)`` checks the reply's status and headers and says how
        many bytes its body may hold (more is refused); ``decoded``: the body as
        the server's Content-Encoding inflates it, else the bytes as sent. A
        416 (a range past the end of the file) is left to ``limit``.

        The request runs in a thread of its own, and this one waits for it
        until the deadline: an httpx timeout bounds each wait for the socket,
        not the request, so a server that trickles a byte at a time would
        hold the request for as long as it likes. A request past the
        deadline is left to end in its (daemon) thread, whose socket's own
        timeout still ends it, or the process's exit; what it reads is
        bounded by ``limit``.
        """
        outcome: queue.SimpleQueue[bytes | BaseException] = queue.SimpleQueue()

        def request() -> None:
            try:
                outcome.put(self._request(url, where, headers, limit, decoded))
            except BaseException as error:  # handed to the waiting thread, which raises it
                outcome.put(error)

        threading.Thread(target=request, name="scalar-scales-hub-request", daemon=True).start()
        try:
            found = outcome.get(timeout=self.deadline)
        except queue.Empty:
            raise CheckpointError(where, f"the server took over {self.deadline:g} s to reply") from None
        if isinstance(found, BaseException):
            raise found
        return found

    def _request(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Any], int], decoded: bool
    ) -> bytes:
        with (
            _hub_errors(where),
            self._session.stream("GET", url, headers={**self._headers, **headers}, timeout=self.timeout) as response,
        ):
            if response.status_code >= 400 and response.status_code != 416:
                _read(response, where, 1 << 20, decoded=True)
                from huggingface_hub.utils import hf_raise_for_status

                hf_raise_for_status(response)
            return _read(response, where, limit(response), decoded=decoded)


def _read(response: Any, where: str, limit: int, *, decoded: bool) -> bytes:
    """The body, at most ``limit`` bytes (more is refused)."""
    chunks, size = [], 0
    stream = response.iter_bytes(_CHUNK) if decoded else response.iter_raw(_CHUNK)
    for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise CheckpointError(where, f"the server sent more than the {limit} bytes asked for")
        chunks.append(chunk)
    return b"".join(chunks)


class HubShards:
    """Reads a repository's files at one commit by range requests, and counts the bytes that came."""

    network = True

    def __init__(self, address: str, repo_id: str, commit: str) -> None:
        from huggingface_hub import constants, hf_hub_url

        self.address = address
        self.commit = commit
        self._url: Callable[[str], str] = lambda name: hf_hub_url(repo_id, name, revision=commit)
        self._client = _Client(constants.HF_HUB_DOWNLOAD_TIMEOUT)
        self._lock = threading.Lock()
        self.bytes_fetched = 0
        self.file_sizes: dict[str, int] = {}
        """The size of each file read from, as the server reports it."""

    @property
    def bytes_total(self) -> int:
        """The size of the files read from: what ``bytes_fetched`` is a share of."""
        return sum(self.file_sizes.values())

    def label(self, name: str) -> str:
        return f"{self.address}/{name}"

    def read_shard(self, file: str, select: ScaleSelector, *, values: bool) -> ShardRead:
        """The shard's header from its first range (a second where the header is longer), and the values of the
        scales ``select`` picks, taken from that first range where they lie inside it."""
        name = shard_name(file)
        first, size = self._get(name, 0, FIRST_READ - 1)
        with self._lock:
            self.file_sizes[name] = size
        length = header_length_of(file, first[:8], size)
        raw = first[8 : 8 + length]
        if len(raw) < length:
            rest, _ = self._get(name, 8 + len(raw), 8 + length - 1)
            raw += rest
        header = parse_header(file, raw, size)
        indices = select(header)
        if not values or not indices:
            return ShardRead(header, indices, [None] * len(indices))

        def read(begin: int, end: int) -> bytes:
            at, stop = header.data_start + begin, header.data_start + end
            return first[at:stop] if stop <= len(first) else self._get(name, at, stop - 1)[0]

        found = read_scalars(
            [header.dtypes[i] for i in indices],
            [header.begins[i] for i in indices],
            [header.ends[i] for i in indices],
            read,
            RANGE_GAP,
        )
        return ShardRead(header, indices, found)

    def read_json(self, name: str) -> dict[str, Any]:
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

        def limit(response: Any) -> int:
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
            span.extend(found)
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


def _content_range(header: str) -> tuple[int, int, int] | None:
    """(start, end, size) of ``bytes START-END/SIZE``, or None."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", header.strip())
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


@contextmanager
def _hub_errors(where: str) -> Iterator[None]:
    """Turn whatever ``huggingface_hub``, the network and a server's reply raise into a one-line
    :class:`CheckpointError`."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(where, _problem(error)) from None


def _problem(error: Exception) -> str:
    from huggingface_hub import errors

    status = getattr(getattr(error, "response", None), "status_code", None)
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, errors.OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set, and a remote check needs the network"
    if isinstance(error, errors.GatedRepoError):
        return f"the repository is gated and this token has no access (HTTP {status})"
    if isinstance(error, errors.RepositoryNotFoundError):
        return f"repository not found, or private and this token has no access (HTTP {status})"
    if isinstance(error, errors.RevisionNotFoundError):
        return f"revision not found (HTTP {status})"
    if isinstance(error, errors.EntryNotFoundError):
        return f"file not found (HTTP {status})"
    if isinstance(error, errors.HfHubHTTPError):
        return f"HTTP {status}: {first_line}"
    if "Timeout" in type(error).__name__:
        return f"the Hub did not answer in time ({first_line or 'timed out'})"
    if isinstance(error, OSError) or type(error).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore"}:
        return f"cannot reach the Hub: {first_line}"
    return f"unexpected reply ({type(error).__name__}: {first_line})"


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
    client = _Client(constants.HF_HUB_ETAG_TIMEOUT)
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


def open_hub_checkpoint(address: str) -> OpenedCheckpoint:
    """The checkpoint at ``hf://ORG/NAME[@REVISION]``, its parsed config, and the reader of its files, all at the
    commit the revision names now."""
    match = _ADDRESS.fullmatch(address)
    if match is None:
        raise CheckpointError(address, "not a Hub address; the form is hf://ORG/NAME or hf://ORG/NAME@REVISION")
    _start_huggingface_hub(address)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo_id, revision = match["repo"], match["revision"]
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise CheckpointError(address, f"not a repository id huggingface_hub accepts: {error}") from None
    commit, siblings = _model_info(repo_id, revision, address)
    shards = HubShards(address, repo_id, commit)
    config, modelopt_config = (
        shards.read_json(name) if name in siblings else None for name in (CONFIG_NAME, MODELOPT_CONFIG_NAME)
    )
    names, weight_map = shard_names(siblings.__contains__, lambda: shards.read_json(INDEX_NAME), address, shards.label)
    checkpoint = RemoteCheckpoint(
        root=address,
        files=tuple(map(shards.label, names)),
        config=shards.label(CONFIG_NAME) if config is not None else None,
        weight_map=weight_map,
        modelopt_config=shards.label(MODELOPT_CONFIG_NAME) if modelopt_config is not None else None,
    )
    return OpenedCheckpoint(checkpoint, config, shards, modelopt_config, commit)
