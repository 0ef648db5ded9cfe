"""Client for the effect service: ``post_effect(url, key, body)`` from a job handler.

A replay (the key was used before, with the same body) is success: ``EffectResponse.replay`` is
True and ``body`` is the answer the first request got. A 4xx other than 408/429 raises
``EffectRejected``: the request itself is wrong, and sending it again cannot help. Anything that
may go away on its own (no connection, a timeout, 408, 429, 5xx) raises ``EffectUnavailable``, and
retrying with the same key is safe because the key makes the effect happen at most once.

Each thread keeps one connection alive per service (``http.client``, the standard library), so a
worker's handler threads neither open a connection per effect nor share one; a thread of a
forked process starts with none. Each phase has its own timeout (connect, then each read), both
well below a lease. A request that fails on its connection (a kept-alive connection the server
closed, a reset, a read timeout) is sent again once on a new connection: that is safe for
``POST /effects`` only because it carries an Idempotency-Key, and for ``GET``. An answer with a
status is never resent here; the task's retry does that. No urllib3: its pool and retry
machinery cost the worker more CPU per effect for the same behaviour
(docs/decisions/0013-effect-client-http-client.md).
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import select
import threading
import urllib.parse
from dataclasses import dataclass
from email.message import Message
from typing import Any, NamedTuple

from rivet import tracing
from rivet.errors import RivetError

REPLAY_HEADER = "idempotent-replay"
_RETRYABLE_4XX = frozenset({408, 429})
#: Seconds to open a connection, and to wait for each read of an answer (defaults).
CONNECT_TIMEOUT_SECS = 1.0
READ_TIMEOUT_SECS = 5.0
#: Sends of one request on a new connection after a connection error or a read timeout.
RESENDS = 1


class EffectError(RivetError):
    """The effect service did not confirm the effect."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        self.status = status
        self.body = body
        super().__init__(message)


class EffectRejected(EffectError):
    """The service refused the request (4xx, e.g. 422: key reused with another body); final."""


class EffectUnavailable(EffectError):
    """No usable answer (connection error, timeout, 5xx); retry with the same key."""


@dataclass(frozen=True, kw_only=True)
class EffectResponse:
    status: int
    """201 for the first request with a key, 200 for a replay."""
    body: Any
    """The decoded JSON answer (the effect: id, key, body, created_at)."""
    replay: bool
    """True when the service answered from its dedup row and wrote nothing."""


def post_effect(
    url: str,
    key: str,
    body: Any,
    *,
    timeout: float = READ_TIMEOUT_SECS,
    connect_timeout: float = CONNECT_TIMEOUT_SECS,
) -> EffectResponse:
    """POST `body` as JSON to ``<url>/effects`` under ``Idempotency-Key: key``.

    url: the service's base URL, e.g. settings.EFFECT_SERVICE_URL ("http://127.0.0.1:8081").
    timeout: seconds for each read of the answer; connect_timeout: to open a connection.
    """
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Idempotency-Key": key,
    }
    tracing.inject(headers)  # the attempt's trace goes on into the effect service
    status, answer_headers, text = _send(
        "POST",
        _endpoint(url, "effects"),
        body=json.dumps(body, separators=(",", ":")).encode(),
        headers=headers,
        timeout=timeout,
        connect_timeout=min(connect_timeout, timeout),
    )
    return EffectResponse(
        status=status,
        body=_decode(text, status),
        replay=(answer_headers.get(REPLAY_HEADER) or "").lower() == "true",
    )


def fetch_verify(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The service's invariant report (``GET <url>/verify``); ``ok`` is False on a violation."""
    return _get_json(url, "verify", timeout)


def fetch_health(url: str, *, timeout: float = 2.0) -> dict[str, Any]:
    """``GET <url>/health``: the service answers and reaches its database (no table is read,
    unlike /verify); raises EffectUnavailable otherwise."""
    return _get_json(url, "health", timeout)


def kept_connection(url: str) -> tuple[int, int]:
    """(connections this thread opened to ``url``'s service, requests it sent on the one it
    keeps now): how a caller sees that its effects share one kept-alive connection."""
    endpoint = _endpoint(url, "effects")
    target = _target(endpoint)
    state = _state()
    kept = state.kept.get(target.key)
    return (state.opened.get(target.key, 0), kept.requests if kept is not None else 0)


def _get_json(url: str, path: str, timeout: float) -> dict[str, Any]:
    status, _, text = _send(
        "GET",
        _endpoint(url, path),
        headers={"Accept": "application/json"},
        timeout=timeout,
        connect_timeout=min(CONNECT_TIMEOUT_SECS, timeout),
    )
    return _decode(text, status)


class _Target(NamedTuple):
    key: tuple[str, str, int]
    """(scheme, host, port): one kept connection per thread for each."""
    path: str
    """The path (and query) to ask for."""


class _Kept:
    """A thread's kept-alive connection to one service, and the requests sent on it."""

    __slots__ = ("connection", "requests")

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection = connection
        self.requests = 0

    def __del__(self) -> None:
        # The thread that kept it ended (its thread-local dict went away): close the socket
        # here rather than leave it to the garbage collector, which warns (ResourceWarning).
        self.connection.close()


_local = threading.local()


def _state() -> Any:
    """This thread's kept connections (``kept``) and how many it opened (``opened``), both by
    (scheme, host, port); none in a forked child: sockets are not shared."""
    if getattr(_local, "pid", None) != os.getpid():
        _local.pid, _local.kept, _local.opened = os.getpid(), {}, {}
    return _local


@functools.lru_cache(maxsize=64)
def _endpoint(url: str, path: str) -> str:
    return urllib.parse.urljoin(url.rstrip("/") + "/", path)


@functools.lru_cache(maxsize=64)
def _target(endpoint: str) -> _Target:
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EffectRejected(f"{endpoint}: not an http:// or https:// URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target((parts.scheme, parts.hostname, port), path)


def _connect(target: _Target, connect_timeout: float) -> _Kept:
    scheme, host, port = target.key
    factory = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    connection = factory(host, port, timeout=connect_timeout)
    connection.connect()
    state = _state()
    state.opened[target.key] = state.opened.get(target.key, 0) + 1
    kept = state.kept[target.key] = _Kept(connection)
    return kept


def _drop(target: _Target) -> None:
    kept = _state().kept.pop(target.key, None)
    if kept is not None:
        kept.connection.close()


def _dropped(kept: _Kept) -> bool:
    """The server closed this idle kept-alive connection (its socket reads as ready: the FIN, or
    bytes no request asked for): closed here, and no resend is spent on it."""
    sock = kept.connection.sock
    try:
        ready = sock is None or bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        ready = True
    if ready:
        kept.connection.close()
    return ready


def _send(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    timeout: float,
    connect_timeout: float,
    body: bytes | None = None,
) -> tuple[int, Message, str]:
    target = _target(url)
    where = f"{method} {url}"
    for sent in range(RESENDS + 1):
        answer = _exchange(target, method, body, headers, timeout, connect_timeout)
        if not isinstance(answer, Exception):
            break
        if sent == RESENDS:  # refused, reset, closed unanswered, timed out: twice
            raise EffectUnavailable(f"{where}: {type(answer).__name__}: {answer}") from answer
    status, message, text = answer
    if status >= 400:
        raise _http_error(where, status, text)
    return status, message, text


def _exchange(
    target: _Target,
    method: str,
    body: bytes | None,
    headers: dict[str, str],
    timeout: float,
    connect_timeout: float,
) -> tuple[int, Message, str] | Exception:
    """One request on this thread's kept connection (a new one if it has none): the answer, or
    the connection's error, without its traceback. Nothing raised here keeps a frame that holds
    the connection (an exception a handler keeps would keep its socket past the thread's end)."""
    try:
        kept = _state().kept.get(target.key)
        if kept is None or _dropped(kept):
            kept = _connect(target, connect_timeout)
        sock = kept.connection.sock
        if sock is not None:
            sock.settimeout(timeout)  # each read of the answer, from here on
        kept.requests += 1
        kept.connection.request(method, target.path, body=body, headers=headers)
        response = kept.connection.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as error:
        _drop(target)
        return error.with_traceback(None)
    if response.will_close:
        _drop(target)  # the server closes it: the next request opens another
    return response.status, response.msg, data.decode("utf-8", errors="replace")


def _http_error(where: str, status: int, text: str) -> EffectError:
    message = f"{where}: HTTP {status}: {text[:500]}"
    if status >= 500 or status in _RETRYABLE_4XX:
        return EffectUnavailable(message, status=status, body=text)
    return EffectRejected(message, status=status, body=text)


def _decode(text: str, status: int) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise EffectUnavailable(
            f"HTTP {status} answer is not JSON: {text[:200]!r}", status=status, body=text
        ) from None
