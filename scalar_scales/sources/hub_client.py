"""GET requests to the Hub through huggingface_hub's async session, all of a check's on one event loop: each with a
deadline, a bound on its body, and retries of what fails for a moment.

One mechanism for every request (:func:`run`): an event loop of its own,
and on it a :class:`Client` on a session from huggingface_hub's
``get_async_session``, opened for the run and closed after it. Requests
made together are tasks of that loop (:func:`together`: at most ``bound``
at once; the first failure cancels the others, wherever they wait), so no
thread is started for a request, nothing is polled, and once :func:`run`
returns or fails nothing of it is left running. The session is
huggingface_hub's: its client factory (``set_async_client_factory``), its
request hook (offline mode, a request id), its redirects, and the headers
and token of ``build_hf_headers``. Its response hook is taken off it (the
session is made for the run and shared with nobody): that hook reads an
error reply's body whole wherever its ``Content-Length`` is under 1 MB, and
a body that small, compressed, inflates to a gigabyte. An error's body is
read here up to :data:`ERROR_BODY` decoded, as what it says is only for the
message.

A request has a deadline (:data:`DEADLINE_FACTOR` times its timeout) for all
of it: connecting, redirects, headers, body, every retry and every wait. An
httpx timeout bounds each wait on the socket, not the request: a server that
sends a byte within each timeout (the body a byte every 0.3 s, the headers
a byte every 0.5 s, 20 redirects each after 0.8 s) holds a request for as
long as it likes. The deadline is ``asyncio.timeout``'s, which cancels the
request where it waits, then ``the server took over N s to reply``.

Retries are those of huggingface_hub's ``http_backoff``
(``utils/_http.py``): the same statuses (:data:`RETRY_STATUSES`: 408, 429,
500, 502, 503, 504), a first wait of 1 s doubled up to 8 s, at most 5
retries, a server's ``Retry-After``, and for a 429 the wait its
``RateLimit`` header names where none are left (huggingface_hub's own
``parse_ratelimit_headers`` reads it). ``http_backoff`` and
``http_stream_backoff`` are not called: they are synchronous, with no async
counterpart, so a request made through them could be held to a deadline
only from a thread of its own; they read a body with no bound, retry a
timeout that has already cost a full timeout, sleep (``time.sleep``, which
nothing cancels) for whatever a server asks plus 1 s, read ``Retry-After``
as whole seconds only (``int()`` of ``"²"``, a digit to ``str.isdigit``, is a
ValueError), and log each retry as a warning on stderr, where a check prints
one line. Here:

- transient: a dropped connection (the server hangs up without a reply:
  ``httpx.NetworkError``, or ``RemoteProtocolError``'s "Server
  disconnected"; or mid-body: its "peer closed connection without sending
  complete message body"), a connection that cannot be made (refused, or a
  name that does not resolve: ``ConnectError`` is a ``NetworkError``, which
  ``http_backoff`` retries), and those statuses;
- not retried: a timeout (the server is slow, not gone: the check says so
  at once), any other 4xx (a missing file, no access), and a reply that is
  malformed or not what was asked for;
- ``Retry-After`` is read as seconds or an HTTP date; it and a rate limit's
  reset are capped at :data:`MAX_RETRY_AFTER`;
- every attempt and wait lies within the request's deadline: a wait that
  would end past it is not begun, and the last failure is the error,
  saying how many tries were made. The longest a request waits is so its
  deadline: 60 s at the default 10 s timeout (a refused connection: tries
  at 0, 1, 3, 7, 15 and 23 s, then one line, after 6 tries);
- an error's body is read up to 1 MiB and no further (a 503 page of any
  length is still a 503, retried).

Its session and headers read settings of their own as they are made: the
proxies (``HTTPS_PROXY=socks5://...`` without socksio, ``bogus://x``) and
certificates (``SSL_CERT_FILE``) its HTTP client takes from the environment,
the token (``HF_TOKEN``, a saved login, ``HF_OIDC_RESOURCE``) and
``HF_HUB_USER_AGENT_ORIGIN``. One it cannot use is one line naming the
setting (never a proxy's value, which may hold a password), exit 2, before
any request.

Ctrl-C during a request ends it at once: ``asyncio.run``, in the main
thread, turns SIGINT into the cancellation of the run, whose requests are
cancelled and whose session is closed before ``KeyboardInterrupt`` reaches
the command.
"""

from __future__ import annotations

import email.utils
import importlib.util
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from scalar_scales.environment import others_setting
from scalar_scales.errors import CheckpointError

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
    "rate_limit_reset",
    "retry_after",
    "run",
    "together",
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
"""The longest wait a server's ``Retry-After`` or rate limit is honoured for: a server cannot park a check for an
hour (the deadline caps it further)."""
ERROR_BODY = 1 << 20
"""The most of an error reply's body read: what huggingface_hub's message is taken from."""
_T = TypeVar("_T")


class Headed(Protocol):
    """What :func:`retry_after` reads of a reply."""

    @property
    def headers(self) -> Mapping[str, str]: ...


class Reply(Headed, Protocol):
    """What a request's ``limit`` reads of its reply (huggingface_hub's HTTP client is httpx in some versions and a
    fork of it in others, so the type is told by what it has, not by its class)."""

    @property
    def status_code(self) -> int: ...

    @property
    def links(self) -> Mapping[str, Mapping[str, str]]:
        """The ``Link`` header's links by their ``rel``, as the HTTP client parses them (``httpx.Response.links``,
        which huggingface_hub's ``paginate`` follows)."""
        ...


class _Streamed(Reply, Protocol):
    """A reply whose body is read as it comes."""

    def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]: ...

    def aiter_raw(self, chunk_size: int | None = None) -> AsyncIterator[bytes]: ...


class _Transient(Exception):
    """A failure worth another try: the one-line error, and how long the server asked to wait (None: not said)."""

    def __init__(self, error: CheckpointError, wait: float | None = None) -> None:
        super().__init__(error.problem)
        self.error, self.wait = error, wait


def run(main: Callable[[Client], Coroutine[Any, Any, _T]], *, where: str) -> _T:
    """``main(client)`` on an event loop of its own, ``client`` a :class:`Client` on a session of huggingface_hub's
    opened for it and closed after it; a refusal of the session's settings is one line naming the setting, before
    any request (``where``: what it names where no setting is to blame).

    Where this thread already runs an event loop (a notebook's), the run's
    loop is in one thread of its own, waited for (a loop cannot be run
    inside another); an interrupt of the wait (Ctrl-C) cancels the run, as
    ``asyncio.run`` does in the main thread.
    """
    import asyncio

    session, headers = _session_and_headers(where)
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []

    async def opened() -> _T:
        task = asyncio.current_task()
        assert task is not None
        running.append((asyncio.get_running_loop(), task))
        try:
            return await main(Client(session, headers))
        finally:
            await session.aclose()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(opened())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalar-scales-hub") as pool:
        done = pool.submit(asyncio.run, opened())
        try:
            return done.result()
        except BaseException:
            for loop, task in running:
                with suppress(RuntimeError):  # the loop has ended
                    loop.call_soon_threadsafe(task.cancel)
            raise


async def together(calls: Sequence[Awaitable[_T]], bound: int | None = None) -> list[_T]:
    """The results of ``calls``, in order, run as tasks of this loop, at most ``bound`` at once (None: all); or, as
    soon as one fails, a failure: the others are cancelled where they wait (those not begun never begin) and ended
    before it is raised. The one raised is an interrupt where one came (SIGTERM's, raised in a task), else the first
    failure in order, so that which shard is named does not depend on which reply came first."""
    import asyncio

    if not calls:
        return []
    slots = asyncio.Semaphore(bound or len(calls))

    async def bounded(call: Awaitable[_T]) -> _T:
        async with slots:
            return await call

    tasks = [asyncio.create_task(bounded(call)) for call in calls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    failures = [error for task in tasks if not task.cancelled() and (error := task.exception()) is not None]
    if failures:
        raise next((error for error in failures if not isinstance(error, Exception)), failures[0])
    return [task.result() for task in tasks]


class Client:
    """huggingface_hub's async session and request headers, on the loop of one :func:`run`: GET requests, each with
    a timeout, a deadline, retries and a bound on its body."""

    def __init__(self, session: Any, headers: dict[str, str]) -> None:
        self._session, self._headers = session, headers

    async def fetch(
        self,
        url: str,
        where: str,
        headers: dict[str, str],
        limit: Callable[[Reply], int],
        *,
        decoded: bool,
        timeout: float,
    ) -> bytes:
        """The body of the reply to a GET, whole within ``DEADLINE_FACTOR * timeout`` seconds (connecting,
        redirects, headers and body together, every retry included), or a one-line :class:`CheckpointError` naming
        ``where``. ``timeout`` bounds each wait on the socket.

        ``limit(response)`` checks the reply's status and headers and says how
        many bytes its body may hold (more is refused); ``decoded``: the body as
        the server's Content-Encoding inflates it, else the bytes as sent. A
        416 (a range past the end of the file) is left to ``limit``.
        """
        import asyncio

        deadline = DEADLINE_FACTOR * timeout
        ends = asyncio.get_running_loop().time() + deadline
        scope = asyncio.timeout_at(ends)
        try:
            async with scope:
                return await self._with_retries(url, where, headers, limit, decoded, timeout, ends)
        except TimeoutError:
            if not scope.expired():
                raise
            raise CheckpointError(where, f"the server took over {deadline:g} s to reply") from None

    async def _with_retries(
        self,
        url: str,
        where: str,
        headers: dict[str, str],
        limit: Callable[[Reply], int],
        decoded: bool,
        timeout: float,
        ends: float,
    ) -> bytes:
        import asyncio

        loop = asyncio.get_running_loop()
        wait = BASE_WAIT
        for tries in range(1, MAX_RETRIES + 2):
            try:
                return await self._request(url, where, headers, limit, decoded, timeout)
            except _Transient as transient:
                pause = wait if transient.wait is None else transient.wait
                if tries > MAX_RETRIES or loop.time() + pause >= ends:
                    error = transient.error
                    raise CheckpointError(error.path, f"{error.problem} (after {tries} tries)") from None
                await asyncio.sleep(pause)
                wait = min(MAX_WAIT, wait * 2)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _request(
        self,
        url: str,
        where: str,
        headers: dict[str, str],
        limit: Callable[[Reply], int],
        decoded: bool,
        timeout: float,
    ) -> bytes:
        with _hub_errors(where):
            async with self._session.stream(
                "GET", url, headers={**self._headers, **headers}, timeout=timeout
            ) as response:
                if response.status_code >= 400 and response.status_code != 416:
                    await _read_some(response, ERROR_BODY)
                    from huggingface_hub.utils import hf_raise_for_status

                    try:
                        hf_raise_for_status(response)
                    except Exception as error:
                        if response.status_code in RETRY_STATUSES:
                            raise _Transient(CheckpointError(where, _problem(error)), _wait_asked(response)) from None
                        raise
                return await _read(response, where, limit(response), decoded=decoded)


_PROXY_SCHEMES = frozenset({"http", "https", "socks5", "socks5h"})
"""The proxy schemes httpx takes (``socks5``/``socks5h`` only with socksio installed)."""


def _session_and_headers(where: str) -> tuple[Any, dict[str, str]]:
    """A session of huggingface_hub's (``get_async_session``, without its response hook) and the headers of its
    requests, or a one-line :class:`CheckpointError` naming the setting it cannot start with
    (:func:`_client_setting`, :func:`_header_setting`)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _http, build_hf_headers, get_async_session

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
    try:
        session = get_async_session()
    except Exception as error:
        setting = _client_setting()
        raise CheckpointError(
            setting or where,
            f"huggingface_hub's HTTP client cannot {'use it' if setting else 'start'} "
            f"({type(error).__name__}: {_first_line(error)})",
        ) from None
    reads_errors = getattr(_http, "async_hf_response_event_hook", None)
    hooks = session.event_hooks
    session.event_hooks = {**hooks, "response": [hook for hook in hooks["response"] if hook is not reads_errors]}
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


def rate_limit_reset(response: Headed) -> float | None:
    """The seconds until a rate limit that has no request left resets, as a 429's ``RateLimit`` header says
    (``"api";r=0;t=55``, read by huggingface_hub's ``parse_ratelimit_headers``, whose reading ``http_backoff``
    waits on first), at most :data:`MAX_RETRY_AFTER`; None where it says none, or requests are left."""
    from huggingface_hub.utils import parse_ratelimit_headers

    limit = parse_ratelimit_headers(response.headers)
    if limit is None or limit.remaining != 0:
        return None
    return min(float(limit.reset_in_seconds), MAX_RETRY_AFTER)


def _wait_asked(response: Reply) -> float | None:
    """How long a reply to be retried asks to be waited for, as ``http_backoff`` reads it: a 429's rate limit
    first, else ``Retry-After``; None where it asks nothing."""
    reset = rate_limit_reset(response) if response.status_code == 429 else None
    return reset if reset is not None else retry_after(response)


async def _read_some(response: _Streamed, limit: int) -> None:
    """Read an error reply's body, decoded, up to ``limit`` bytes, and stop there: huggingface_hub's message is
    taken from its start, and the rest, however long, is left unread (the connection is closed with the
    reply)."""
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size >= limit:
            break


async def _read(response: _Streamed, where: str, limit: int, *, decoded: bool) -> bytes:
    """The body, at most ``limit`` bytes (more is refused), in the pieces it comes in: re-cut into pieces of one
    size, 400 MB of scales among the weights took 8% longer."""
    chunks, size = [], 0
    stream = response.aiter_bytes() if decoded else response.aiter_raw()
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise CheckpointError(where, f"the server sent more than the {limit} bytes asked for")
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def _hub_errors(where: str) -> Iterator[None]:
    """Turn whatever ``huggingface_hub``, the network and a server's reply raise into a one-line
    :class:`CheckpointError`, or a :class:`_Transient` one where another try may succeed. A cancellation (the
    deadline's, another read's failure, Ctrl-C) and an interrupt are no Exception, and pass."""
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
