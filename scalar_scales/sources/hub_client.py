"""GET requests to the Hub through huggingface_hub's session: each with a deadline, a bound on its body, and
retries of what fails for a moment.

Retries follow huggingface_hub's ``http_backoff`` (``utils/_http.py``): the
same statuses (408, 429, 500, 502, 503, 504), a first wait of 1 s doubled
up to 8 s, at most 5 retries, and a 429's ``Retry-After``. That function is
not called itself: it reads the whole body with no bound and no deadline,
sleeps for whatever ``Retry-After`` a server names (plus 1 s), retries a
timeout that has already cost a full timeout, and logs each retry as a
warning on stderr, where a check prints one line. Here:

- transient: a dropped connection (the server hangs up without a reply, or
  mid-body: ``httpx.NetworkError``, or ``RemoteProtocolError``'s "Server
  disconnected"), and those statuses;
- not retried: a timeout (the server is slow, not gone: the check says so
  at once), any other 4xx (a missing file, no access), and a reply that is
  malformed or not what was asked for;
- ``Retry-After`` is read as seconds or an HTTP date, and capped at
  :data:`MAX_RETRY_AFTER`;
- every attempt and wait lies within the request's deadline
  (:data:`DEADLINE_FACTOR` times its timeout): a wait that would end past it
  is not begun, and the last failure is the error, saying how many tries
  were made.
"""

from __future__ import annotations

import email.utils
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from scalar_scales.errors import CheckpointError

__all__ = [
    "BASE_WAIT",
    "DEADLINE_FACTOR",
    "MAX_RETRIES",
    "MAX_RETRY_AFTER",
    "MAX_WAIT",
    "RETRY_STATUSES",
    "Client",
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
_CHUNK = 1 << 16


class _Transient(Exception):
    """A failure worth another try: the one-line error, and how long the server asked to wait (None: not said)."""

    def __init__(self, error: CheckpointError, wait: float | None = None) -> None:
        super().__init__(error.problem)
        self.error, self.wait = error, wait


class Client:
    """GET requests through huggingface_hub's session, each with a timeout, a deadline, retries and a bound on its
    body."""

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
        bounded by ``limit``.
        """
        outcome: queue.SimpleQueue[bytes | BaseException] = queue.SimpleQueue()
        start = time.monotonic()

        def request() -> None:
            try:
                outcome.put(self._with_retries(url, where, headers, limit, decoded, start))
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

    def _with_retries(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Any], int], decoded: bool, start: float
    ) -> bytes:
        wait = BASE_WAIT
        for tries in range(1, MAX_RETRIES + 2):
            try:
                return self._request(url, where, headers, limit, decoded)
            except _Transient as transient:
                pause = wait if transient.wait is None else transient.wait
                if tries > MAX_RETRIES or time.monotonic() - start + pause >= self.deadline:
                    error = transient.error
                    raise CheckpointError(error.path, f"{error.problem} (after {tries} tries)") from None
                time.sleep(pause)
                wait = min(MAX_WAIT, wait * 2)
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(
        self, url: str, where: str, headers: dict[str, str], limit: Callable[[Any], int], decoded: bool
    ) -> bytes:
        with _hub_errors(where):
            with self._session.stream(
                "GET", url, headers={**self._headers, **headers}, timeout=self.timeout
            ) as response:
                if response.status_code >= 400 and response.status_code != 416:
                    _read(response, where, 1 << 20, decoded=True)
                    from huggingface_hub.utils import hf_raise_for_status

                    try:
                        hf_raise_for_status(response)
                    except Exception as error:
                        if response.status_code in RETRY_STATUSES:
                            raise _Transient(CheckpointError(where, _problem(error)), retry_after(response)) from None
                        raise
                return _read(response, where, limit(response), decoded=decoded)


def retry_after(response: Any) -> float | None:
    """The wait a 429 or 503 reply's ``Retry-After`` asks for, in seconds (a number, or an HTTP date), at most
    :data:`MAX_RETRY_AFTER`; None where it names none, or nothing readable."""
    value = str(response.headers.get("Retry-After", "")).strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value[:6]), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), MAX_RETRY_AFTER)


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
        return str(error).startswith("Server disconnected")
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
