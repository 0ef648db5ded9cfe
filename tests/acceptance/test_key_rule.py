"""One key, one meaning: an idempotency key is visible ASCII on every way in, as raw bytes.

An HTTP header carries bytes, not text: a server reads them as Latin-1, so ``café-8503`` sent
as UTF-8 would arrive as ``cafÃ©-8503``, be stored so, and miss the same key sent in a JSON
body or a URL (a second task, a second effect). Every request here is written byte by byte on
a socket to a real server, the effect service (waitress) and the host's API (pytest-django's
live server), so no client library re-encodes anything on the way.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
from urllib.parse import urlsplit

import pytest

from rivet.models import Task
from tests.factories import UserFactory

pytestmark = pytest.mark.acceptance

KEY = "café-8503"
GARBLED = KEY.encode().decode("latin-1")  # what a server makes of the UTF-8 bytes


def raw_request(base_url: str, head: bytes, body: bytes = b"") -> tuple[int, dict]:
    """Send ``head`` (request line and headers, CRLF-separated) and ``body``; the JSON answer."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        length = f"Content-Length: {len(body)}\r\n".encode() if body else b""
        host = f"Host: {parts.hostname}\r\nConnection: close\r\n".encode()
        sock.sendall(head + b"\r\n" + host + length + b"\r\n" + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        raw = response.read()
    assert response.getheader("Content-Type", "").startswith("application/json"), raw
    return response.status, json.loads(raw)


# -- the effect service ----------------------------------------------------------------------


def post_effect(base_url: str, key: bytes, amount: int = 100) -> tuple[int, dict]:
    head = b"POST /effects HTTP/1.1\r\nContent-Type: application/json\r\nIdempotency-Key: " + key
    return raw_request(base_url, head, json.dumps({"amount": amount}).encode())


@pytest.mark.parametrize(
    "key",
    [KEY.encode(), KEY.encode("latin-1"), b"tab\there", "\N{GRINNING FACE}".encode()],
    ids=["utf-8", "latin-1", "tab", "emoji"],
)
def test_the_effect_service_refuses_a_key_that_is_not_visible_ascii(
    effect_service, effect_db, key
) -> None:
    for _ in range(2):  # a retry is refused the same way: never a first, nor a second, effect
        status, body = post_effect(effect_service.url, key)
        assert (status, body["code"]) == (400, "idempotency_key_invalid"), body
        assert "visible ASCII" in body["detail"]
    text = key.decode("latin-1")
    assert (effect_db.effects(text), effect_db.dedups(text)) == (0, 0)
    assert effect_db.scalar("SELECT count(*) FROM effects_effect") == 0


def test_the_effect_service_keeps_one_effect_for_an_ascii_key(effect_service, effect_db) -> None:
    assert post_effect(effect_service.url, b"cafe-8503")[0] == 201
    assert post_effect(effect_service.url, b"cafe-8503")[0] == 200  # the replay
    assert effect_db.effects("cafe-8503") == 1
    status, body = raw_request(effect_service.url, b"GET /effects/cafe-8503 HTTP/1.1")
    assert (status, body["key"]) == (200, "cafe-8503")


@pytest.mark.parametrize(
    "path",
    [b"/effects/caf%C3%A9-8503", b"/effects/a%00b", b"/effects/%20ab", b"/effects/a%09b"],
    ids=["utf-8", "nul", "leading-space", "tab"],
)
def test_a_key_in_the_path_that_no_post_could_store_is_400(effect_service, path) -> None:
    status, body = raw_request(effect_service.url, b"GET " + path + b" HTTP/1.1")
    assert (status, body["code"]) == (400, "idempotency_key_invalid"), body


# -- the host's API --------------------------------------------------------------------------


@pytest.fixture
def api_head(live_server):
    """The start of a POST to rivet/tasks/ as a user who may enqueue."""
    UserFactory(username="producer", password="pw", permissions=["rivet.add_task"])
    auth = base64.b64encode(b"producer:pw")
    return (
        b"POST /rivet/tasks/ HTTP/1.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Basic " + auth
    )


def enqueue(live_server, head: bytes, key: bytes | None = None, body_key: str | None = None):
    if key is not None:
        head += b"\r\nIdempotency-Key: " + key
    body = {"kind": "noop", "payload": {"n": 1}}
    if body_key is not None:
        body["idem_key"] = body_key
    return raw_request(live_server.url, head, json.dumps(body, ensure_ascii=False).encode())


@pytest.mark.django_db(transaction=True)
def test_the_api_refuses_a_key_that_is_not_visible_ascii_in_header_and_body(
    live_server, api_head
) -> None:
    for header, field in [(KEY.encode(), None), (None, KEY), (KEY.encode(), KEY)]:
        for _ in range(2):
            status, body = enqueue(live_server, api_head, header, field)
            assert (status, body["code"]) == (400, "idempotency_key_invalid"), body
            assert "visible ASCII" in body["idem_key"][0]
    assert enqueue(live_server, api_head, KEY.encode("latin-1"))[0] == 400
    assert enqueue(live_server, api_head, None, GARBLED)[0] == 400
    assert Task.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_ascii_key_is_one_task_by_header_or_by_body(live_server, api_head) -> None:
    status, first = enqueue(live_server, api_head, b"cafe-8503")
    assert status == 201, first
    status, again = enqueue(live_server, api_head, None, "cafe-8503")
    assert (status, again["id"]) == (200, first["id"])
    assert list(Task.objects.values_list("idem_key", flat=True)) == ["cafe-8503"]


# -- a header sent twice ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", [b"/rivet/tasks/", b"/rivet/tasks/bulk/"])
def test_the_api_refuses_an_idempotency_key_header_sent_twice(live_server, api_head, path):
    """The server joins the two into one value ("a,b" here): never taken as a key of its own."""
    head = api_head.replace(b"/rivet/tasks/", path, 1)
    head += b"\r\nIdempotency-Key: a\r\nIdempotency-Key: b"
    item = {"kind": "noop", "payload": {"n": 1}}
    body = item if path == b"/rivet/tasks/" else {"tasks": [item]}
    for _ in range(2):
        status, answer = raw_request(live_server.url, head, json.dumps(body).encode())
        assert (status, answer["code"]) == (400, "idempotency_key_invalid"), answer
        assert "a server joins a header sent twice with a comma" in answer["idem_key"][0]
    assert Task.objects.count() == 0


def test_the_effect_service_refuses_an_idempotency_key_header_sent_twice(
    effect_service, effect_db
) -> None:
    """waitress joins the two with ", "; the same header twice is refused all the same."""
    for second in (b"b", b"a"):
        status, body = post_effect(effect_service.url, b"a\r\nIdempotency-Key: " + second)
        assert (status, body["code"]) == (400, "idempotency_key_invalid"), body
    assert effect_db.scalar("SELECT count(*) FROM effects_effect") == 0
