"""Client for the effect service: ``post_effect(url, key, body)`` from a job handler.

A replay (the key was used before, with the same body) is success: ``EffectResponse.replay`` is
True and ``body`` is the answer the first request got. A 4xx other than 408/429 raises
``EffectRejected``: the request itself is wrong, and sending it again cannot help. Anything that
may go away on its own (no connection, a timeout, 408, 429, 5xx) raises ``EffectUnavailable``, and
retrying with the same key is safe because the key makes the effect happen at most once.
Standard library only.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any

from rivet.errors import RivetError

REPLAY_HEADER = "idempotent-replay"
_RETRYABLE_4XX = frozenset({408, 429})


@dataclass(frozen=True, kw_only=True)
class EffectResponse:
    status: int
    """201 for the first request with a key, 200 for a replay."""
    body: Any
    """The decoded JSON answer (the effect: id, key, body, created_at)."""
    replay: bool
    """True when the service answered from its dedup row and wrote nothing."""


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


def post_effect(url: str, key: str, body: Any, *, timeout: float = 10.0) -> EffectResponse:
    """POST `body` as JSON to ``<url>/effects`` under ``Idempotency-Key: key``.

    url: the service's base URL, e.g. settings.EFFECT_SERVICE_URL ("http://127.0.0.1:8081").
    """
    request = urllib.request.Request(
        _endpoint(url, "effects"),
        data=json.dumps(body, separators=(",", ":")).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Idempotency-Key": key,
        },
    )
    status, headers, text = _send(request, timeout)
    return EffectResponse(
        status=status,
        body=_decode(text, status),
        replay=headers.get(REPLAY_HEADER, "").lower() == "true",
    )


def fetch_verify(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The service's invariant report (``GET <url>/verify``); ``ok`` is False on a violation."""
    status, _, text = _send(urllib.request.Request(_endpoint(url, "verify")), timeout)
    return _decode(text, status)


def _endpoint(url: str, path: str) -> str:
    return urllib.parse.urljoin(url.rstrip("/") + "/", path)


def _send(request: urllib.request.Request, timeout: float) -> tuple[int, Any, str]:
    where = f"{request.get_method()} {request.full_url}"
    try:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.headers, _read(response)
        except urllib.error.HTTPError as error:  # a status >= 400: the service answered
            try:
                text = _read(error)
            finally:
                error.close()
            raise _http_error(where, error.code, text) from None
    except (OSError, HTTPException) as error:  # URLError, refused, reset, timeout
        raise EffectUnavailable(f"{where}: {error}") from error


def _read(response: Any) -> str:
    return response.read().decode("utf-8", errors="replace")


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
