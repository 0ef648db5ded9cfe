"""Client for the effect service: ``post_effect(url, key, body)`` from a job handler.

A replay (the key was used before, with the same body) is success: ``EffectResponse.replay`` is
True and ``body`` is the answer the first request got. A 4xx other than 408/429 raises
``EffectRejected``: the request itself is wrong, and sending it again cannot help. Anything that
may go away on its own (no connection, a timeout, 408, 429, 5xx) raises ``EffectUnavailable``, and
retrying with the same key is safe because the key makes the effect happen at most once.

Connections are kept alive in one urllib3 pool per process (thread-safe, shared by every handler
thread), so a worker does not open a connection per effect. Each phase has its own timeout
(connect, then each read), both well below a lease. A request that fails on its connection (a
kept-alive connection the server closed, a reset, a read timeout) is sent again once on another
connection: that is safe for ``POST /effects`` only because it carries an Idempotency-Key, and
for ``GET``. An answer with a status is never resent here; the task's retry does that.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from rivet import tracing
from rivet.errors import RivetError
from rivet.extras import missing_extra

try:
    import urllib3
    from urllib3 import HTTPConnectionPool
    from urllib3.util import parse_url
except ImportError as _missing:  # the repository's effect group: pip install --group effect
    raise missing_extra("urllib3", group="effect", feature="effect_project.client") from _missing

REPLAY_HEADER = "idempotent-replay"
_RETRYABLE_4XX = frozenset({408, 429})
#: Seconds to open a connection, and to wait for each read of an answer (defaults).
CONNECT_TIMEOUT_SECS = 1.0
READ_TIMEOUT_SECS = 5.0
#: Kept-alive connections per service (per host and port), per process.
POOL_MAXSIZE = 32
#: Sends of one request on a fresh connection after a connection error or a read timeout.
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


_pool_lock = threading.Lock()
#: (pid, the pool manager, {URL: (its service's pool, its path)}): see _target.
_pool: tuple[int, urllib3.PoolManager, dict[str, tuple[HTTPConnectionPool, str]]] | None = None


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
        timeout=urllib3.Timeout(connect=min(connect_timeout, timeout), read=timeout),
    )
    return EffectResponse(
        status=status,
        body=_decode(text, status),
        replay=answer_headers.get(REPLAY_HEADER, "").lower() == "true",
    )


def fetch_verify(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The service's invariant report (``GET <url>/verify``); ``ok`` is False on a violation."""
    status, _, text = _send(
        "GET",
        _endpoint(url, "verify"),
        headers={"Accept": "application/json"},
        timeout=urllib3.Timeout(connect=min(CONNECT_TIMEOUT_SECS, timeout), read=timeout),
    )
    return _decode(text, status)


def fetch_health(url: str, *, timeout: float = 2.0) -> dict[str, Any]:
    """``GET <url>/health``: the service answers and reaches its database (no table is read,
    unlike /verify); raises EffectUnavailable otherwise."""
    status, _, text = _send(
        "GET",
        _endpoint(url, "health"),
        headers={"Accept": "application/json"},
        timeout=urllib3.Timeout(connect=min(CONNECT_TIMEOUT_SECS, timeout), read=timeout),
    )
    return _decode(text, status)


def pool() -> urllib3.PoolManager:
    """This process's connection pool (a new one after a fork: sockets are not shared)."""
    return _process_pools()[0]


def _process_pools() -> tuple[urllib3.PoolManager, dict[str, tuple[HTTPConnectionPool, str]]]:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            manager = urllib3.PoolManager(num_pools=8, maxsize=POOL_MAXSIZE, block=False)
            _pool = (os.getpid(), manager, {})
        return _pool[1], _pool[2]


def _target(url: str) -> tuple[HTTPConnectionPool, str]:
    """The kept-alive pool of ``url``'s service and the path to ask it for.

    Looked up once per URL and process: going through the PoolManager on every request (parse
    the URL, normalize a pool key, find the pool, merge its headers) cost a quarter of the
    client's CPU per effect. A pool the manager has since closed (more than num_pools services)
    is looked up again.
    """
    manager, targets = _process_pools()
    target = targets.get(url)
    if target is None or target[0].pool is None:
        target = (manager.connection_from_url(url), parse_url(url).request_uri)
        targets[url] = target
    return target


#: Only failures on the connection are resent (every request here is safe to resend); an answer
#: with a status goes back to the caller as it is. One object for every request: urllib3 counts
#: a request's retries in new objects, never in this one.
_RETRIES = urllib3.Retry(
    total=RESENDS,
    connect=RESENDS,
    read=RESENDS,
    status=0,
    other=0,
    redirect=False,
    allowed_methods=frozenset({"GET", "POST"}),
    raise_on_status=False,
    respect_retry_after_header=False,
)


def _retries() -> urllib3.Retry:
    return _RETRIES


@functools.lru_cache(maxsize=64)
def _endpoint(url: str, path: str) -> str:
    return urllib.parse.urljoin(url.rstrip("/") + "/", path)


def _send(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    timeout: urllib3.Timeout,
    body: bytes | None = None,
) -> tuple[int, Any, str]:
    try:
        connections, path = _target(url)
        response = connections.urlopen(
            method,
            path,
            body=body,
            headers=headers,
            timeout=timeout,
            retries=_retries(),
            redirect=False,
            preload_content=True,
        )
    except (urllib3.exceptions.HTTPError, OSError) as error:  # refused, reset, timeout
        raise EffectUnavailable(f"{method} {url}: {_reason(error)}") from error
    where = f"{method} {url}"
    text = response.data.decode("utf-8", errors="replace")
    if response.status >= 400:
        raise _http_error(where, response.status, text)
    return response.status, response.headers, text


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    return f"{type(reason).__name__}: {reason}" if reason is not None else str(error)


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
