"""What the effect service answers to input users send it from outside: a real server (waitress).

Every answer the application gives is JSON with a ``code``; what waitress refuses before the
application sees it is pinned here too, as docs/effect-service.md describes it.
"""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.acceptance


def new_key(label: str = "k") -> str:
    return f"{label}-{uuid.uuid4().hex}"


def nested(depth: int, inner: str = "1") -> bytes:
    """A JSON object whose ``v`` holds ``depth - 1`` arrays inside each other."""
    return ('{"v":' + "[" * (depth - 1) + inner + "]" * (depth - 1) + "}").encode()


def raw(base_url: str, head: bytes, body: bytes = b"") -> tuple[int, str, bytes]:
    """Send the request line and headers byte for byte; the status, Content-Type and body."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(
            head
            + f"\r\nHost: {parts.hostname}\r\nConnection: close\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.getheader("Content-Type", ""), response.read()


def post_head(*headers: str) -> bytes:
    lines = ["POST /effects HTTP/1.1", "Content-Type: application/json", *headers]
    return "\r\n".join(lines).encode()


def assert_json_error(reply, status: int, code: str) -> dict:
    assert reply.headers["content-type"] == "application/json", reply
    assert (reply.status, reply.json.get("code")) == (status, code), reply.text
    return reply.json


@pytest.mark.parametrize(
    "body",
    [
        nested(5000),  # past Python's recursion limit: was a 500 text/plain
        ("[" * 5000 + "]" * 5000).encode(),
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        nested(101),
    ],
    ids=["object-5000", "array-5000", "objects-5000", "object-101"],
)
def test_a_body_nested_past_the_limit_is_400_json_and_writes_nothing(
    effect_service, effect_db, body
):
    key = new_key()
    reply = effect_service.post(key, raw=body)
    error = assert_json_error(reply, 400, "parse_error")
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in error["detail"]
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    # The key stays usable: a refused body is not remembered.
    assert effect_service.post(key, {"amount": 1}).status == 201


def test_a_body_nested_100_levels_is_an_effect(effect_service, effect_db):
    key = new_key()
    reply = effect_service.post(key, raw=nested(100))
    assert reply.status == 201, reply.text
    assert reply.json["body"] == json.loads(nested(100))
    assert effect_db.effects(key) == 1


def test_an_empty_body_is_refused_not_taken_as_an_empty_effect(effect_service, effect_db):
    key = new_key()
    reply = effect_service.post(key, raw=b"")
    body = assert_json_error(reply, 400, "invalid")
    assert body["body"].startswith("is empty; an effect is a JSON object")
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    assert effect_service.post(key, {}).status == 201  # an explicit {} is an effect


def test_a_charset_other_than_utf8_is_415_and_utf8_reads_back_as_sent(effect_service, effect_db):
    key = new_key()
    body = '{"name": "café"}'.encode()
    refused = effect_service.post(key, raw=body, content_type="application/json; charset=latin-1")
    error = assert_json_error(refused, 415, "unsupported_media_type")
    assert "charset=latin-1" in error["detail"] and "UTF-8" in error["detail"]
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    taken = effect_service.post(key, raw=body, content_type="application/json; charset=UTF-8")
    assert (taken.status, taken.json["body"]) == (201, {"name": "café"})


@pytest.mark.parametrize("second", ["b", "a"])
def test_a_repeated_key_header_is_400_json_and_writes_nothing(effect_service, effect_db, second):
    """waitress joins the two into "a, b": a comma is no key character, so it is refused."""
    status, content_type, answer = raw(
        effect_service.url, post_head("Idempotency-Key: a", f"Idempotency-Key: {second}"), b"{}"
    )
    error = json.loads(answer)
    assert (status, content_type, error["code"]) == (
        400,
        "application/json",
        "idempotency_key_invalid",
    )
    assert "a server joins a header sent twice with a comma" in error["detail"]
    assert effect_db.scalar("SELECT count(*) FROM effects_effect") == 0


def test_a_control_byte_in_the_key_header_is_refused_by_waitress_before_the_service(
    effect_service, effect_db
):
    """What docs/effect-service.md says: waitress answers this 400 itself, in plain text."""
    status, content_type, _ = raw(effect_service.url, post_head("Idempotency-Key: a\x01b"), b"{}")
    assert (status, content_type.split(";")[0]) == (400, "text/plain")
    assert effect_db.scalar("SELECT count(*) FROM effects_effect") == 0


def test_a_key_in_the_path_no_post_could_store_is_400_like_the_post(effect_service):
    too_long = effect_service.get("/effects/" + "k" * 201)
    error = assert_json_error(too_long, 400, "idempotency_key_too_long")
    assert error["detail"] == "the key in the path is 201 characters long; the limit is 200"
    assert_json_error(effect_service.get("/effects/a,b"), 400, "idempotency_key_invalid")
    assert_json_error(effect_service.get("/effects/" + "k" * 200), 404, "not_found")


@pytest.mark.parametrize("path", ["/effects/", "/nothing", "/health/x"])
def test_a_path_the_service_does_not_serve_is_404_json_with_a_code(effect_service, path):
    error = assert_json_error(effect_service.get(path), 404, "not_found")
    assert "GET /effects/<key>" in error["detail"]


def test_a_host_not_allowed_is_400_json_with_a_code(effect_service):
    status, content_type, answer = raw(
        effect_service.url, b"GET /health HTTP/1.1\r\nHost: evil.test"
    )
    error = json.loads(answer)
    assert (status, content_type, error["code"]) == (400, "application/json", "bad_request")
    assert "evil.test" in error["detail"]
