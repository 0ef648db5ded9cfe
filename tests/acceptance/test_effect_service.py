"""The effect service over HTTP: a real server (waitress), a real Postgres database."""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from rivet.idempotency.fingerprint import request_fingerprint

pytestmark = pytest.mark.acceptance

MAX_BODY_BYTES = 64 * 1024  # effect_project's default IDEMPOTENCY_MAX_BODY_BYTES


def new_key(label: str = "k") -> str:
    return f"{label}-{uuid.uuid4().hex}"


def test_first_request_writes_the_effect_and_its_dedup_row(effect_service, effect_db):
    key = new_key()
    reply = effect_service.post(key, {"amount": 100})
    assert reply.status == 201
    assert not reply.replay
    effect = reply.json
    assert set(effect) == {"id", "key", "body", "created_at"}
    assert (effect["key"], effect["body"]) == (key, {"amount": 100})
    assert (effect_db.effects(key), effect_db.dedups(key)) == (1, 1)


def test_repeat_replays_the_first_answer_with_the_replay_header(effect_service, effect_db):
    key = new_key()
    first = effect_service.post(key, {"amount": 100})
    # Same JSON value, different key order and spacing: the canonical form is what counts.
    again = effect_service.post(key, raw=b'{ "amount" : 100 }')
    assert (first.status, again.status) == (201, 200)
    assert again.replay
    assert again.text == first.text
    assert effect_db.effects(key) == 1


def test_same_key_with_a_different_body_is_422_naming_the_key(effect_service, effect_db):
    key = new_key()
    assert effect_service.post(key, {"amount": 100}).status == 201
    reply = effect_service.post(key, {"amount": 999})
    assert reply.status == 422
    assert reply.json["idempotency_key"] == key
    assert key in reply.json["detail"]
    assert effect_db.effects(key) == 1


def test_missing_key_is_400_and_writes_nothing(effect_service, effect_db):
    reply = effect_service.post(None, {"amount": 1})
    assert reply.status == 400
    assert "Idempotency-Key" in reply.json["detail"]
    assert effect_db.scalar("SELECT count(*) FROM effects_effect") == 0


def test_key_longer_than_200_characters_is_400(effect_service, effect_db):
    assert effect_service.post("k" * 201, {"amount": 1}).status == 400
    assert effect_db.effects("k" * 201) == 0
    assert effect_service.post("k" * 200, {"amount": 1}).status == 201


def test_malformed_json_is_400_and_writes_nothing(effect_service, effect_db):
    key = new_key()
    reply = effect_service.post(key, raw=b'{"amount": 1')
    assert reply.status == 400
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"note": "a\\u0000b"}', "contains a NUL character"),
        (b'{"note": "\\ud800"}', "contains a lone surrogate (U+D800"),
        (b'{"note": "\xff"}', "can't decode byte 0xff"),
    ],
    ids=["nul", "lone-surrogate", "invalid-utf8"],
)
def test_text_the_database_cannot_store_is_400_json_and_writes_nothing(
    effect_service, effect_db, raw: bytes, reason: str
):
    key = new_key()
    reply = effect_service.post(key, raw=raw)
    assert reply.status == 400, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    assert reason in reply.json["detail"]
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    assert effect_service.post(key, {"note": "fine"}).status == 201


def test_a_body_with_any_unicode_reads_back_equal(effect_service, effect_db):
    key = new_key()
    body = {"note": "ünïcode \U0001f600 \u2028 \\u0000 as text", "n": [1, 2.5, None]}
    assert effect_service.post(key, body).status == 201
    assert effect_service.get(f"/effects/{key}").json["body"] == body


def test_a_refused_body_is_not_remembered_so_the_key_stays_usable(effect_service, effect_db):
    key = new_key()
    assert effect_service.post(key, [1, 2]).status == 400  # not a JSON object
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    assert effect_service.post(key, {"amount": 1}).status == 201


def test_body_over_the_limit_is_413_and_writes_nothing(effect_service, effect_db):
    key = new_key()
    pad = MAX_BODY_BYTES - len(b'{"pad":""}')
    assert effect_service.post(key, raw=b'{"pad":"' + b"x" * (pad + 1) + b'"}').status == 413
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    assert effect_service.post(key, raw=b'{"pad":"' + b"x" * pad + b'"}').status == 201


def test_racing_identical_requests_make_exactly_one_effect(effect_service, effect_db):
    racers = 16  # = the server's 2 workers x 8 threads, so all of them are inside at once
    for _ in range(5):
        key = new_key("race")
        start = threading.Barrier(racers)

        def post(_: int, key: str = key, start: threading.Barrier = start):
            start.wait()
            return effect_service.post(key, {"amount": 7})

        with ThreadPoolExecutor(racers) as pool:
            replies = list(pool.map(post, range(racers)))
        assert sorted(r.status for r in replies) == [200] * (racers - 1) + [201]
        assert all(r.replay for r in replies if r.status == 200)
        assert len({r.text for r in replies}) == 1
        assert (effect_db.effects(key), effect_db.dedups(key)) == (1, 1)
    assert effect_service.get("/verify").json["ok"]


def _hold_key(db_url: str, key: str, body: dict, answer: str) -> psycopg.Connection:
    """Open a transaction that has written an effect and its dedup row, and not committed."""
    holder = psycopg.connect(db_url)
    holder.execute("INSERT INTO effects_effect (key, body) VALUES (%s, %s)", (key, '{"x":1}'))
    holder.execute(
        "INSERT INTO rivet_idempotency_record (scope, key, fingerprint, response_status, "
        "response_content_type, response_body) VALUES ('effects', %s, %s, 201, "
        "'application/json', %s)",
        (key, request_fingerprint("POST", "/effects", body), answer),
    )
    return holder


def test_a_request_for_a_key_in_flight_waits_then_replays(effect_service, effect_db):
    key, body, answer = new_key(), {"amount": 3}, '{"answer":"from the first request"}'
    with _hold_key(effect_db.url, key, body, answer) as holder, ThreadPoolExecutor(1) as pool:
        second = pool.submit(effect_service.post, key, body)
        effect_db.wait_for_lock_waiter()
        holder.commit()
        reply = second.result()
    assert (reply.status, reply.replay, reply.text) == (200, True, answer)
    assert effect_db.effects(key) == 1


def test_a_request_for_a_key_in_flight_runs_if_the_first_rolls_back(effect_service, effect_db):
    key, body = new_key(), {"amount": 4}
    with _hold_key(effect_db.url, key, body, "{}") as holder, ThreadPoolExecutor(1) as pool:
        second = pool.submit(effect_service.post, key, body)
        effect_db.wait_for_lock_waiter()
        holder.rollback()
        reply = second.result()
    assert (reply.status, reply.replay, reply.json["body"]) == (201, False, body)
    assert (effect_db.effects(key), effect_db.dedups(key)) == (1, 1)


def test_failure_between_the_writes_leaves_neither_row(
    effect_service, failing_effect_service, effect_db
):
    key, body = new_key(), {"amount": 5}
    next_id = "SELECT nextval(pg_get_serial_sequence('effects_effect', 'id'))"
    before = effect_db.scalar(next_id)
    assert failing_effect_service.post(key, body).status == 500
    # The effect INSERT ran (it used an id) and was rolled back with the dedup row.
    assert effect_db.scalar(next_id) > before + 1
    assert (effect_db.effects(key), effect_db.dedups(key)) == (0, 0)
    assert "EFFECT_FAIL_BETWEEN_WRITES" in failing_effect_service.output()
    retry = effect_service.post(key, body)
    assert (retry.status, retry.replay) == (201, False)
    assert (effect_db.effects(key), effect_db.dedups(key)) == (1, 1)


def test_verify_counts_effects_and_reports_broken_invariants(effect_service, effect_db):
    keys = [new_key() for _ in range(3)]
    for key in keys:
        assert effect_service.post(key, {"amount": 1}).status == 201
    assert effect_service.post(keys[0], {"amount": 1}).status == 200
    assert effect_service.get("/verify").json == {
        "effects_written": 3,
        "keys": 3,
        "duplicate_effects": 0,
        "effects_without_dedup": 0,
        "dedup_without_effect": 0,
        "ok": True,
    }
    # Break each invariant behind the service's back; /verify must see every one.
    add_effect = "INSERT INTO effects_effect (key, body) VALUES (%s, '{}')"
    effect_db.conn.execute(add_effect, (keys[0],))
    effect_db.conn.execute(add_effect, ("no-dedup",))
    effect_db.conn.execute(
        "INSERT INTO rivet_idempotency_record (scope, key, fingerprint, response_status, "
        "response_content_type, response_body) VALUES ('effects', 'no-effect', '', 201, '', '')"
    )
    assert effect_service.get("/verify").json == {
        "effects_written": 5,
        "keys": 4,
        "duplicate_effects": 1,
        "effects_without_dedup": 1,
        "dedup_without_effect": 1,
        "ok": False,
    }


def test_health_answers_while_verify_waits_behind_a_lock_on_the_effects(effect_service, effect_db):
    """What harnesses wait on after a start: it reads no table, so a big or locked effect table
    (where /verify takes seconds or waits) cannot keep the service from looking up."""
    with psycopg.connect(effect_db.url) as holder, ThreadPoolExecutor(1) as pool:
        holder.execute("LOCK TABLE effects_effect IN ACCESS EXCLUSIVE MODE")
        verify = pool.submit(effect_service.get, "/verify")
        effect_db.wait_for_lock_waiter()  # /verify is stuck behind the lock
        with urllib.request.urlopen(effect_service.url + "/health", timeout=5) as response:
            assert (response.status, json.loads(response.read())) == (200, {"ok": True})
        assert not verify.done()
        holder.commit()
        assert verify.result().json["ok"]


def test_get_effect_by_key(effect_service, effect_db):
    key = "pay/1 with space"
    created = effect_service.post(key, {"amount": 100})
    assert effect_service.get("/effects/pay/1%20with%20space").text == created.text
    assert effect_service.get("/effects/unknown").status == 404


def test_prune_deletes_old_dedup_rows_and_keeps_effects(effect_service, effect_db, effect_command):
    old, new = new_key("old"), new_key("new")
    for key in (old, new):
        assert effect_service.post(key, {"amount": 1}).status == 201
    for table in ("effects_effect", "rivet_idempotency_record"):
        effect_db.conn.execute(
            f"UPDATE {table} SET created_at = now() - interval '8 days' WHERE key = %s", (old,)
        )
    done = effect_command("prune_idempotency")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 " in done.stdout
    assert (effect_db.dedups(old), effect_db.dedups(new)) == (0, 1)
    assert (effect_db.effects(old), effect_db.effects(new)) == (1, 1)
    # An effect older than the retention time is allowed to have lost its dedup row.
    assert effect_service.get("/verify").json["ok"]


def test_a_database_that_goes_away_is_503_json_naming_it(start_effect_service, effect_database_url):
    """The service's database is dropped under it: one JSON line, never an HTML page."""
    name = f"rivet_effect_gone_{uuid.uuid4().hex[:8]}"
    admin_url = effect_database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        service = start_effect_service(effect_database_url.rsplit("/", 1)[0] + f"/{name}")
        assert service.post(new_key(), {"amount": 1}).status == 201
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    reply = service.post(new_key(), {"amount": 1})
    assert reply.status == 503, reply.text
    assert reply.json["code"] == "database_unavailable"
    assert f'database "{name}" does not exist' in reply.json["detail"]
    assert "does not exist on that server" in reply.json["detail"]
    health = service.get("/health")
    assert (health.status, health.json["code"]) == (503, "database_unavailable"), health.text


FULL_STACK = "application/json; charset=utf-8"  # not the fast path's exact content type


def _fast_path_served(effect_db, key: str) -> bool:
    """A service backend's last query is the fast path's one query for ``key`` (effects/fastpath.py:
    BEGIN, both inserts, COMMIT; bound on the client, so its text, of which pg_stat_activity keeps
    the first 1 024 bytes, holds the key near its start); Django's path ends on a COMMIT of its
    own."""
    return bool(
        effect_db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE '%%BEGIN;%%WITH effect AS%%' AND strpos(query, %s) > 0",
            (key,),
        )
    )


@pytest.mark.parametrize(
    "first, again", [("application/json", FULL_STACK), (FULL_STACK, "application/json")]
)
def test_the_fast_path_and_the_full_stack_answer_alike(effect_service, effect_db, first, again):
    """POST /effects under exactly application/json skips Django's request machinery; with a
    charset it goes through it. Either one replays the other's answer byte for byte, with the
    same headers, and refuses the other's key for another body with the same 422."""
    key, body = new_key(), {"amount": 6, "note": "ü"}
    created = effect_service.post(key, body, content_type=first)
    assert _fast_path_served(effect_db, key) == (first == "application/json")
    replayed = effect_service.post(key, body, content_type=again)
    reused = effect_service.post(key, {"amount": 7}, content_type=again)
    reused_first = effect_service.post(key, {"amount": 7}, content_type=first)
    assert (created.status, created.replay) == (201, False)
    assert (replayed.status, replayed.replay, replayed.text) == (200, True, created.text)
    assert created.json["body"] == body
    assert effect_service.get(f"/effects/{key}").json == created.json
    assert (reused.status, reused.text) == (reused_first.status, reused_first.text)
    assert reused.json["code"] == "idempotency_key_reused"
    varying = {"date", "content-length", "idempotent-replay"}
    assert set(created.headers) - varying == set(replayed.headers) - varying
    assert set(reused.headers) == set(reused_first.headers)
    assert (effect_db.effects(key), effect_db.dedups(key)) == (1, 1)
