"""effect_project.client against a real effect service, and against nothing at all."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from effect_project.client import (
    EffectRejected,
    EffectUnavailable,
    fetch_verify,
    kept_connection,
    post_effect,
)
from rivet.errors import RivetError

pytestmark = pytest.mark.acceptance


def test_second_post_of_a_key_is_a_replay_of_the_first(effect_service, effect_db):
    key = f"client-{uuid.uuid4().hex}"
    first = post_effect(effect_service.url, key, {"amount": 100})
    again = post_effect(effect_service.url + "/", key, {"amount": 100})
    assert (first.status, first.replay) == (201, False)
    assert (again.status, again.replay) == (200, True)
    assert again.body == first.body
    assert first.body["key"] == key
    assert fetch_verify(effect_service.url)["effects_written"] == 1


def test_key_reused_with_another_body_raises_rejected(effect_service, effect_db):
    key = f"client-{uuid.uuid4().hex}"
    post_effect(effect_service.url, key, {"amount": 1})
    with pytest.raises(EffectRejected) as caught:
        post_effect(effect_service.url, key, {"amount": 2})
    assert caught.value.status == 422
    assert key in caught.value.body
    assert isinstance(caught.value, RivetError)


def test_server_error_raises_unavailable(failing_effect_service, effect_db):
    with pytest.raises(EffectUnavailable) as caught:
        post_effect(failing_effect_service.url, f"client-{uuid.uuid4().hex}", {"amount": 1})
    assert caught.value.status == 500


def test_nothing_listening_raises_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free, and closed again when the block ends
    with pytest.raises(EffectUnavailable) as caught:
        post_effect(f"http://127.0.0.1:{port}", "k", {"amount": 1}, timeout=5)
    assert caught.value.status is None


class OneShotServer:
    """A raw HTTP/1.1 server on a thread: answers each connection's first request with 201 and
    a JSON body, without ``Connection: close``, then closes it (a kept-alive connection the
    server dropped) or, with ``answer=False``, reads the request and never answers; with
    ``drop_first``, the first request is read and its connection closed unanswered."""

    def __init__(self, *, answer: bool = True, drop_first: bool = False) -> None:
        self.answer = answer
        self.drop_first = drop_first
        self.requests = 0
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections += 1
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                request += chunk
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0] or 0)
            while len(body) < length:
                body += sock.recv(65536)
            self.requests += 1
            if self.drop_first and self.requests == 1:
                sock.close()  # as a server that died mid-request
                continue
            if not self.answer:
                self.held.append(sock)  # read, never answered
                continue
            text = b'{"id":1}'
            sock.sendall(
                b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(text)}\r\n\r\n".encode()
                + text
            )
            sock.close()

    def close(self) -> None:
        self.listener.close()
        for sock in self.held:
            sock.close()


@pytest.fixture
def one_shot():
    servers: list[OneShotServer] = []

    def start(**options) -> OneShotServer:
        servers.append(OneShotServer(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_kept_connection_the_server_closed_is_replaced_by_a_new_one(one_shot):
    server = one_shot()
    first = post_effect(server.url, "k-1", {"n": 1})
    time.sleep(0.1)  # the server has closed the connection the client keeps
    second = post_effect(server.url, "k-2", {"n": 2})
    assert (first.status, second.status) == (201, 201)
    assert (server.requests, server.connections) == (2, 2)


def test_a_request_the_server_dropped_unanswered_is_sent_once_more(one_shot):
    server = one_shot(drop_first=True)
    answer = post_effect(server.url, "k-dropped", {"n": 1})
    assert answer.status == 201
    assert (server.requests, server.connections) == (2, 2)


def test_an_answer_that_never_comes_is_sent_once_more_then_unavailable(one_shot):
    server = one_shot(answer=False)
    started = time.monotonic()
    with pytest.raises(EffectUnavailable) as caught:
        post_effect(server.url, "k-slow", {"n": 1}, timeout=0.3)
    assert time.monotonic() - started < 5
    assert (server.requests, server.connections) == (2, 2)  # sent, then sent once more
    assert "timed out" in str(caught.value) and caught.value.status is None


def test_each_thread_keeps_its_own_connection(effect_service, effect_db):
    """A worker's handler threads post at once: none waits for another's connection, and each
    reuses its own for its next effect."""
    url = effect_service.url
    seen: dict[int, tuple[int, int]] = {}
    together = threading.Barrier(4)

    def two_effects(n: int) -> None:
        together.wait(timeout=10)
        for _ in range(2):
            post_effect(url, f"thread-{uuid.uuid4().hex}", {"n": n})
        seen[n] = kept_connection(url)

    threads = [threading.Thread(target=two_effects, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert seen == {n: (1, 2) for n in range(4)}  # one connection each, both effects on it
