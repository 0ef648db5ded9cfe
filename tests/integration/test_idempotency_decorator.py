"""@idempotent on a user's own DRF view: the dedup row and the view's writes commit together."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from rivet.idempotency import decorators
from rivet.idempotency.decorators import idempotent
from rivet.idempotency.models import IdempotencyRecord

pytestmark = pytest.mark.django_db


class CreateGroup(APIView):
    @idempotent(scope="groups")
    def post(self, request):
        owner = request.user.username if request.user.is_authenticated else "anonymous"
        group = Group.objects.create(name=f"{request.data['name']}/{owner}")
        return Response({"id": group.id, "name": group.name}, status=201)


def post(key: str, body: dict, user: User | None = None):
    request = APIRequestFactory().post("/groups", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    if user is not None:
        force_authenticate(request, user=user)
    return CreateGroup.as_view()(request)


def test_a_repeated_key_replays_the_first_answer_and_writes_once():
    first, again = post("k-1", {"name": "a"}), post("k-1", {"name": "a"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again["idempotent-replay"] == "true"
    assert again.content == first.content
    assert Group.objects.count() == 1


def test_the_same_key_with_another_body_is_422_and_writes_nothing():
    post("k-1", {"name": "a"})
    refused = post("k-1", {"name": "b"})
    refused.render()
    assert refused.status_code == 422
    assert "k-1" in refused.content.decode()
    assert list(Group.objects.values_list("name", flat=True)) == ["a/anonymous"]


def test_each_user_has_a_key_space_of_their_own():
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    for_alice = post("k-1", {"name": "a"}, alice)
    for_bob = post("k-1", {"name": "a"}, bob)
    # Bob's request is not a replay of Alice's answer: it runs, and fails on the unique name.
    assert for_alice.status_code == 201
    assert not for_bob.has_header("idempotent-replay")
    assert IdempotencyRecord.objects.filter(key="k-1").count() == 1 + (for_bob.status_code == 201)


def test_a_view_error_is_not_remembered_and_rolls_back_the_dedup_row():
    with pytest.raises(KeyError):
        post("k-2", {"wrong": "field"})
    assert not IdempotencyRecord.objects.filter(key="k-2").exists()
    assert post("k-2", {"name": "c"}).status_code == 201


def test_a_new_key_takes_one_statement_on_the_dedup_table_before_the_view():
    with CaptureQueriesContext(connection) as queries:
        assert post("k-3", {"name": "d"}).status_code == 201
    dedup = [q["sql"] for q in queries if IdempotencyRecord._meta.db_table in q["sql"]]
    assert len(dedup) == 2, dedup  # the insert, then the stored answer
    assert "ON CONFLICT" in dedup[0] and dedup[1].startswith("UPDATE")
    record = IdempotencyRecord.objects.get(key="k-3")
    assert (record.response_status, record.created_at is not None) == (201, True)


def test_other_databases_get_get_or_create_with_the_same_answers(monkeypatch):
    monkeypatch.setattr(decorators, "_UPSERT_VENDORS", frozenset())
    with CaptureQueriesContext(connection) as queries:
        first = post("k-4", {"name": "e"})
    assert not any("ON CONFLICT" in q["sql"] for q in queries)
    again, other = post("k-4", {"name": "e"}), post("k-4", {"name": "f"})
    other.render()
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 422)
    assert again.content == first.content
    assert list(Group.objects.values_list("name", flat=True)) == ["e/anonymous"]
