"""GET requests to the Hub through huggingface_hub's session: each with a deadline, a bound on its body, and
retries of what fails for a moment.

Retries follow huggingface_hub's ``http_backoff`` (``utils/_http.py``): the
same statuses (408, 429, 500, 502, 503, 504), a first wait of 1 s doubled
up to 8 s, at most 5 retries, and a 429's ``Retry-After``. That function is
not called itself: it reads the whole body with no bound and no deadline,
sleeps for whatever ``Retry-After`` a server names (plus 1 s), retries a
timeout that has already cost a full timeout, and logs each retry as a
warning on stderr, where a check prints one line. Here:

- transient: a dropped connection (the server hangs up without a reply:
  ``httpx.NetworkError``, or ``RemoteProtocolError``'s "Server
  disconnected"; or mid-body: its "peer closed connection without sending
  complete message body"), a connection that cannot be made (refused, or a
  name that does not resolve: ``ConnectError`` is a ``NetworkError``, and
  ``http_backoff`` retries ``ConnectionError`` too), and those statuses;
- not retried: a timeout (the server is slow, not gone: the check says so
  at once), any other 4xx (a missing file, no access), and a reply that is
  malformed or not what was asked for;
- ``Retry-After`` is read as seconds or an HTTP date, and capped at
  :data:`MAX_RETRY_AFTER`;
- every attempt and wait lies within the request's deadline
  (:data:`DEADLINE_FACTOR` times its timeout): a wait that would end past it
  is not begun, and the last failure is the error, saying how many tries
  were made. The longest a request waits is so its deadline: 60 s at the
  default 10 s timeout (a refused connection: tries at 0, 1, 3, 7, 15 and
  23 s, then one line, after 6 tries);
- an error's body is read up to 1 MiB and no further (a 503 page of any
  length is still a 503, retried), as what it says is only for the message;
- a :class:`Client` given a ``cancelled`` event starts no request and no
  wait once it is set, and a request in flight is given up at once: after
  one shard fails, the check ends without waiting for the others' reads.

Its session and headers are huggingface_hub's, which read settings of their
own as a client starts: the proxies (``HTTPS_PROXY=socks5://...`` without
socksio, ``bogus://x``) and certificates (``SSL_CERT_FILE``) its HTTP client
takes from the environment, the token (``HF_TOKEN``, a saved login,
``HF_OIDC_RESOURCE``) and ``HF_HUB_USER_AGENT_ORIGIN``. One it cannot use is
one line naming the setting (never a proxy's value, which may hold a
password), exit 2, before any request.
"""

from __future__ import annotations

import email.utils
import importlib.util
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from scalar_scales.environment import others_setting
from scalar_scales.errors import CheckpointError
from scalar_scales.sources.checkpoint import ReadCancelled

__all__ = [
    "BASE_WAIT",
    "DEADLINE_FACTOR",
    "MAX_RETRIES",
    "MAX_RETRY_AFTER",
    "MAX_WAIT",
    "RETRY_STATUSES",
    "Client",
    "Headed",
    "Reply",
    "retry_after",
]

DEADLINE_FACTOR = 6
"""A request, its retries and their waits included, must end within this many times its timeout, however slowly
the server trickles its bytes."""
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""huggingface_hub's ``http_backoff`` default ``retry_on_status_codes``."""
MAX_RETRIES = 5
BASE_WAIT = 1.0
MAX_WAIT = 8.0
"""huggingface_hub's ``http_backoff`` defaults: at most 5 retries, waiting 1 s, then twice as long each time, up to
8 s."""
MAX_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` honoured: a server cannot park a check for an hour (the deadline caps it further)."""
ERROR_BODY = 1 << 20
"""The most of an error reply's body read: what huggingface_hub's message is taken from."""
_CHUNK = 1 << 16
_POLL = 0.05
"""How often a request's waiting thread looks at its client's ``cancelled`` event."""


class Headed(Protocol):
    """What :func:`retry_after` reads of a reply."""

    @property
    def headers(self) -> Mapping[str, str]: ...


class Reply(Headed, Protocol):
    """What is read of an httpx reply (huggingface_hub's HTTP client is httpx in some versions and a fork of it in
    others, so the type is told by what it has, not by its class)."""

    @property
    def status_code(self) -> int: ...

    def iter_bytes(self, chunk_size: int | None = None) -> Iterator[bytes]: ...

    def iter_raw(self, chunk_size: int | None = None) -> Iterator[bytes]: ...


class _Transient(Exception):
    """A failure worth another try: the one-line error, and how long the server asked to wait (None: not said)."""

    def __init__(self, error: CheckpointError, wait: float | None = None) -> None:
        super().__init__(error.problem)
        self.error, self.wait = error, wait


class Client:
    """GET requests through huggingface_hub's session, each with a timeout, a deadline, retries and a bound on its
    body."""

    def __init__(self, timeout: float, cancelled: threading.Event | None = None, *, where: str) -> None:
        """``where``: what a refusal of huggingface_hub's session names, where no setting is to blame."""
        self._session, self._headers = _session_and_headers(where)
        self.timeout = timeout
        self.deadline = DEADLINE_FACTOR * timeout
        self.cancelled = threading.Event() if cancelled is None else cancelled
        """Set (by whoever shares it): no further request or wait is begun, and those in flight are given up."""

    def fetch(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Reply], int], *, decoded: bool
    ) -> bytes:
        """The body of the reply to a GET, whole within :attr:`deadline` (connecting, redirects, headers and
        body together, every retry included), or a one-line :class:`CheckpointError` naming ``where``.

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
        bounded by ``limit``. Once :attr:`cancelled` is set, this raises
        :class:`~.checkpoint.ReadCancelled` within :data:`_POLL` seconds: a thread pool's
        worker waiting here would otherwise hold the process's exit, which
        joins it, for up to the deadline.
        """
        if self.cancelled.is_set():
            raise ReadCancelled(where, "not read: another read failed first")
        outcome: queue.SimpleQueue[bytes | BaseException] = queue.SimpleQueue()
        start = time.monotonic()

        def request() -> None:
            try:
                outcome.put(self._with_retries(url, where, headers, limit, decoded, start))
            except BaseException as error:  # handed to the waiting thread, which raises it
                outcome.put(error)

        threading.Thread(target=request, name="scalar-scales-hub-request", daemon=True).start()
        while True:
            left = start + self.deadline - time.monotonic()
            if left <= 0:
                raise CheckpointError(where, f"the server took over {self.deadline:g} s to reply")
            if self.cancelled.is_set():
                raise ReadCancelled(where, "given up: another read failed first")
            try:
                found = outcome.get(timeout=min(left, _POLL))
                break
            except queue.Empty:
                continue
        if isinstance(found, BaseException):
            raise found
        return found

    def _with_retries(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Reply], int], decoded: bool, start: float
    ) -> bytes:
        wait = BASE_WAIT
        for tries in range(1, MAX_RETRIES + 2):
            if self.cancelled.is_set():
                raise ReadCancelled(where, "not read: another read failed first")
            try:
                return self._request(url, where, headers, limit, decoded)
            except _Transient as transient:
                pause = wait if transient.wait is None else transient.wait
                if tries > MAX_RETRIES or time.monotonic() - start + pause >= self.deadline:
                    error = transient.error
                    raise CheckpointError(error.path, f"{error.problem} (after {tries} tries)") from None
                if self.cancelled.wait(pause):
                    raise ReadCancelled(where, "not retried: another read failed first") from None
                wait = min(MAX_WAIT, wait * 2)
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Reply], int], decoded: bool
    ) -> bytes:
        with _hub_errors(where):
            with self._session.stream(
                "GET", url, headers={**self._headers, **headers}, timeout=self.timeout
            ) as response:
                if response.status_code >= 400 and response.status_code != 416:
                    _read_some(response, ERROR_BODY)
                    from huggingface_hub.utils import hf_raise_for_status

                    try:
                        hf_raise_for_status(response)
                    except Exception as error:
                        if response.status_code in RETRY_STATUSES:
                            raise _Transient(CheckpointError(where, _problem(error)), retry_after(response)) from None
                        raise
                return _read(response, where, limit(response), decoded=decoded)


_PROXY_SCHEMES = frozenset({"http", "https", "socks5", "socks5h"})
"""The proxy schemes httpx takes (``socks5``/``socks5h`` only with socksio installed)."""


def _session_and_headers(where: str) -> tuple[Any, dict[str, str]]:
    """huggingface_hub's shared session and the headers of its requests, or a one-line :class:`CheckpointError`
    naming the setting it cannot start with (:func:`_client_setting`, :func:`_header_setting`)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session

    try:
        session = get_session()
    except Exception as error:
        setting = _client_setting()
        raise CheckpointError(
            setting or where,
            f"huggingface_hub's HTTP client cannot {'use it' if setting else 'start'} "
            f"({type(error).__name__}: {_first_line(error)})",
        ) from None
    try:
        headers = dict(build_hf_headers())
    except OSError as error:  # the saved login's file: HF_TOKEN_PATH, or HF_HOME's
        raise CheckpointError(
            "HF_TOKEN_PATH" if others_setting("HF_TOKEN_PATH") else "HF_HOME",
            f"huggingface_hub cannot read its saved login, {error.filename or constants.HF_TOKEN_PATH}: "
            f"{error.strerror or error}",
        ) from None
    except Exception as error:
        oidc = type(error).__name__ == "OIDCError"
        raise CheckpointError(
            "HF_OIDC_RESOURCE" if oidc else where,
            f"huggingface_hub cannot {'get a token for it' if oidc else 'make its requests'} "
            f"({type(error).__name__}: {_first_line(error)})",
        ) from None
    for name, value in headers.items():
        if not (value.isascii() and value.isprintable()):
            raise CheckpointError(
                _header_setting(name, constants.HF_TOKEN_PATH) or where,
                f"it cannot be sent in an HTTP header ({name}), which holds printable ASCII only",
            )
    return session, headers


def _client_setting() -> str | None:
    """The setting huggingface_hub's HTTP client (httpx, or its fork) could not start with, told by the rules it
    reads them by: a proxy (``ALL_PROXY``, ``HTTP_PROXY``, ``HTTPS_PROXY``, lowercase first, as urllib finds
    them; one without ``://`` is ``http://``), ``NO_PROXY``, or ``SSL_CERT_FILE``; None where none is to blame."""
    for scheme in ("all", "http", "https", "no"):
        name = next((n for n in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY") if others_setting(n)), None)
        if name is None:
            continue
        value = others_setting(name) or ""
        if not value.isprintable():
            return name
        if scheme == "no":
            continue
        url = value if "://" in value else f"http://{value}"
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  # refuses a port that is no number from 0 to 65535
        except ValueError:
            return name
        kind = parts.scheme.lower()
        if kind not in _PROXY_SCHEMES or not parts.hostname:
            return name
        if kind.startswith("socks") and importlib.util.find_spec("socksio") is None:
            return name
    certificates = others_setting("SSL_CERT_FILE")
    if certificates and not os.path.isfile(certificates):
        return "SSL_CERT_FILE"
    return None


def _header_setting(header: str, token_path: str) -> str | None:
    """The setting a request header's value comes from: the token's (``HF_TOKEN``, or the saved login's file) or
    the user agent's origin; None for another header."""
    if header.lower() == "authorization":
        named = [name for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if others_setting(name)]
        return named[0] if named else token_path
    if header.lower() == "user-agent":
        return "HF_HUB_USER_AGENT_ORIGIN"
    return None


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error).strip() else type(error).__name__


def retry_after(response: Headed) -> float | None:
    """The wait a 429 or 503 reply's ``Retry-After`` asks for, in seconds (a number, or an HTTP date), at most
    :data:`MAX_RETRY_AFTER`; None where it names none, or nothing readable."""
    value = str(response.headers.get("Retry-After", "")).strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():  # not "²", a digit to str.isdigit that float() refuses
        return min(float(value[:6]), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), MAX_RETRY_AFTER)


def _read_some(response: Reply, limit: int) -> None:
    """Read an error reply's body, decoded, up to ``limit`` bytes, and stop there: huggingface_hub's message is
    taken from its start, and the rest, however long, is left unread (the connection is closed with the
    reply)."""
    size = 0
    for chunk in response.iter_bytes(_CHUNK):
        size += len(chunk)
        if size >= limit:
            break


def _read(response: Reply, where: str, limit: int, *, decoded: bool) -> bytes:
    """The body, at most ``limit`` bytes (more is refused)."""
    chunks, size = [], 0
    stream = response.iter_bytes(_CHUNK) if decoded else response.iter_raw(_CHUNK)
    for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise CheckpointError(where, f"the server sent more than the {limit} bytes asked for")
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def _hub_errors(where: str) -> Iterator[None]:
    """Turn whatever ``huggingface_hub``, the network and a server's reply raise into a one-line
    :class:`CheckpointError`, or a :class:`_Transient` one where another try may succeed."""
    try:
        yield
    except (CheckpointError, _Transient):
        raise
    except Exception as error:
        if _dropped(error):
            raise _Transient(CheckpointError(where, _problem(error))) from None
        raise CheckpointError(where, _problem(error)) from None


def _dropped(error: Exception) -> bool:
    """The connection failed or was closed without a (whole) reply: not a timeout, not a malformed reply. Told by
    class name, since huggingface_hub's HTTP client is httpx in some versions and a fork of it in others."""
    names = {kind.__name__ for kind in type(error).__mro__}
    if "RemoteProtocolError" in names:
        return str(error).startswith(("Server disconnected", "peer closed connection"))
    return "NetworkError" in names or isinstance(error, ConnectionError)


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
