"""rivet's HTTP API through DRF's APIClient, on PostgreSQL and on the SQLite alias."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from rivet.api.errors import ERROR_CODES
from rivet.models import Task
from rivet.stores import store_for_alias
from tests.factories import UserFactory, task_in

pytestmark = pytest.mark.django_db(databases=["default", "sqlite"])

ALL_PERMS = [
    "rivet.view_task",
    "rivet.add_task",
    "rivet.requeue_deadletter",
    "rivet.purge_deadletter",
    "rivet.cancel_task",
]
TASKS, BULK = "/rivet/tasks/", "/rivet/tasks/bulk/"


@pytest.fixture(params=["default", "sqlite"], ids=["postgres", "sqlite"])
def alias(request, settings) -> str:
    """The database rivet's store (and so the API) uses."""
    settings.RIVET = {**settings.RIVET, "DATABASE_ALIAS": request.param}
    return request.param


def client_for(*perms: str) -> APIClient:
    client = APIClient()
    client.force_login(UserFactory(permissions=list(perms)))
    return client


@pytest.fixture
def api(alias) -> APIClient:
    """A client logged in as a user with every rivet permission."""
    return client_for(*ALL_PERMS)


def rows(alias: str) -> int:
    return Task.objects.using(alias).count()


def enqueue(api: APIClient, body: dict, **headers):
    return api.post(TASKS, body, format="json", headers=headers)


def assert_error(response, status: int, code: str) -> dict:
    body = response.json()
    assert (response.status_code, body.get("code")) == (status, code), body
    assert body["detail"], body
    assert status in ERROR_CODES[code][0]
    return body


# -- POST tasks/ -----------------------------------------------------------------------------


def test_enqueue_creates_a_task(api, alias) -> None:
    response = enqueue(api, {"kind": "noop", "payload": {"n": 1}, "queue": "mail", "priority": 5})
    assert response.status_code == 201, response.json()
    task = response.json()
    assert (task["kind"], task["queue"], task["payload"], task["priority"]) == (
        "noop",
        "mail",
        {"n": 1},
        5,
    )
    assert task["state"] == "pending"
    assert Task.objects.using(alias).get(id=task["id"]).payload == {"n": 1}


def test_same_key_same_work_answers_200_with_the_existing_task(api, alias) -> None:
    body = {"kind": "noop", "payload": {"n": 1}, "idem_key": "order-7"}
    first = enqueue(api, body)
    again = enqueue(api, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert rows(alias) == 1


def test_same_key_different_work_answers_422_naming_the_key(api, alias) -> None:
    first = enqueue(api, {"kind": "noop", "payload": {"n": 1}, "idem_key": "order-7"})
    other = enqueue(api, {"kind": "noop", "payload": {"n": 2}, "idem_key": "order-7"})
    body = assert_error(other, 422, "idempotency_mismatch")
    assert (body["idem_key"], body["existing_task_id"]) == ("order-7", first.json()["id"])
    assert "order-7" in body["detail"]
    assert rows(alias) == 1


def test_the_key_may_come_from_the_header(api, alias) -> None:
    first = enqueue(api, {"kind": "noop"}, **{"Idempotency-Key": "hdr-1"})
    again = enqueue(api, {"kind": "noop", "idem_key": "hdr-1"}, **{"Idempotency-Key": "hdr-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["idem_key"] == "hdr-1"


def test_header_and_field_keys_that_differ_are_refused(api, alias) -> None:
    response = enqueue(api, {"kind": "noop", "idem_key": "a"}, **{"Idempotency-Key": "b"})
    body = assert_error(response, 400, "idempotency_key_conflict")
    assert "idem_key" in body
    assert rows(alias) == 0


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"kind": "no spaces"}, "kind", "invalid_name"),
        ({"kind": "noop", "queue": "bad/queue"}, "queue", "invalid_name"),
        ({"kind": ""}, "kind", "invalid_name"),
        ({}, "kind", "invalid_input"),
        ({"kind": "noop", "priority": 101}, "priority", "invalid_input"),
        ({"kind": "noop", "priority": "high"}, "priority", "invalid_input"),
        ({"kind": "noop", "delay": -1}, "delay", "invalid_input"),
        ({"kind": "noop", "delay": 1e300}, "delay", "invalid_input"),
        ({"kind": "noop", "delay": True}, "delay", "invalid_input"),
        ({"kind": "noop", "delay": False}, "delay", "invalid_input"),
        ({"kind": "noop", "priority": True}, "priority", "invalid_input"),
        ({"kind": "noop", "idem_key": 42}, "idem_key", "invalid_input"),
        ({"kind": "noop", "unique_key": -1.7087754334319152e16}, "unique_key", "invalid_input"),
        ({"kind": "noop", "unique_key": 7}, "unique_key", "invalid_input"),
        ({"kind": 123}, "kind", "invalid_input"),
        ({"kind": "noop", "queue": 5}, "queue", "invalid_input"),
        ({"kind": "noop", "idem_key": "café-8503"}, "idem_key", "idempotency_key_invalid"),
        ({"kind": "noop", "idem_key": " lead"}, "idem_key", "idempotency_key_invalid"),
        ({"kind": "noop", "max_attempts": 0}, "max_attempts", "invalid_input"),
        ({"kind": "noop", "idem_key": "tab\there"}, "idem_key", "idempotency_key_invalid"),
        ({"kind": "noop", "payload": {"t": "a\u0000b"}}, "payload", "invalid_input"),
    ],
)
def test_bad_fields_answer_400_with_field_errors(api, alias, body, field, code) -> None:
    body = assert_error(enqueue(api, body), 400, code)
    assert isinstance(body[field], list) and body[field], body
    assert rows(alias) == 0


def test_every_bad_field_is_reported_at_once(api, alias) -> None:
    body = assert_error(enqueue(api, {"kind": "a b", "priority": 500}), 400, "invalid_input")
    assert set(body) == {"detail", "code", "kind", "priority"}
    assert body["detail"] == "2 errors; see the fields"


def test_a_body_that_is_not_json_answers_400(api, alias) -> None:
    response = api.post(TASKS, data='{"kind": ', content_type="application/json")
    assert_error(response, 400, "invalid_json")


def nested(depth: int) -> str:
    """JSON text of ``depth`` arrays inside each other."""
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("path", [TASKS, BULK])
def test_a_body_nested_past_any_parser_answers_400_json_and_writes_nothing(api, alias, path):
    """Deep enough to make Python's parser recurse past its limit: refused before it runs."""
    payload = nested(5000)
    body = (
        f'{{"kind": "noop", "payload": {payload}}}'
        if path == TASKS
        else f'{{"tasks": [{{"kind": "noop", "payload": {payload}}}]}}'
    )
    response = api.post(path, data=body, content_type="application/json")
    answer = assert_error(response, 400, "invalid_json")
    assert f"{5001 if path == TASKS else 5003} levels deep" in answer["detail"], answer
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in answer["detail"]
    assert rows(alias) == 0


@pytest.mark.parametrize("path", [TASKS, BULK])
def test_a_payload_one_level_past_the_limit_is_refused_as_the_payload_and_100_is_taken(
    api, alias, path
):
    def send(depth: int):
        item = f'{{"kind": "noop", "payload": {nested(depth)}}}'
        body = item if path == TASKS else f'{{"tasks": [{item}]}}'
        return api.post(path, data=body, content_type="application/json")

    refused = send(101).json()
    # One call's payload is refused by the payload's own check; a bulk call's envelope is
    # three levels, so its parser finds the body one level too deep.
    code = "invalid_input" if path == TASKS else "invalid_json"
    assert (refused["code"], "at most 100 levels") == (code, "at most 100 levels"), refused
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in refused["detail"], refused
    assert rows(alias) == 0
    assert send(100).status_code == 201
    assert rows(alias) == 1


def bulk(api: APIClient, tasks: list[dict], **headers):
    return api.post(BULK, {"tasks": tasks}, format="json", headers=headers)


BATCH = [{"kind": "noop", "payload": {"n": 1}}, {"kind": "noop", "payload": {"n": 2}}]


def test_a_bulk_call_sent_again_under_its_idempotency_key_writes_nothing(api, alias) -> None:
    first = bulk(api, BATCH, **{"Idempotency-Key": "batch-7"})
    assert first.status_code == 201, first.json()
    again = bulk(api, BATCH, **{"Idempotency-Key": "batch-7"})
    assert again.status_code == 200, again.json()
    ids = [item["task"]["id"] for item in first.json()["results"]]
    assert [item["task"]["id"] for item in again.json()["results"]] == ids
    assert [item["created"] for item in again.json()["results"]] == [False, False]
    keys = Task.objects.using(alias).order_by("id").values_list("idem_key", flat=True)
    assert list(keys) == ["batch-7:0", "batch-7:1"]


def test_other_tasks_under_a_bulk_idempotency_key_are_422_and_write_nothing(api, alias) -> None:
    assert bulk(api, BATCH, **{"Idempotency-Key": "batch-8"}).status_code == 201
    more = bulk(api, [*BATCH, {"kind": "noop"}], **{"Idempotency-Key": "batch-8"})
    body = assert_error(more, 422, "idempotency_mismatch")
    assert "'batch-8' already names a bulk call of other tasks" in body["detail"]
    changed = bulk(
        api, [BATCH[0], {"kind": "noop", "payload": 3}], **{"Idempotency-Key": "batch-8"}
    )
    assert_error(changed, 422, "idempotency_mismatch")
    fewer = bulk(api, BATCH[:1], **{"Idempotency-Key": "batch-8"})  # a part of the first call
    body = assert_error(fewer, 422, "idempotency_mismatch")
    assert "already names a bulk call of more tasks than these 1" in body["detail"]
    assert rows(alias) == 2


@pytest.mark.parametrize(
    ("key", "tasks", "code"),
    [
        ("a,b", BATCH, "idempotency_key_invalid"),  # two headers, as a server joins them
        ("a, b", BATCH, "idempotency_key_invalid"),
        ("caf\u00e9", BATCH, "idempotency_key_invalid"),
        ("k" * 199, BATCH, "idempotency_key_invalid"),  # "k...k:1" would be 201 characters
        ("b-9", [{**BATCH[0], "idem_key": "own"}], "idempotency_key_conflict"),
    ],
    ids=["comma", "comma-space", "latin-1", "too-long-with-index", "item-key-too"],
)
def test_a_bulk_idempotency_key_that_cannot_key_the_tasks_is_400(api, alias, key, tasks, code):
    body = assert_error(bulk(api, tasks, **{"Idempotency-Key": key}), 400, code)
    assert body["detail"], body
    assert rows(alias) == 0


def test_a_body_that_is_not_json_at_all_answers_415(api, alias) -> None:
    response = api.post(TASKS, data="kind=noop", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "unsupported_media_type")


def test_a_payload_over_the_limit_answers_413(api, alias, settings) -> None:
    settings.RIVET = {**settings.RIVET, "MAX_PAYLOAD_BYTES": 100}
    response = enqueue(api, {"kind": "noop", "payload": "x" * 200})
    body = assert_error(response, 413, "payload_too_large")
    assert "limit is 100 bytes" in body["detail"]
    assert rows(alias) == 0


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
def test_the_enqueue_rolls_back_with_the_request(api, alias, monkeypatch) -> None:
    """ATOMIC_REQUESTS: a request that fails after the enqueue leaves no task behind."""
    monkeypatch.setitem(connections[alias].settings_dict, "ATOMIC_REQUESTS", True)
    from rivet.api import views

    def fail_after_enqueue(self, task_id):
        raise views.Conflict("failing on purpose after the enqueue", code="not_dead")

    monkeypatch.setattr(views.RivetView, "find_task", fail_after_enqueue)
    assert enqueue(api, {"kind": "noop"}).status_code == 409
    assert rows(alias) == 0
    monkeypatch.undo()
    monkeypatch.setitem(connections[alias].settings_dict, "ATOMIC_REQUESTS", True)
    assert enqueue(api, {"kind": "noop"}).status_code == 201
    assert rows(alias) == 1


# -- POST tasks/bulk/ ------------------------------------------------------------------------


def test_bulk_enqueues_in_order(api, alias) -> None:
    items = [{"kind": "noop", "payload": {"n": n}, "idem_key": f"b-{n}"} for n in range(3)]
    response = api.post(BULK, {"tasks": items}, format="json")
    assert response.status_code == 201, response.json()
    results = response.json()["results"]
    assert [r["task"]["payload"]["n"] for r in results] == [0, 1, 2]
    assert [r["created"] for r in results] == [True, True, True]
    again = api.post(BULK, {"tasks": items[:2]}, format="json")
    assert again.status_code == 200
    assert [r["created"] for r in again.json()["results"]] == [False, False]
    assert [r["task"]["id"] for r in again.json()["results"]] == [
        r["task"]["id"] for r in results[:2]
    ]


def test_bulk_with_one_bad_item_writes_nothing(api, alias) -> None:
    items = [{"kind": "noop"}, {"kind": "bad kind"}, {"kind": "noop", "priority": 500}]
    body = assert_error(api.post(BULK, {"tasks": items}, format="json"), 400, "invalid_input")
    assert set(body["tasks"]) == {"1", "2"}
    assert "kind" in body["tasks"]["1"] and "priority" in body["tasks"]["2"]
    assert rows(alias) == 0


def test_bulk_refuses_a_number_where_the_schema_says_string(api, alias) -> None:
    """Found by the schema fuzz: DRF's CharField took 1.7e16 as the key "1.7e+16"."""
    items = [{"kind": "noop", "unique_key": 1.7e16}, {"kind": "noop", "queue": 3}]
    body = assert_error(api.post(BULK, {"tasks": items}, format="json"), 400, "invalid_input")
    assert body["tasks"]["0"]["unique_key"] == ["unique_key must be a string, got float"]
    assert body["tasks"]["1"]["queue"] == ["queue must be a string, got int"]
    assert rows(alias) == 0


def test_bulk_reusing_a_key_for_other_work_names_the_items_not_a_task(api, alias) -> None:
    """Found before any write: a rolled-back task of the batch is never named as existing."""
    items = [
        {"kind": "noop", "payload": {"n": 1}, "idem_key": "twice"},
        {"kind": "noop", "payload": {"n": 2}},
        {"kind": "noop", "payload": {"n": 1}, "idem_key": "twice"},  # same work: a duplicate
        {"kind": "noop", "payload": {"n": 3}, "idem_key": "twice"},
    ]
    body = assert_error(api.post(BULK, {"tasks": items}, format="json"), 400, "invalid_input")
    assert "existing_task_id" not in body
    assert list(body["tasks"]) == ["3"]
    assert "is also the key of item 0, with different work" in body["tasks"]["3"]["idem_key"][0]
    assert rows(alias) == 0
    again = api.post(BULK, {"tasks": items[:3]}, format="json")
    assert again.status_code == 201, again.json()
    ids = [r["task"]["id"] for r in again.json()["results"]]
    assert ids[0] == ids[2] and rows(alias) == 2


def test_bulk_refuses_more_than_the_limit(api, alias, settings) -> None:
    settings.RIVET = {**settings.RIVET, "API_BULK_MAX": 2}
    items = [{"kind": "noop"}] * 3
    assert_error(api.post(BULK, {"tasks": items}, format="json"), 400, "too_many_tasks")
    assert rows(alias) == 0


def test_bulk_with_an_oversized_item_answers_413(api, alias, settings) -> None:
    settings.RIVET = {**settings.RIVET, "MAX_PAYLOAD_BYTES": 50}
    items = [{"kind": "noop"}, {"kind": "noop", "payload": "x" * 60}]
    body = assert_error(api.post(BULK, {"tasks": items}, format="json"), 413, "payload_too_large")
    assert body["detail"].startswith("task 1:")
    assert rows(alias) == 0


def test_bulk_needs_a_list_of_tasks(api, alias) -> None:
    assert_error(api.post(BULK, {"tasks": "noop"}, format="json"), 400, "invalid_input")


# -- reads -----------------------------------------------------------------------------------


def test_get_one_task(api, alias) -> None:
    task = task_in(alias, queue="mail", kind="send")
    response = api.get(f"/rivet/tasks/{task.id}/")
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["kind"]) == (task.id, "send")


def test_a_task_shows_its_failed_attempts(api, alias) -> None:
    store = store_for_alias(alias)
    task = task_in(alias, queue="mail", kind="send")
    (claimed,) = store.task_claim(queues=["mail"], owner="w1", limit=1, lease_ttl=60).claimed
    store.task_retry(claimed.lease, "SMTPError: 451 try later", 0.0)
    body = api.get(f"/rivet/tasks/{task.id}/").json()
    [entry] = body["errors"]
    assert (entry["attempt"], entry["error"]) == (1, "SMTPError: 451 try later")
    assert body["last_error"] == "SMTPError: 451 try later"
    assert datetime.fromisoformat(entry["at"]) == datetime.fromisoformat(body["updated_at"])


@pytest.mark.parametrize("task_id", ["999999", "abc", "-1", str(2**64)])
def test_an_unknown_task_answers_404(api, alias, task_id) -> None:
    assert_error(api.get(f"/rivet/tasks/{task_id}/"), 404, "not_found")


def test_list_pages_through_every_task_in_id_order(api, alias) -> None:
    made = [task_in(alias, queue="q1", kind="k").id for _ in range(5)]
    task_in(alias, queue="q2", kind="k")
    seen, url = [], f"{TASKS}?queue=q1&page_size=2"
    while url:
        page = api.get(url)
        assert page.status_code == 200, page.json()
        assert len(page.json()["results"]) <= 2
        seen += [task["id"] for task in page.json()["results"]]
        url = page.json()["next"]
    assert seen == made


def test_page_size_takes_1_to_1000(api, alias) -> None:
    task_in(alias, queue="q1", kind="k")
    for size in (1, 1000):
        assert api.get(f"{TASKS}?page_size={size}").status_code == 200


def test_list_filters_by_state_and_kind(api, alias) -> None:
    task_in(alias, kind="a")
    dead = task_in(alias, kind="b", dead=True)
    response = api.get(f"{TASKS}?state=dead&kind=b")
    assert [t["id"] for t in response.json()["results"]] == [dead.id]


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("state=sleeping", 400, "invalid_input"),
        ("queue=bad%20name", 400, "invalid_name"),
        ("cursor=garbage", 404, "not_found"),
        ("page_size=0", 400, "invalid_input"),
        ("page_size=1001", 400, "invalid_input"),
        ("page_size=-1", 400, "invalid_input"),
        ("page_size=ten", 400, "invalid_input"),
    ],
)
def test_list_refuses_bad_filters(api, alias, query, status, code) -> None:
    assert_error(api.get(f"{TASKS}?{query}"), status, code)


def test_queue_counts(api, alias) -> None:
    task_in(alias, queue="mail")
    task_in(alias, queue="mail", dead=True)
    task_in(alias, queue="sms", done=True)
    listed = {q["queue"]: q for q in api.get("/rivet/queues/").json()}
    assert (listed["mail"]["ready"], listed["mail"]["dead"], listed["sms"]["done"]) == (1, 1, 1)
    one = api.get("/rivet/queues/mail/").json()
    assert {k: one[k] for k in ("ready", "dead", "done")} == {"ready": 1, "dead": 1, "done": 0}
    assert_error(api.get("/rivet/queues/bad%20name/"), 400, "invalid_name")


# -- cancel ----------------------------------------------------------------------------------


def cancel(api: APIClient, task_id) -> dict:
    response = api.post(f"/rivet/tasks/{task_id}/cancel/")
    assert response.status_code == 200, response.json()
    return response.json()


def test_cancel_buries_a_task_that_is_not_running(api, alias) -> None:
    task = task_in(alias, last_error="TimeoutError: slow")
    body = cancel(api, task.id)
    assert body["outcome"] == "cancelled"
    assert (body["task"]["id"], body["task"]["state"]) == (task.id, "dead")
    assert body["task"]["last_error"] == "TimeoutError: slow; cancelled by an operator"
    assert Task.objects.using(alias).get(id=task.id).state == "dead"


def test_cancel_marks_a_running_task_for_its_worker(api, alias) -> None:
    lease_until = timezone.now() + timedelta(minutes=5)
    task = task_in(alias, lease_owner="worker-7", attempts=1, visible_at=lease_until)
    body = cancel(api, task.id)
    assert body["outcome"] == "marked"
    assert (body["task"]["state"], body["task"]["lease_owner"]) == ("pending", "worker-7")
    row = Task.objects.using(alias).get(id=task.id)
    assert (row.state, row.cancel_requested) == ("pending", True)


@pytest.mark.parametrize("trait", ["done", "dead"])
def test_cancel_leaves_a_finished_task_as_it_is(api, alias, trait) -> None:
    task = task_in(alias, **{trait: True})
    body = cancel(api, task.id)
    assert (body["outcome"], body["task"]["state"]) == ("finished", trait)
    row = Task.objects.using(alias).get(id=task.id)
    assert (row.state, row.last_error, row.cancel_requested) == (
        trait,
        task.last_error,
        False,
    )


@pytest.mark.parametrize("task_id", ["999999", "abc", "0", str(2**64)])
def test_cancel_of_an_unknown_task_answers_404(api, alias, task_id) -> None:
    body = assert_error(api.post(f"/rivet/tasks/{task_id}/cancel/"), 404, "not_found")
    assert task_id in body["detail"]


@pytest.mark.parametrize("caller", ["anonymous", "reader"])
def test_cancel_without_the_permission_changes_nothing(alias, caller) -> None:
    task = task_in(alias)
    client = APIClient() if caller == "anonymous" else client_for("rivet.view_task")
    response = client.post(f"/rivet/tasks/{task.id}/cancel/")
    if caller == "anonymous":
        assert response.status_code in (401, 403)
        assert response.json()["code"] == "not_authenticated"
    else:
        body = assert_error(response, 403, "permission_denied")
        assert "rivet.cancel_task" in body["detail"]
    row = Task.objects.using(alias).get(id=task.id)
    assert (row.state, row.cancel_requested) == ("pending", False)


def test_a_cancelled_task_is_revived_by_a_requeue(api, alias) -> None:
    task = task_in(alias, idem_key="pay-3")
    assert cancel(api, task.id)["outcome"] == "cancelled"
    response = api.post(f"/rivet/dead-letters/{task.id}/requeue/")
    assert response.status_code == 200, response.json()
    revived = response.json()
    assert (revived["state"], revived["attempts"], revived["idem_key"]) == ("pending", 0, "pay-3")


# -- dead letters ----------------------------------------------------------------------------


def test_dead_letters_list_by_queue(api, alias) -> None:
    task_in(alias, queue="mail")
    dead = task_in(alias, queue="mail", dead=True)
    task_in(alias, queue="sms", dead=True)
    response = api.get("/rivet/dead-letters/?queue=mail")
    assert [t["id"] for t in response.json()["results"]] == [dead.id]
    assert len(api.get("/rivet/dead-letters/").json()["results"]) == 2


def test_requeue_keeps_the_key_and_gives_fresh_attempts(api, alias) -> None:
    dead = task_in(alias, dead=True, idem_key="pay-1")
    response = api.post(f"/rivet/dead-letters/{dead.id}/requeue/")
    assert response.status_code == 200, response.json()
    task = response.json()
    assert (task["state"], task["attempts"], task["idem_key"]) == ("pending", 0, "pay-1")


def test_requeue_refuses_what_is_not_dead(api, alias) -> None:
    pending = task_in(alias)
    assert_error(api.post(f"/rivet/dead-letters/{pending.id}/requeue/"), 409, "not_dead")
    assert_error(api.post("/rivet/dead-letters/999999/requeue/"), 404, "not_found")


def test_requeue_refused_while_a_unique_twin_is_pending(api, alias) -> None:
    dead = task_in(alias, dead=True, kind="report", unique_key="daily")
    task_in(alias, kind="report", unique_key="daily")
    assert_error(api.post(f"/rivet/dead-letters/{dead.id}/requeue/"), 409, "not_requeued")


def test_purge_deletes_one_dead_task(api, alias) -> None:
    dead, other = task_in(alias, dead=True), task_in(alias, dead=True)
    response = api.delete(f"/rivet/dead-letters/{dead.id}/")
    assert response.status_code == 204
    assert list(Task.objects.using(alias).values_list("id", flat=True)) == [other.id]
    assert_error(api.delete(f"/rivet/dead-letters/{dead.id}/"), 404, "not_found")
    pending = task_in(alias)
    assert_error(api.delete(f"/rivet/dead-letters/{pending.id}/"), 409, "not_dead")


def test_sweep_buries_exhausted_lapsed_tasks(api, alias) -> None:
    task_in(alias, queue="mail", attempts=3, max_attempts=3)
    task_in(alias, queue="mail")
    response = api.post("/rivet/queues/mail/sweep/")
    assert response.json() == {"queue": "mail", "swept": 1}
    assert Task.objects.using(alias).filter(state="dead").count() == 1


def test_an_unknown_path_answers_json_404(api, alias) -> None:
    assert_error(api.get("/rivet/nothing/here/"), 404, "not_found")
    assert_error(api.put(TASKS, {}, format="json"), 405, "method_not_allowed")


# -- auth floor, permissions, throttling -----------------------------------------------------

ENDPOINTS = [
    ("get", TASKS),
    ("post", TASKS),
    ("post", BULK),
    ("get", "/rivet/tasks/1/"),
    ("post", "/rivet/tasks/1/cancel/"),
    ("get", "/rivet/queues/"),
    ("get", "/rivet/queues/default/"),
    ("post", "/rivet/queues/default/sweep/"),
    ("get", "/rivet/dead-letters/"),
    ("post", "/rivet/dead-letters/1/requeue/"),
    ("delete", "/rivet/dead-letters/1/"),
    ("get", "/rivet/metrics/"),
    ("get", "/rivet/schema/"),
    ("get", "/rivet/no-such-endpoint/"),
]
# The docs page (/rivet/docs/) is served to anyone: it holds no data, and a browser without a
# session signs in from it (tests/integration/test_api_docs_auth.py).


@pytest.mark.parametrize("host_permission", ["IsAuthenticated", "AllowAny"])
@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_anonymous_callers_are_refused_everywhere(
    alias, settings, method, url, host_permission
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_PERMISSION_CLASSES": [f"rest_framework.permissions.{host_permission}"],
    }
    task_in(alias, dead=True)
    response = getattr(APIClient(), method)(url, {"kind": "noop"}, format="json")
    assert response.status_code in (401, 403)
    if response["Content-Type"].startswith("application/json"):  # not the schema or docs
        assert response.json()["code"] == "not_authenticated"
    assert rows(alias) == 1


@pytest.mark.parametrize(
    ("method", "url", "needed"),
    [
        ("post", TASKS, "rivet.add_task"),
        ("post", BULK, "rivet.add_task"),
        ("get", TASKS, "rivet.view_task"),
        ("get", "/rivet/queues/", "rivet.view_task"),
        ("get", "/rivet/metrics/", "rivet.view_task"),
        ("post", "/rivet/dead-letters/{id}/requeue/", "rivet.requeue_deadletter"),
        ("post", "/rivet/queues/default/sweep/", "rivet.requeue_deadletter"),
        ("delete", "/rivet/dead-letters/{id}/", "rivet.purge_deadletter"),
        ("post", "/rivet/tasks/{id}/cancel/", "rivet.cancel_task"),
    ],
)
def test_each_endpoint_needs_its_permission(alias, method, url, needed) -> None:
    dead = task_in(alias, dead=True)
    url = url.format(id=dead.id)
    body = {"kind": "noop"} if url == TASKS else {"tasks": [{"kind": "noop"}]}
    others = [perm for perm in ALL_PERMS if perm != needed]
    refused = getattr(client_for(*others), method)(url, body, format="json")
    body403 = assert_error(refused, 403, "permission_denied")
    assert needed in body403["detail"]
    allowed = getattr(client_for(needed), method)(url, body, format="json")
    assert allowed.status_code < 300, allowed.content


def test_basic_auth_works_where_the_host_allows_it(alias) -> None:
    UserFactory(username="ops", password="pw", permissions=["rivet.view_task"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic b3BzOnB3")  # ops:pw
    assert client.get(TASKS).status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Basic b3BzOm5v")  # ops:no
    assert_error(client.get(TASKS), 403, "authentication_failed")  # Session is first: 403


def test_enqueue_throttle_scope_is_off_until_the_host_sets_a_rate(api, alias, settings) -> None:
    from django.core.cache import cache

    cache.clear()
    assert all(enqueue(api, {"kind": "noop"}).status_code == 201 for _ in range(3))
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"rivet-enqueue": "2/minute"},
    }
    codes = [enqueue(api, {"kind": "noop"}).status_code for _ in range(3)]
    assert codes == [201, 201, 429]
    assert_error(enqueue(api, {"kind": "noop"}), 429, "throttled")
    assert api.get(TASKS).status_code == 200  # reads are not in the scope
    cache.clear()


# -- metrics ---------------------------------------------------------------------------------


def test_metrics_serve_queue_gauges(api, alias) -> None:
    task_in(alias, queue="mail")
    task_in(alias, queue="mail", dead=True)
    response = api.get("/rivet/metrics/", HTTP_ACCEPT="application/openmetrics-text")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'rivet_queue_ready{queue="mail"} 1.0' in text
    assert 'rivet_queue_dead{queue="mail"} 1.0' in text
    assert "# TYPE rivet_queue_oldest_ready_age_seconds gauge" in text


def test_metrics_accept_the_configured_token(alias, settings) -> None:
    token = "t" * 32
    settings.RIVET = {**settings.RIVET, "METRICS_TOKEN": token}
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/rivet/metrics/").status_code == 200
    assert_error(client.get(TASKS), 403, "not_authenticated")  # the token reads metrics only
    client.credentials(HTTP_AUTHORIZATION="Bearer wrong")
    assert_error(client.get("/rivet/metrics/"), 401, "authentication_failed")


def test_error_bodies_are_json_even_from_the_metrics_endpoint(alias) -> None:
    response = APIClient().get("/rivet/metrics/")
    assert response["Content-Type"].startswith("application/json")
    assert json.loads(response.content)["code"] in ("not_authenticated", "permission_denied")


@pytest.mark.django_db(databases=["default"])
def test_done_is_estimated_past_the_count_limit_on_postgres(monkeypatch) -> None:
    """Past the store's done_count_limit the planner's figure stands in for a count of done
    rows, and the gauges, the API and the admin say so (done_estimated)."""
    from rivet.stores.postgres import PostgresStore

    for _ in range(40):
        task_in("default", queue="archive", done=True)
    task_in("default", queue="live")
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE rivet_task")
    store = PostgresStore(using="default")
    monkeypatch.setattr(PostgresStore, "done_count_limit", 5)
    estimated = {stats.queue: stats for stats in store.queue_overview()}
    assert {"archive", "live"} <= set(estimated)
    archive = estimated["archive"]
    assert archive.done_estimated and archive.done > 5  # the planner's figure, at least 6
    assert archive.done_text == f"~{archive.done}"
    live = estimated["live"]
    assert (live.ready, live.dead, live.done, live.done_estimated) == (1, 0, 0, False)
    monkeypatch.setattr(PostgresStore, "done_count_limit", 10**9)
    (archive,) = store.queue_overview(["archive"])
    assert (archive.done, archive.done_estimated, archive.done_text) == (40, False, "40")


def test_a_body_over_the_hosts_upload_limit_answers_413(api, alias, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = enqueue(api, {"kind": "noop", "payload": "x" * 2000})
    assert_error(response, 413, "payload_too_large")
    assert rows(alias) == 0
