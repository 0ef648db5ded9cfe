"""effect_project.aclient (the asyncio client) against a real effect service, a raw server that
misbehaves, and nothing at all: the sync client's tests (test_effect_client.py), awaited."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid

import pytest

from effect_project.aclient import apost_effect, opened_connections
from effect_project.client import EffectRejected, EffectUnavailable, fetch_verify
from rivet.errors import RivetError
from tests.acceptance.test_effect_client import one_shot  # noqa: F401 - a fixture

pytestmark = pytest.mark.acceptance


def test_second_post_of_a_key_is_a_replay_of_the_first(effect_service, effect_db):
    key = f"aclient-{uuid.uuid4().hex}"

    async def both():
        first = await apost_effect(effect_service.url, key, {"amount": 100})
        again = await apost_effect(effect_service.url + "/", key, {"amount": 100})
        return first, again

    first, again = asyncio.run(both())
    assert (first.status, first.replay) == (201, False)
    assert (again.status, again.replay) == (200, True)
    assert again.body == first.body and first.body["key"] == key
    assert fetch_verify(effect_service.url)["effects_written"] == 1


def test_key_reused_with_another_body_raises_rejected(effect_service, effect_db):
    key = f"aclient-{uuid.uuid4().hex}"

    async def twice():
        await apost_effect(effect_service.url, key, {"amount": 1})
        await apost_effect(effect_service.url, key, {"amount": 2})

    with pytest.raises(EffectRejected) as caught:
        asyncio.run(twice())
    assert caught.value.status == 422 and key in caught.value.body
    assert isinstance(caught.value, RivetError)


def test_server_error_raises_unavailable(failing_effect_service, effect_db):
    with pytest.raises(EffectUnavailable) as caught:
        asyncio.run(apost_effect(failing_effect_service.url, "k", {"amount": 1}))
    assert caught.value.status == 500


def test_nothing_listening_raises_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(EffectUnavailable) as caught:
        asyncio.run(apost_effect(f"http://127.0.0.1:{port}", "k", {"amount": 1}, timeout=5))
    assert caught.value.status is None


def test_a_kept_connection_the_server_closed_is_replaced_by_a_new_one(one_shot):  # noqa: F811
    server = one_shot()

    async def two():
        first = await apost_effect(server.url, "k-1", {"n": 1})
        await asyncio.sleep(0.1)  # the server has closed the connection the client keeps
        return first, await apost_effect(server.url, "k-2", {"n": 2})

    first, second = asyncio.run(two())
    assert (first.status, second.status) == (201, 201)
    assert (server.requests, server.connections) == (2, 2)


def test_a_request_the_server_dropped_unanswered_is_sent_once_more(one_shot):  # noqa: F811
    server = one_shot(drop_first=True)
    answer = asyncio.run(apost_effect(server.url, "k-dropped", {"n": 1}))
    assert answer.status == 201
    assert (server.requests, server.connections) == (2, 2)


def test_an_answer_that_never_comes_is_sent_once_more_then_unavailable(one_shot):  # noqa: F811
    server = one_shot(answer=False)
    started = time.monotonic()
    with pytest.raises(EffectUnavailable) as caught:
        asyncio.run(apost_effect(server.url, "k-slow", {"n": 1}, timeout=0.3))
    assert time.monotonic() - started < 5
    assert (server.requests, server.connections) == (2, 2)
    assert "TimeoutError" in str(caught.value) and caught.value.status is None


def test_a_cancel_ends_the_wait_for_an_answer_and_drops_the_connection(one_shot):  # noqa: F811
    server = one_shot(answer=False)

    async def cancelled():
        request = asyncio.ensure_future(apost_effect(server.url, "k-cancel", {"n": 1}))
        while server.requests == 0:
            await asyncio.sleep(0.01)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request

    asyncio.run(cancelled())
    assert server.requests == 1  # a cancel is never sent again


def test_many_coroutines_post_at_once_and_reuse_their_connections(effect_service, effect_db):
    url = effect_service.url

    async def rounds():
        for _ in range(2):
            answers = await asyncio.gather(
                *(apost_effect(url, f"many-{uuid.uuid4().hex}", {"n": n}) for n in range(20))
            )
            assert {a.status for a in answers} == {201}
        return opened_connections()

    opened = asyncio.run(rounds())
    assert 1 <= opened <= 20  # the second round ran on the first round's connections
    assert fetch_verify(url)["effects_written"] == 40
