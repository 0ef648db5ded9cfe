"""A seeded, faulty TCP proxy between the workers and the effect service (the effect-net fault).

It forwards the bytes it gets, unchanged, one connection to the service for each connection from
a client, and closes one side when the other closes. It also knows where an HTTP/1.1 message
ends (Content-Length, chunked, or the end of the connection), so it can break an exchange at the
moment that matters. While ``injecting``, each request draws one of:

- ``delay``: hold the request a while (a slow network) before forwarding it;
- ``drop``: read the request, then reset the connection without forwarding it: the service
  never sees it;
- ``reset``: forward the request, read the service's whole answer, then reset the connection
  instead of forwarding the answer: the effect happened and the client never learns (the
  ambiguous case; only the idempotency key turns the client's retry into a replay).

- ``refuse``: answer 503 (the service is overloaded) without forwarding the request: an
  answer with a status, which the client never sends again by itself, so the handler sees the
  failure and the task is retried after its backoff;
- ``dup``: send the request to the service twice at once, on two connections, and forward the
  first answer: a duplicate delivery of one request, racing itself (only the service's dedup
  keeps it one effect, and only if it holds against a concurrent twin).

Every ``POST /effects`` is recorded (``records``): its Idempotency-Key, each answer the service
gave (status, replay, the effect's id), and what the client was delivered (the answer, or
nothing: its connection broke), with the time of each on the wall clock, which the database
server on this host reads too. The history invariant H5 reads them
(chaos_project.chaos.history).

A reset is a TCP RST (``SO_LINGER`` 0), so the client sees ECONNRESET, as from a real network.
A client cannot tell ``drop`` from ``reset``: that is the point. Draws come from one
``random.Random(seed)`` in the order requests arrive; with several clients that order depends on
timing, so a seed fixes the mix of faults, not which request gets which.
"""

from __future__ import annotations

import json
import random
import select
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from chaos_project.chaos.history import EffectRequest

DELAY = "delay"
DROP = "drop"
RESET = "reset"
DUP = "dup"
REFUSE = "refuse"
KINDS = (DELAY, DROP, RESET, DUP, REFUSE)
#: The refuse fault's answer: what an overloaded service says.
_REFUSED_BODY = b'{"detail": "overloaded (the chaos proxy)"}'
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(_REFUSED_BODY)).encode() + b"\r\n\r\n" + _REFUSED_BODY
)
EFFECTS_PATH = "/effects"

MAX_HEAD_BYTES = 64 * 1024
UPSTREAM_TIMEOUT_SECS = 60.0  # bounds a thread whose peer never sends
POLL_SECS = 0.5  # how often an idle connection looks at ``closing``


@dataclass(frozen=True, kw_only=True)
class NetFaultRates:
    """The chance of each fault per request, and how long a delay holds it (uniform)."""

    delay: float = 0.10
    drop: float = 0.03
    reset: float = 0.04
    delay_secs: tuple[float, float] = (0.02, 0.3)
    dup: float = 0.0
    refuse: float = 0.0

    def __post_init__(self) -> None:
        rates = (self.delay, self.drop, self.reset, self.dup, self.refuse)
        if min(rates) < 0 or sum(rates) > 1:
            raise ValueError(f"fault rates must be >= 0 and add up to <= 1, got {self}")


class Broken(Exception):
    """The connection ended in the middle of a message."""


@dataclass(frozen=True)
class Message:
    raw: bytes
    """The whole message as it came, head and body."""
    first_line: str
    close: bool
    """The connection ends after this message (Connection: close, HTTP/1.0, or read to EOF)."""


class FaultyProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` (host, port)."""

    def __init__(
        self, upstream: tuple[str, int], *, seed: int | str, rates: NetFaultRates | None = None
    ) -> None:
        self.upstream = upstream
        self.rates = rates or NetFaultRates()
        self.injecting = False
        self.counts: Counter[str] = Counter()
        self.requests = 0
        self.records: list[EffectRequest] = []
        """Every POST /effects and its answers (see the module's docstring)."""
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()
        return f"http://{host}:{port}"

    def start(self) -> FaultyProxy:
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        listener.settimeout(POLL_SECS)
        self._listener = listener
        self._spawn(self._accept, name="chaos-proxy-accept")
        return self

    def close(self) -> None:
        """Stop accepting, end every open connection, wait for the threads."""
        self._closing.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)
        for thread in list(self._threads):
            thread.join(timeout=5.0)
        if self._listener is not None:
            self._listener.close()

    def injected(self) -> dict[str, int]:
        """How many faults of each kind were applied (a fault is counted once it happened):
        delay, drop and reset, and dup and refuse when their rate is not 0."""
        kinds = [k for k in KINDS if k in (DELAY, DROP, RESET) or getattr(self.rates, k)]
        with self._lock:
            return {kind: self.counts[kind] for kind in kinds}

    # -- threads -----------------------------------------------------------------------------

    def _spawn(self, target, *args, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._track(client)
            self._spawn(self._serve, client, name="chaos-proxy-conn")

    def _track(self, sock: socket.socket) -> None:
        sock.settimeout(UPSTREAM_TIMEOUT_SECS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._sockets.add(sock)

    def _forget(self, sock: socket.socket | None, *, reset: bool = False) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.discard(sock)
        if reset:
            _reset(sock)
        else:
            _shutdown(sock)
            sock.close()

    # -- one client connection ---------------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        link = Link(client, Reader(client))
        reset = True  # a side broke mid-message: the other side sees it break too
        try:
            reset = self._exchanges(link)
        except (OSError, Broken):
            pass
        finally:
            self._forget(client, reset=reset)
            self._forget(link.upstream)

    def _exchanges(self, link: Link) -> bool:
        """Serve requests on one client connection until it ends; True to reset the client."""
        while not self._closing.is_set():
            if not self._wait_for_request(link):
                return False
            request = read_message(link.from_client)
            if request is None:
                return False
            fault, delay = self._draw()
            record = _Record.of(request, fault or "")
            answer = None
            try:
                answer = self._forward(link, request, fault, delay, record)
                if answer is not None and record is not None:
                    record.delivered(answer)
            finally:
                if record is not None:
                    self._keep(record)
            if answer is None:
                return True
            link.client.sendall(answer.raw)
            if request.close or answer.close:
                return False
        return True

    def _forward(
        self, link: Link, request: Message, fault: str | None, delay: float, record: _Record | None
    ) -> Message | None:
        """The answer to forward to the client; None to reset the client instead."""
        if fault == DELAY and self._closing.wait(delay):
            return None
        if fault == DROP:
            self._count(DROP)
            return None
        if fault == REFUSE:
            self._count(REFUSE)
            return Message(REFUSED, REFUSED.split(b"\r\n", 1)[0].decode("latin-1"), False)
        if link.upstream is None and not self._connect(link):
            return None  # nothing listens (the service is down): as if refused
        method = request.first_line.split(" ", 1)[0]
        twin = self._twin(request) if fault == DUP else None
        link.upstream.sendall(request.raw)
        answer = read_answer(link.from_upstream, method=method)
        if record is not None:
            record.answered(answer)
        if twin is not None:
            twin.join(UPSTREAM_TIMEOUT_SECS)
            if record is not None and twin.answer is not None:
                record.answered(twin.answer)
            self._count(DUP)
        if fault == RESET:
            self._count(RESET)
            return None
        if fault == DELAY:
            self._count(DELAY)
        return answer

    def _twin(self, request: Message) -> _Twin | None:
        """Send ``request`` again at once on a connection of its own (the dup fault)."""
        try:
            sock = socket.create_connection(self.upstream, timeout=UPSTREAM_TIMEOUT_SECS)
        except OSError:
            return None
        self._track(sock)
        twin = _Twin(sock, request, self._forget)
        twin.start()
        return twin

    def _keep(self, record: _Record) -> None:
        with self._lock:
            self.records.append(record.done())

    def _wait_for_request(self, link: Link) -> bool:
        """Until the client sends (True), or either side closes or the proxy stops (False)."""
        if link.from_client.buffered():
            return True
        watched = [s for s in (link.client, link.upstream) if s is not None]
        while not self._closing.is_set():
            readable, _, _ = select.select(watched, [], [], POLL_SECS)
            if link.client in readable:
                return True
            if link.upstream is not None and link.upstream in readable:
                # The service closed an idle connection (keep-alive timeout): pass that on.
                return False
        return False

    def _connect(self, link: Link) -> bool:
        try:
            upstream = socket.create_connection(self.upstream, timeout=UPSTREAM_TIMEOUT_SECS)
        except OSError:
            return False
        self._track(upstream)
        link.upstream, link.from_upstream = upstream, Reader(upstream)
        return True

    def _draw(self) -> tuple[str | None, float]:
        with self._lock:
            self.requests += 1
            if not self.injecting:
                return None, 0.0
            r = self._rng.random()
            delay = self._rng.uniform(*self.rates.delay_secs)
        rates = self.rates
        if r < rates.reset:
            return RESET, 0.0
        if r < rates.reset + rates.drop:
            return DROP, 0.0
        if r < rates.reset + rates.drop + rates.delay:
            return DELAY, delay
        if r < rates.reset + rates.drop + rates.delay + rates.dup:
            return DUP, 0.0
        if r < rates.reset + rates.drop + rates.delay + rates.dup + rates.refuse:
            return REFUSE, 0.0
        return None, 0.0

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1


@dataclass
class Link:
    """One client connection and the connection to the service made for it."""

    client: socket.socket
    from_client: Reader
    upstream: socket.socket | None = None
    from_upstream: Reader | None = None


class _Twin(threading.Thread):
    """The second copy of a duplicated request, on its own connection: sent and answered."""

    def __init__(self, sock: socket.socket, request: Message, forget) -> None:
        super().__init__(name="chaos-proxy-dup", daemon=True)
        self.sock = sock
        self.request = request
        self.forget = forget
        self.answer: Message | None = None

    def run(self) -> None:
        try:
            self.sock.sendall(self.request.raw)
            method = self.request.first_line.split(" ", 1)[0]
            self.answer = read_answer(Reader(self.sock), method=method)
        except (OSError, Broken):
            pass
        finally:
            self.forget(self.sock)


class _Record:
    """One POST /effects as it goes: the request's key, the service's answers, the delivery."""

    def __init__(self, key: str, fault: str) -> None:
        self.key = key
        self.fault = fault
        self.sent_at = _now()
        self.answers: list[tuple[int, bool, int | None]] = []
        self.delivered_status: int | None = None
        self.delivered_effect: int | None = None
        self.delivered_at: datetime | None = None

    @classmethod
    def of(cls, request: Message, fault: str) -> _Record | None:
        """A record for a POST /effects with a key; None for any other request."""
        parts = request.first_line.split(" ")
        if len(parts) < 2 or parts[0] != "POST" or parts[1].split("?", 1)[0] != EFFECTS_PATH:
            return None
        head = request.raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
        key = _headers(head).get("idempotency-key", "")
        return cls(key, fault) if key else None

    def answered(self, answer: Message) -> None:
        self.answers.append(_outcome(answer))

    def delivered(self, answer: Message) -> None:
        status, _, effect = _outcome(answer)
        self.delivered_status, self.delivered_effect = status, effect
        self.delivered_at = _now()

    def done(self) -> EffectRequest:
        return EffectRequest(
            key=self.key,
            sent_at=self.sent_at,
            fault=self.fault,
            answers=tuple(self.answers),
            delivered_status=self.delivered_status,
            delivered_effect=self.delivered_effect,
            delivered_at=self.delivered_at,
        )


def _now() -> datetime:
    return datetime.fromtimestamp(time.time(), UTC)


def _outcome(answer: Message) -> tuple[int, bool, int | None]:
    """(status, replay, the effect's id) of an answer of the effect service."""
    head, _, body = answer.raw.rpartition(b"\r\n\r\n")
    headers = _headers(head.decode("latin-1").split("\r\n")[1:])
    replay = headers.get("idempotent-replay", "").lower() == "true"
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    found = data.get("id") if isinstance(data, dict) else None
    effect = found if isinstance(found, int) and not isinstance(found, bool) else None
    return _status(answer.first_line), replay, effect


# -- HTTP/1.1 framing, just enough to know where a message ends ---------------------------------


class Reader:
    """Buffered reads from a socket; ``Broken`` when it ends in the middle of something."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def buffered(self) -> bool:
        return bool(self.buf)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def until(self, marker: bytes, limit: int = MAX_HEAD_BYTES) -> bytes | None:
        """Bytes up to and including ``marker``; None if the socket ends before any byte."""
        while (at := self.buf.find(marker)) < 0:
            if len(self.buf) > limit:
                raise Broken(f"no {marker!r} within {limit} bytes")
            if not self._fill():
                if self.buf:
                    raise Broken("the connection ended in the middle of a message")
                return None
        return self.take(at + len(marker))

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise Broken("the connection ended in the middle of a body")
        return self.take(n)

    def rest(self) -> bytes:
        while self._fill():
            pass
        return self.take(len(self.buf))

    def take(self, n: int) -> bytes:
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def read_message(reader: Reader, *, method: str = "") -> Message | None:
    """One request (``method`` empty) or one answer to ``method``; None at a clean end."""
    head = reader.until(b"\r\n\r\n")
    if head is None:
        return None
    lines = head.decode("latin-1").split("\r\n")
    first, headers = lines[0], _headers(lines[1:])
    version = (first.split(" ", 1)[0] if method else first.rsplit(" ", 1)[-1]).upper()
    connection = headers.get("connection", "").lower()
    close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if method and not _has_body(method, first):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = _chunked(reader)
    elif "content-length" in headers:
        body = reader.exact(int(headers["content-length"]))
    elif method:  # an answer without a length ends with the connection
        body, close = reader.rest(), True
    else:
        body = b""
    return Message(head + body, first, close)


def read_answer(reader: Reader, *, method: str) -> Message:
    """The final answer to a request (interim 1xx answers before it are kept in ``raw``)."""
    interim = b""
    while True:
        answer = read_message(reader, method=method)
        if answer is None:
            raise Broken("the service closed the connection without answering")
        status = _status(answer.first_line)
        if not 100 <= status < 200 or status == 101:
            return Message(interim + answer.raw, answer.first_line, answer.close)
        interim += answer.raw


def _headers(lines: list[str]) -> dict[str, str]:
    headers = {}
    for text in lines:
        name, sep, value = text.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers


def _status(first_line: str) -> int:
    try:
        return int(first_line.split(" ", 2)[1])
    except (IndexError, ValueError):
        raise Broken(f"not an HTTP status line: {first_line!r}") from None


def _has_body(method: str, first_line: str) -> bool:
    status = _status(first_line)
    return method.upper() != "HEAD" and not (100 <= status < 200 or status in (204, 304))


def _chunked(reader: Reader) -> bytes:
    raw = b""
    while True:
        size_line = reader.until(b"\r\n")
        if size_line is None:
            raise Broken("the connection ended in a chunked body")
        raw += size_line
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (trailer := reader.until(b"\r\n")) not in (None, b"\r\n"):
                raw += trailer
            return raw + b"\r\n"
        raw += reader.exact(size + 2)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN: the peer's next read fails with ECONNRESET."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
