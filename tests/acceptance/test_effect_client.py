"""effect_project.client against a real effect service, and against nothing at all."""

from __future__ import annotations

import socket
import uuid

import pytest

from effect_project.client import (
    EffectRejected,
    EffectUnavailable,
    fetch_verify,
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
