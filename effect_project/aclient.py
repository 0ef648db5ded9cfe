"""The effect service's client for ``async def`` handlers: ``await apost_effect(url, key, body)``.

The same request, answers and errors as ``effect_project.client.post_effect`` (a replay is
success; ``EffectRejected`` is final, ``EffectUnavailable`` may clear), spoken as HTTP/1.1 over
``asyncio.open_connection``, so a coroutine waiting for the service never holds a thread.

Connections are kept alive per event loop: a request takes an idle connection to its service
(or opens one), and gives it back when the answer came whole and the server keeps it open; at
most ``IDLE_KEPT`` idle ones are kept per service. A request that fails on its connection (a
kept connection the server closed, a reset, a read timeout) is sent once more on a new one,
which is safe for ``POST /effects`` only because it carries an Idempotency-Key. An answer with
a status is never resent here; the task's retry does that. The connect timeout bounds opening a
connection; the read timeout bounds each read of the answer.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import defaultdict
from email.message import Message
from typing import Any

from effect_project.client import (
    CONNECT_TIMEOUT_SECS,
    READ_TIMEOUT_SECS,
    REPLAY_HEADER,
    RESENDS,
    EffectResponse,
    EffectUnavailable,
    _decode,
    _endpoint,
    _http_error,
    _Target,
    _target,
)
from rivet import tracing

#: Idle connections kept per service and event loop.
IDLE_KEPT = 64
#: The longest header block of an answer the client reads.
MAX_HEADER_BYTES = 64 * 1024


class _Connection:
    __slots__ = ("reader", "writer", "requests")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.requests = 0

    def close(self) -> None:
        self.writer.close()


class _Pools:
    """Idle connections of one event loop, by (scheme, host, port)."""

    def __init__(self) -> None:
        self.idle: defaultdict[tuple[str, str, int], list[_Connection]] = defaultdict(list)
        self.opened = 0
        self.janitor: asyncio.Task[None] | None = None

    async def close_when_cancelled(self) -> None:
        """Waits for the loop's end: a loop cancels its tasks before it closes (``asyncio.run``,
        the worker's event loop), and the idle connections are closed then, not left to warn
        from a closed loop."""
        try:
            await asyncio.Event().wait()
        finally:
            for connections in self.idle.values():
                for connection in connections:
                    connection.close()
            self.idle.clear()


_POOLS: dict[asyncio.AbstractEventLoop, _Pools] = {}


def _pools() -> _Pools:
    loop = asyncio.get_running_loop()
    pools = _POOLS.get(loop)
    if pools is None:
        # A loop's pools go with it: none is kept for a closed loop.
        for old in [other for other in _POOLS if other.is_closed()]:
            del _POOLS[old]
        pools = _POOLS[loop] = _Pools()
        pools.janitor = loop.create_task(pools.close_when_cancelled())
    return pools


def opened_connections() -> int:
    """Connections this event loop's client opened so far (tests see keep-alive work)."""
    return _pools().opened


async def apost_effect(
    url: str,
    key: str,
    body: Any,
    *,
    timeout: float = READ_TIMEOUT_SECS,
    connect_timeout: float = CONNECT_TIMEOUT_SECS,
) -> EffectResponse:
    """POST ``body`` as JSON to ``<url>/effects`` under ``Idempotency-Key: key`` (awaitable).

    url: the service's base URL; timeout: seconds for each read of the answer;
    connect_timeout: to open a connection.
    """
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Idempotency-Key": key,
    }
    tracing.inject(headers)  # the attempt's trace goes on into the effect service
    endpoint = _endpoint(url, "effects")
    target = _target(endpoint)
    payload = json.dumps(body, separators=(",", ":")).encode()
    where = f"POST {endpoint}"
    for sent in range(RESENDS + 1):
        answer = await _exchange(target, payload, headers, timeout, min(connect_timeout, timeout))
        if not isinstance(answer, Exception):
            break
        if sent == RESENDS:
            raise EffectUnavailable(f"{where}: {type(answer).__name__}: {answer}") from answer
    status, message, text = answer
    if status >= 400:
        raise _http_error(where, status, text)
    return EffectResponse(
        status=status,
        body=_decode(text, status),
        replay=(message.get(REPLAY_HEADER) or "").lower() == "true",
    )


async def _exchange(
    target: _Target,
    payload: bytes,
    headers: dict[str, str],
    timeout: float,
    connect_timeout: float,
) -> tuple[int, Message, str] | Exception:
    """One request on an idle connection (a new one if none): the answer, or the connection's
    error. A cancel (the worker stopping the handler) closes the connection and goes on up."""
    pools = _pools()
    idle = pools.idle[target.key]
    connection = None
    try:
        while idle and connection is None:
            candidate = idle.pop()
            if candidate.reader.at_eof() or candidate.writer.is_closing():
                candidate.close()  # the server closed it while it was idle
            else:
                connection = candidate
        if connection is None:
            connection = await _connect(target, connect_timeout)
            pools.opened += 1
        connection.requests += 1
        connection.writer.write(_request(target, payload, headers))
        await asyncio.wait_for(connection.writer.drain(), timeout)
        status, message, data, keep = await _answer(connection.reader, timeout)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
        if connection is not None:
            connection.close()
        return error.with_traceback(None)
    except BaseException:
        if connection is not None:
            connection.close()
        raise
    if keep and len(idle) < IDLE_KEPT:
        idle.append(connection)
    else:
        connection.close()
    return status, message, data.decode("utf-8", errors="replace")


async def _connect(target: _Target, connect_timeout: float) -> _Connection:
    scheme, host, port = target.key
    context = ssl.create_default_context() if scheme == "https" else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context), connect_timeout
    )
    return _Connection(reader, writer)


def _request(target: _Target, payload: bytes, headers: dict[str, str]) -> bytes:
    _, host, port = target.key
    lines = [f"POST {target.path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(payload)}", "Connection: keep-alive", "", ""]
    return "\r\n".join(lines).encode("latin-1") + payload


async def _answer(reader: asyncio.StreamReader, timeout: float) -> tuple[int, Message, bytes, bool]:
    """Status, headers, body, and whether the connection may be used again."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("the answer's header block is too long")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest.partition(" ")[0]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {status_line[:100]!r}")
    message = Message()
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            message[name.strip()] = value.strip()
    keep = (message.get("Connection") or "").lower() != "close" and version == "HTTP/1.1"
    if (message.get("Transfer-Encoding") or "").lower() == "chunked":
        body = await _chunked(reader, timeout)
    elif message.get("Content-Length") is not None:
        length = int(message["Content-Length"])
        body = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
    else:  # the body runs to the end of the connection
        body = await asyncio.wait_for(reader.read(), timeout)
        keep = False
    return int(code), message, body, keep


async def _chunked(reader: asyncio.StreamReader, timeout: float) -> bytes:
    parts = []
    while True:
        size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)  # no trailers expected
            return b"".join(parts)
        parts.append(await asyncio.wait_for(reader.readexactly(size + 2), timeout))
        parts[-1] = parts[-1][:-2]
