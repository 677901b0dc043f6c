"""A local stand-in for the Hugging Face Hub: serves checkpoint folders the way its endpoints do, or, on request,
the way a hostile server would.

- ``GET /api/models/ORG/NAME`` and ``/api/models/ORG/NAME/revision/REV``:
  model info, with ``sha`` (the revision's commit) and ``siblings``
  listing the repository's files.
- ``GET /api/models?author=ORG``: the models of a user or an organization,
  ``page`` at a time, each page's ``Link`` header naming the next
  (``rel="next"``, with a ``cursor``), as the Hub pages ``list_models``;
  ``listing`` makes it answer as a hostile server would: ``elsewhere`` (the
  next page on another host), ``not-a-list``, ``other-author`` (a model of
  another author listed), ``bad-id`` (a model named with a revision,
  ``ORG/NAME@main``), ``endless`` (a next page forever, each naming the
  same models).
- ``GET /ORG/NAME/resolve/REV/FILE``: the file, where REV is a revision or
  a commit; range requests answered 206 with ``Content-Range``, as the
  Hub's storage does. Large files (``.safetensors``) are redirected (302) to
  a storage address first, as the Hub does for LFS files.
- Errors carry the Hub's ``X-Error-Code`` (``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound``), which ``huggingface_hub`` maps
  to its exceptions. A private repository answers 401 without the right
  bearer token.

A commit is named after the folder it serves, so a revision moved to another
folder during a check (``HubRepository.after_model_info``: a push) keeps
serving the commit the client was told.

Misbehaviours (``HubRepository.misbehave``), each a way a server has been
seen, or could be made, to answer:

==================  =================================================================================
``hang``            model info and files: accept the connection, never answer (``hang-files``: files)
``html``            model info: 200 with an HTML page
``siblings-text``   model info: ``siblings`` is a string
``no-rfilename``    model info: a sibling without ``rfilename``
``a-list``          model info: a JSON list
``huge-integer``    model info: an integer of 5,000 digits, more than Python converts
``from-zero``       ranges: 206 with the file's first bytes, under an honest ``Content-Range``
``oversized``       ranges: a body far longer than the range asked for (and its length)
``gzip-bomb``       ranges: ``Content-Encoding: gzip``, inflating to 1 GiB
``short``           ranges: fewer bytes than the ``Content-Range`` announces (and a matching length)
``trickle-body``    ranges: honest headers, then the body one byte every 0.3 s
``trickle-headers`` ranges: the status line and headers one byte every 0.5 s
``slow-redirects``  shards: 20 redirects, each answered after 0.8 s, before the file
``drop-once``       every request's first try (by path and Range): the connection closed, no reply
``drop-mid-body-once`` every reply's first try: its headers and half its body, then the connection closed
``503-once``        every request's first try: 503 Service Unavailable
``503-huge-once``   every request's first try: 503 with a 2 MiB HTML page
``503-odd-retry-after-once`` every request's first try: 503, ``Retry-After: ²`` (a digit to ``str.isdigit``)
``429-once``        every request's first try: 429 Too Many Requests, ``Retry-After: 1``
``503-always``      every request: 503
``error-gzip-bomb`` every request: 404, its body gzip-encoded in under 1 MB, inflating to 900 MiB
==================  =================================================================================

``HubRepository.misbehave_files`` narrows a misbehaviour to those files (the
others are served honestly): one shard slow, another broken.

``latency`` (seconds, :func:`serve_hub`) delays every reply, each request on
its own, as a distant server's round trip does; requests are served in
threads, so requests in parallel wait together.

It listens on 127.0.0.1 in a thread of the test process and counts every
body byte it sends for a file, so a test can hold the client's own count
against it, and each request (:attr:`ServedBytes.requests`; :meth:`ServedBytes.ranges` counts the range
requests per file). A whole file (the reply to a request without a range, or to any
request where ``ranges`` is False) is sent 64 kB at a time, each chunk
counted once the socket has taken it: for a client that hangs up on it, the
count is what its connection took, not the file's size.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = [
    "MISBEHAVIOURS",
    "HubRepository",
    "ServedBytes",
    "client_environment",
    "commit_of",
    "scatter_scales",
    "serve_hub",
]

MISBEHAVIOURS = (
    "hang",
    "hang-files",
    "html",
    "siblings-text",
    "no-rfilename",
    "a-list",
    "huge-integer",
    "from-zero",
    "oversized",
    "gzip-bomb",
    "short",
    "trickle-body",
    "trickle-headers",
    "slow-redirects",
    "drop-once",
    "drop-mid-body-once",
    "503-once",
    "503-huge-once",
    "503-odd-retry-after-once",
    "429-once",
    "503-always",
    "error-gzip-bomb",
)


def commit_of(folder: Path) -> str:
    """The commit id under which ``folder`` is served: 40 hex digits, as the Hub's."""
    return hashlib.sha1(str(folder).encode()).hexdigest()


@dataclass
class HubRepository:
    """A repository: its files' folder for each revision (``main`` at least), and its token if private."""

    revisions: dict[str, Path]
    token: str | None = None
    ranges: bool = True
    """False: answer range requests with the whole file (200), as a server without range support does."""
    misbehave: str | None = None
    """One of :data:`MISBEHAVIOURS`, or None for an honest server."""
    misbehave_files: frozenset[str] | None = None
    """The file names ``misbehave`` applies to (None: every request); model info and other files are served
    honestly."""
    after_model_info: Callable[[HubRepository], None] | None = None
    """Called once model info has been served: a push, say."""


@dataclass
class ServedBytes:
    """What the server sent: file body bytes, and each request's path and Range header."""

    file_bytes: int = 0
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ranges(self) -> dict[str, int]:
        """The range requests answered from storage (past the resolve address's redirect), per shard file name."""
        counts: dict[str, int] = {}
        for path, range_ in self.requests:
            if path.startswith("/storage/") and range_ is not None:
                name = path.rpartition("/")[2]
                counts[name] = counts.get(name, 0) + 1
        return counts

    def count(self, ending: str) -> int:
        """The requests whose path ends with ``ending``."""
        return sum(path.endswith(ending) for path, _ in self.requests)


_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)")
_STORAGE = re.compile(r"/storage/(?P<repo>[^/]+/[^/]+)/(?P<revision>[^/]+)/(?P<file>.+)")
_MODEL_INFO = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<revision>[^/]+))?")
_SLOW_HOPS = 20
_FILE_CHUNK = 1 << 16
"""What a whole-file reply writes at a time."""
_BOMB = gzip.compress(bytes(1 << 30), compresslevel=9)
"""1 GiB of zeros, gzip-compressed (about 1 MB)."""


@cache
def _error_bomb(mebibytes: int = 900) -> bytes:
    """``mebibytes`` MiB of zeros, gzip-compressed in under 1 MB (a body huggingface_hub's async response hook reads
    whole): one MiB compressed after a full flush, which makes each the same bytes, repeated, then the trailer."""
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(zeros, crc)
    final = b"\x03\x00"  # an empty last block
    return first + block * (mebibytes - 1) + final + struct.pack("<II", crc, (mebibytes << 20) & 0xFFFFFFFF)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    """Connections a burst of parallel requests may open before they are accepted (socketserver's default, 5,
    drops the rest, which a client then retries after a second)."""

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-reply (it refused a reply) is expected; anything else is a bug."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


def scatter_scales(folder: Path) -> Path:
    """Rewrite every shard of ``folder`` the way a writer that does not sort tensors by dtype lays it out: each
    module's tensors together, its weights then its scales, so that the scales lie among the weights rather than
    leading the data section. Same tensors, same bytes, same index; returns ``folder``."""
    for shard in sorted(folder.glob("*.safetensors")):
        raw = shard.read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
        metadata = header.pop("__metadata__", None)
        start = 8 + length

        def order(name: str, header: dict = header) -> tuple[str, bool, str]:
            module, _, leaf = name.rpartition(".")
            return module, leaf.endswith("scale") and header[name]["dtype"] == "F32", leaf

        entries, chunks, offset = {}, [], 0
        for name in sorted(header, key=order):
            first, last = header[name]["data_offsets"]
            entries[name] = {**header[name], "data_offsets": [offset, offset + last - first]}
            chunks.append(raw[start + first : start + last])
            offset += last - first
        encoded = json.dumps({"__metadata__": metadata, **entries} if metadata else entries, separators=(",", ":"))
        encoded += " " * (-len(encoded) % 8)
        shard.write_bytes(struct.pack("<Q", len(encoded)) + encoded.encode() + b"".join(chunks))
    return folder


def client_environment(endpoint: str, folder: Path, token: str | None = None) -> dict[str, str | None]:
    """The environment of a ``scalar-scales`` process (the test kit's ``run_cli``) that may reach only this
    server: its endpoint, no saved login (``HF_HOME`` under ``folder``), online, and ``token`` or none."""
    return {"HF_ENDPOINT": endpoint, "HF_HOME": str(folder / "hf-home"), "HF_HUB_OFFLINE": "0", "HF_TOKEN": token}


@contextmanager
def serve_hub(
    repositories: dict[str, HubRepository], latency: float = 0.0, *, page: int = 1000, listing: str | None = None
) -> Iterator[tuple[str, ServedBytes]]:
    """Serve ``repositories`` (by ``ORG/NAME``) until the block ends, each reply ``latency`` seconds after its
    request, an author's models ``page`` at a time (``listing``: how a hostile server lists them); yield the endpoint
    and the byte count."""
    served = ServedBytes()
    tried: set[tuple[str, str | None]] = set()
    """Each request (path and Range) seen: a ``-once`` misbehaviour fails only its first try."""
    commits: dict[str, Path] = {commit_of(p): p for r in repositories.values() for p in r.revisions.values()}
    released = threading.Event()
    """Set when the block ends: what hangs stops hanging, so the server can shut down."""

    class Handler(BaseHTTPRequestHandler):
        _misbehave: str | None = None
        """How this request is misbehaved on (:meth:`_misbehaviour`)."""
        _drop_mid_body = False

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            """As GET, without the body: huggingface_hub's own ``file_exists`` and ``hf_hub_download`` (the
            benchmark's comparison, a test's cache) ask for a file's metadata so."""
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            key = (path, self.headers.get("Range"))
            with served.lock:
                served.requests.append(key)
                first_try = key not in tried
                tried.add(key)
            if latency and released.wait(latency):
                return
            if self._transient(path, first_try):
                return
            if self._misbehave == "error-gzip-bomb":
                message = "Repository not found"
                headers = {"Content-Encoding": "gzip", "X-Error-Code": "RepoNotFound", "X-Error-Message": message}
                self._send(404, _error_bomb(), headers)
                return
            if path == "/api/models":
                self._list_models(parse_qs(self.path.partition("?")[2]))
            elif match := _MODEL_INFO.fullmatch(path):
                self._model_info(match["repo"], unquote(match["revision"] or "main"))
            elif match := _RESOLVE.fullmatch(path):
                self._resolve(match["repo"], unquote(match["revision"]), unquote(match["file"]), redirect=True)
            elif match := _STORAGE.fullmatch(path):
                self._resolve(match["repo"], unquote(match["revision"]), unquote(match["file"]), redirect=False)
            else:
                self._error(404, "RepoNotFound", "no such endpoint")

        def _misbehaviour(self, path: str) -> str | None:
            """How the repository ``path`` is in misbehaves for it: its ``misbehave``, unless ``misbehave_files``
            leaves the file out."""
            matches = [m for p in (_MODEL_INFO, _RESOLVE, _STORAGE) if (m := p.fullmatch(path))]
            repository = repositories.get(matches[0]["repo"]) if matches else None
            if repository is None:
                return None
            if repository.misbehave_files is not None:
                file = matches[0].groupdict().get("file")
                if file is None or unquote(file) not in repository.misbehave_files:
                    return None
            return repository.misbehave

        def _transient(self, path: str, first_try: bool) -> bool:
            """Fail the request as a server does for a moment, where its repository misbehaves so; True if it
            did."""
            misbehave = self._misbehave = self._misbehaviour(path)
            self._drop_mid_body = misbehave == "drop-mid-body-once" and first_try
            if misbehave == "503-always" or (misbehave == "503-once" and first_try):
                self._error(503, "ServiceUnavailable", "Service Unavailable")
            elif misbehave == "503-huge-once" and first_try:
                page = b"<!doctype html><html><body>" + b"Service Unavailable " * ((2 << 20) // 20) + b"</body></html>"
                self._send(503, page, {"Content-Type": "text/html"})
            elif misbehave == "503-odd-retry-after-once" and first_try:
                self._error(503, "ServiceUnavailable", "Service Unavailable", {"Retry-After": "\u00b2"})
            elif misbehave == "429-once" and first_try:
                body = json.dumps({"error": "rate limited"}).encode()
                self._send(429, body, {"Retry-After": "1"})
            elif misbehave == "drop-once" and first_try:
                self.close_connection = True
            else:
                return False
            return True

        def _folder(self, repo: str, revision: str) -> Path | None:
            repository = repositories.get(repo)
            if repository is None:
                self._error(404, "RepoNotFound", f"Repository {repo} not found")
                return None
            if repository.token and self.headers.get("Authorization") != f"Bearer {repository.token}":
                self._error(401, "RepoNotFound", "Invalid username or password.")
                return None
            folder = repository.revisions.get(revision) or commits.get(revision)
            if folder is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return None
            return folder

        def _list_models(self, query: dict[str, list[str]]) -> None:
            author = query.get("author", [""])[0]
            start = int(query.get("cursor", ["0"])[0])
            listed = sorted(name for name in repositories if name.split("/")[0].lower() == author.lower())  # as the Hub
            listed = [name for name in listed if repositories[name].token is None]  # a private one is not listed
            shown = listed[start : start + page]
            if listing == "other-author":
                shown = [*shown, "someone-else/model"]
            elif listing == "bad-id":
                shown = [*shown, f"{author}/model@main"]
            body: object = [{"_id": commit_of(Path(name))[:24], "id": name, "modelId": name} for name in shown]
            if listing == "not-a-list":
                body = {"models": body}
            headers = {"Content-Type": "application/json"}
            host = "http://127.0.0.2:9" if listing == "elsewhere" else f"http://127.0.0.1:{self.server.server_port}"
            following = start if listing == "endless" else start + page
            if listing in ("elsewhere", "endless") or following < len(listed):
                headers["Link"] = f'<{host}/api/models?author={quote(author)}&cursor={following}>; rel="next"'
            self._send(200, json.dumps(body).encode(), headers)

        def _model_info(self, repo: str, revision: str) -> None:
            folder = self._folder(repo, revision)
            if folder is None:
                return
            repository = repositories[repo]
            if self._misbehave == "hang":
                released.wait()
                return
            commits[commit_of(folder)] = folder
            siblings: object = [{"rfilename": p.name} for p in sorted(folder.iterdir()) if p.is_file()]
            info: object = {"id": repo, "modelId": repo, "sha": commit_of(folder), "private": False}
            document: object = {**info, "siblings": siblings}  # type: ignore[dict-item]
            if self._misbehave == "siblings-text":
                document = {**info, "siblings": "config.json model.safetensors"}  # type: ignore[dict-item]
            elif self._misbehave == "no-rfilename":
                document = {**info, "siblings": [{"name": "config.json"}]}  # type: ignore[dict-item]
            elif self._misbehave == "a-list":
                document = [info]
            body = json.dumps(document)
            if self._misbehave == "huge-integer":  # more digits than Python converts
                body = body.replace('"private": false', '"private": false, "downloads": ' + "9" * 5000)
            if self._misbehave == "html":
                self._send(200, b"<!doctype html><html><body>Sign in</body></html>", {"Content-Type": "text/html"})
            else:
                self._send(200, body.encode(), {"Content-Type": "application/json"})
            if repository.after_model_info is not None:
                repository.after_model_info(repository)

        def _resolve(self, repo: str, revision: str, name: str, *, redirect: bool) -> None:
            folder = self._folder(repo, revision) if redirect else commits.get(revision)
            if folder is None:
                return
            repository = repositories[repo]
            file = folder / name
            if not file.is_file():
                self._error(404, "EntryNotFound", f"{name} does not exist on {revision}")
                return
            hops = int(parse_qs(urlsplit(self.path).query).get("hop", ["0"])[0])
            if self._misbehave == "slow-redirects" and name.endswith(".safetensors") and hops < _SLOW_HOPS:
                if released.wait(0.8):
                    return
                self.send_response(302)
                self.send_header("Location", f"{urlsplit(self.path).path}?hop={hops + 1}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            stat = file.stat()
            etag = '"' + hashlib.sha1(f"{file}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest() + '"'
            if redirect and name.endswith(".safetensors"):
                self.send_response(302)
                self.send_header("Location", f"/storage/{repo}/{commit_of(folder)}/{name}")
                self.send_header("Content-Length", "0")
                for key, value in {"X-Repo-Commit": commit_of(folder), "ETag": etag, "X-Linked-Etag": etag}.items():
                    self.send_header(key, value)
                self.send_header("X-Linked-Size", str(stat.st_size))
                self.end_headers()
                return
            self._file_headers = {"X-Repo-Commit": commit_of(folder), "ETag": etag}
            if self._misbehave in ("hang", "hang-files"):
                released.wait()
                return
            size = file.stat().st_size
            spec = self.headers.get("Range") if repository.ranges else None
            if spec is None:
                self._send_file(file, size)
                return
            match = re.fullmatch(r"bytes=(\d+)-(\d+)", spec)
            assert match, f"unexpected Range {spec!r}"
            first, last = int(match[1]), min(int(match[2]), size - 1)
            if first >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            self._range(self._misbehave, file, first, last, size)

        def _range(self, misbehave: str | None, file: Path, first: int, last: int, size: int) -> None:
            with open(file, "rb") as f:
                f.seek(0 if misbehave == "from-zero" else first)
                body = f.read(last - first + 1)
            content_range = f"bytes {first}-{last}/{size}"
            if misbehave == "from-zero":
                content_range = f"bytes 0-{last - first}/{size}"
            elif misbehave == "short":
                body = body[: len(body) // 2]
            elif misbehave == "oversized":
                body = body + bytes(150 << 20)
            elif misbehave == "gzip-bomb":
                self._send(206, _BOMB, {"Content-Range": content_range, "Content-Encoding": "gzip"}, count=True)
                return
            elif misbehave in ("trickle-body", "trickle-headers"):
                self._trickle(misbehave, body, content_range)
                return
            self._send(206, body, {"Content-Range": content_range}, count=True)

        def _trickle(self, misbehave: str, body: bytes, content_range: str) -> None:
            """The reply one byte at a time, its headers or its body, until it is sent, the client hangs up or the
            server stops."""
            head = (
                f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(body)}\r\nContent-Range: {content_range}\r\n\r\n"
            ).encode()
            slow, fast, pause = (head, body, 0.5) if misbehave == "trickle-headers" else (body, b"", 0.3)
            try:
                if misbehave == "trickle-body":
                    self.wfile.write(head)
                for byte in slow:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if released.wait(pause):
                        return
                self.wfile.write(fast)
            except OSError:  # the client hung up
                return

        def _send_file(self, file: Path, size: int) -> None:
            """The whole file, 200, in chunks, each counted once the socket has taken it: a client that hangs up
            early is sent little more than what its connection buffers."""
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("Accept-Ranges", "bytes")
            for key, value in getattr(self, "_file_headers", {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(file, "rb") as f:
                while chunk := f.read(_FILE_CHUNK):
                    self.wfile.write(chunk)
                    with served.lock:
                        served.file_bytes += len(chunk)

        def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})})

        def _send(self, status: int, body: bytes, headers: dict[str, str], count: bool = False) -> None:
            self.send_response(status)
            for key, value in {"Content-Length": str(len(body)), "Accept-Ranges": "bytes", **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            if self._drop_mid_body and status < 300 and len(body) > 1:
                self.wfile.write(body[: len(body) // 2])  # the rest never comes: the connection closes here
                self.close_connection = True
                return
            self.wfile.write(body)
            if count:
                with served.lock:
                    served.file_bytes += len(body)

    server = _QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        released.set()
        server.shutdown()
        server.server_close()
        thread.join()
