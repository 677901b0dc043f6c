"""Check a checkpoint on the Hugging Face Hub without downloading it: ``hf://ORG/NAME[@REVISION]``.

Only what the checks need is fetched: the repository's file list (the
model-info endpoint), ``config.json`` and the index, each shard's header,
and the bytes of its global scales, all through HTTP range requests on the
files' resolve addresses. On a DeepSeek-V4-Flash-sized checkpoint that is
well under 1% of its bytes.

Requests go through ``huggingface_hub``, the optional ``hub`` extra, so its
endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or a saved login), offline
mode and redirects behave as everywhere else it is used. It is imported
only here, and only when an ``hf://`` address is checked.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scalar_scales.errors import CheckpointError
from scalar_scales.files.header import SafetensorsHeader, header_length_of, parse_header
from scalar_scales.files.json_document import json_object
from scalar_scales.files.scalars import decode_scalar
from scalar_scales.sources.checkpoint import CONFIG_NAME, INDEX_NAME, OpenedCheckpoint, shard_name, shard_names

__all__ = ["HUB_PREFIX", "HubShards", "RemoteCheckpoint", "is_hub_address", "open_hub_checkpoint"]

HUB_PREFIX = "hf://"
FIRST_READ = 64 * 1024
"""Bytes asked for first from each shard: the length and, for most shards, the whole header, in one request."""
RANGE_GAP = 4096
"""Scale byte ranges closer than this are fetched as one request."""

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


class HubShards:
    """Reads a repository's files by range requests, and counts the bytes that came."""

    network = True

    def __init__(self, address: str, repo_id: str, revision: str | None) -> None:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session

        self.address = address
        self._url = lambda name: hf_hub_url(repo_id, name, revision=revision)
        self._headers = build_hf_headers()
        self._session = get_session()
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

    def read_header(self, file: str) -> SafetensorsHeader:
        name = shard_name(file)
        first, size = self._get(name, 0, FIRST_READ - 1)
        self.file_sizes[name] = size
        length = header_length_of(file, first[:8], size)
        raw = first[8 : 8 + length]
        if len(raw) < length:
            rest, _ = self._get(name, 8 + len(raw), 8 + length - 1)
            raw += rest
        return parse_header(file, raw, size)

    def read_values(self, header: SafetensorsHeader, indices: list[int]) -> list[float | None]:
        name = shard_name(header.path)
        values: list[float | None] = [None] * len(indices)
        order = sorted(range(len(indices)), key=lambda k: header.begins[indices[k]])
        for span in _spans([(header.begins[indices[k]], header.ends[indices[k]]) for k in order], order):
            begin, end, members = span
            data, _ = self._get(name, header.data_start + begin, header.data_start + end - 1)
            for k in members:
                i = indices[k]
                values[k] = decode_scalar(header.dtypes[i], data, header.begins[i] - begin)
        return values

    def read_json(self, name: str) -> dict[str, Any]:
        _, body = self._fetch(name, {})
        self.file_sizes[name] = len(body)
        return json_object(body, self.label(name))

    def _get(self, name: str, first: int, last: int) -> tuple[bytes, int]:
        """Bytes ``first``..``last`` (inclusive) of ``name``, or fewer at its end; and the file's size."""
        headers, body = self._fetch(name, {"Range": f"bytes={first}-{last}"})
        size = _total_size(headers.get("Content-Range", ""))
        if size is None:
            raise CheckpointError(self.label(name), "the server's reply has no Content-Range with the file's size")
        return body, size

    def _fetch(self, name: str, headers: dict[str, str]) -> tuple[Any, bytes]:
        """GET ``name``: the reply's headers and body, its bytes counted.

        A reply to a range request that is not 206 (a server sending the
        whole file) is closed unread.
        """
        url, ranged = self._url(name), "Range" in headers
        with (
            _hub_errors(self.label(name)),
            self._session.stream("GET", url, headers={**self._headers, **headers}) as response,
        ):
            if ranged and response.status_code == 416:
                raise CheckpointError(self.label(name), "truncated: the file is empty")
            if response.status_code >= 400:
                response.read()
                _raise_for_status(response)
            if ranged and response.status_code != 206:
                raise CheckpointError(
                    self.label(name), f"the server answered a range request with HTTP {response.status_code}, not 206"
                )
            body = response.read()
        with self._lock:
            self.bytes_fetched += len(body)
        return response.headers, body


def _spans(ranges: list[tuple[int, int]], order: list[int]) -> list[tuple[int, int, list[int]]]:
    """Sorted byte ranges merged where the gap between them is under :data:`RANGE_GAP`: (begin, end, members)."""
    spans: list[tuple[int, int, list[int]]] = []
    for (begin, end), k in zip(ranges, order, strict=True):
        if spans and begin - spans[-1][1] < RANGE_GAP:
            spans[-1][2].append(k)
            spans[-1] = (spans[-1][0], max(spans[-1][1], end), spans[-1][2])
        else:
            spans.append((begin, end, [k]))
    return spans


def _total_size(content_range: str) -> int | None:
    match = re.fullmatch(r"bytes (?:\d+-\d+|\*)/(\d+)", content_range.strip())
    return int(match.group(1)) if match else None


def _raise_for_status(response: Any) -> None:
    from huggingface_hub.utils import hf_raise_for_status

    hf_raise_for_status(response)


@contextmanager
def _hub_errors(where: str) -> Iterator[None]:
    """Turn what ``huggingface_hub`` and the network raise into a one-line :class:`CheckpointError`."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        problem = _problem(error)
        if problem is None:
            raise
        raise CheckpointError(where, problem) from None


def _problem(error: Exception) -> str | None:
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
    if isinstance(error, OSError) or type(error).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore"}:
        return f"cannot reach the Hub: {first_line}"
    return None


def open_hub_checkpoint(address: str) -> OpenedCheckpoint:
    """The checkpoint at ``hf://ORG/NAME[@REVISION]``, its parsed config, and the reader of its files."""
    match = _ADDRESS.fullmatch(address)
    if match is None:
        raise CheckpointError(address, "not a Hub address; the form is hf://ORG/NAME or hf://ORG/NAME@REVISION")
    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise CheckpointError(
            address, "checking a Hub repository needs huggingface_hub: pip install 'scalar-scales[hub]'"
        ) from None
    repo_id, revision = match["repo"], match["revision"]
    with _hub_errors(address):
        siblings = {sibling.rfilename for sibling in HfApi().model_info(repo_id, revision=revision).siblings or ()}
    shards = HubShards(address, repo_id, revision)
    config = shards.read_json(CONFIG_NAME) if CONFIG_NAME in siblings else None
    names, weight_map = shard_names(siblings.__contains__, lambda: shards.read_json(INDEX_NAME), address, shards.label)
    checkpoint = RemoteCheckpoint(
        root=address,
        files=tuple(map(shards.label, names)),
        config=shards.label(CONFIG_NAME) if config is not None else None,
        weight_map=weight_map,
    )
    return OpenedCheckpoint(checkpoint, config, shards)
