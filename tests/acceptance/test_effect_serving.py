"""A client that stops reading must not slow the others (a SIGSTOPped worker is such a client).

The effect service once ran on gunicorn's gthread worker, which closes a ``Connection: close``
socket on its main loop and lingers up to 2 s for the client's FIN: two clients that sent a
request and never read made every other request wait ~2 s each (docs/effect-service.md,
"Serving"). These tests hold sockets like that open against the real server and compare a
probe's latency with and without them. The bound is generous and relative to the chaos lease
(2 s): a stall of the old kind costs a full lease or more per probe; noise costs milliseconds.
"""

from __future__ import annotations

import json
import socket
import statistics
import time
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest

from effect_project.client import kept_connection, post_effect

pytestmark = pytest.mark.acceptance

LEASE_SECS = 2.0  # the chaos run's lease
STUCK_PER_PROBE = 2
PROBES = 6


def send_and_never_read(url: str) -> socket.socket:
    """A full ``POST /effects`` with ``Connection: close``; the answer is never read."""
    where = urllib.parse.urlsplit(url)
    body = json.dumps({"stuck": True}).encode()
    head = (
        f"POST /effects HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/json\r\n"
        f"Idempotency-Key: stuck-{uuid.uuid4().hex}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    sock = socket.create_connection((where.hostname, where.port), timeout=5)
    sock.sendall(head.encode() + body)
    return sock


def probe_secs(url: str) -> float:
    started = time.monotonic()
    post_effect(url, f"probe-{uuid.uuid4().hex}", {"probe": True})
    return time.monotonic() - started


@pytest.fixture
def stuck_sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def test_clients_that_never_read_do_not_delay_a_probe(effect_service, effect_db, stuck_sockets):
    url = effect_service.url
    probe_secs(url)  # the first request opens the pooled connection
    alone = statistics.median(probe_secs(url) for _ in range(PROBES))
    beside_stuck = []
    for _ in range(PROBES):
        stuck_sockets.extend(send_and_never_read(url) for _ in range(STUCK_PER_PROBE))
        time.sleep(0.05)  # the server has read them and answered into their buffers
        beside_stuck.append(probe_secs(url))
    assert statistics.median(beside_stuck) < alone + LEASE_SECS / 2, (
        f"probe {alone:.3f} s alone, {beside_stuck} beside {len(stuck_sockets)} stuck clients"
    )
    # The stuck clients' requests were served all the same: their effects exist.
    written = effect_db.scalar("SELECT count(*) FROM effects_effect WHERE key LIKE 'stuck-%%'")
    assert written == len(stuck_sockets)


def test_one_thread_keeps_one_connection_alive_for_sequential_effects(effect_service, effect_db):
    post_effect(effect_service.url, f"kept-{uuid.uuid4().hex}", {"n": -1})  # one is kept now
    opened, sent = kept_connection(effect_service.url)
    for n in range(5):
        post_effect(effect_service.url, f"kept-{uuid.uuid4().hex}", {"n": n})
    assert kept_connection(effect_service.url) == (opened, sent + 5)
