"""``POST /effects`` in one round trip, without Django's request machinery.

The service's hot path is one request shape: a JSON object under a valid Idempotency-Key. Served
by the full stack (Django's handler and middleware, DRF's request, negotiation and renderers,
``@idempotent`` and the ORM) it costs more CPU in the service than the worker spends on the
task, and six round trips to PostgreSQL (health check, BEGIN, dedup insert, effect insert,
stored answer, COMMIT); the measurement: docs/decisions/0012-effect-service-fast-path.md. Here
the same writes go out as one query of three statements
(WRITE_SQL): ``BEGIN``; one statement that inserts the dedup row with its answer (``ON CONFLICT
DO NOTHING``, which waits on a racing uncommitted row for the key as the unique index always
made it) and, only when it did insert, the effect row; ``COMMIT``.

So the dedup row, the effect and the answer still commit together or not at all, and a key makes
at most one effect: the contract of ``@idempotent`` (rivet.idempotency.decorators), with the same
fingerprint, the same answer bytes and the same headers. A key already taken is read back in a
second round trip and replayed (200, ``Idempotent-Replay: true``), or refused with the same 422.

Anything else goes to the Django application untouched, so every error answer stays the one the
full stack gives: another method or path, a query string, a content type other than exactly
``application/json``, a host not in ALLOWED_HOSTS, a missing, long or invalid key, no or a too
large Content-Length, a body that is not a JSON object, nests deeper than MAX_JSON_DEPTH or
holds text PostgreSQL cannot store,
and the EFFECT_FAIL_BETWEEN_WRITES failpoint. So do all requests while spans are recorded (a
tracer provider is set): the full stack's spans (the request's, and ``effect.write`` only around
an effect that is written) stay what they were.

The connection is the thread's Django connection (CONN_MAX_AGE, closed when obsolete or after an
error, as between Django requests) without the health check's extra round trip: a kept connection
the server dropped fails at once, so the request is sent again once on a new connection (should
the first have committed after all, the second is answered as a replay of it: the key keeps it
one effect). A database error answers 503 through the service's own exception
handler (``database_unavailable``, naming EFFECT_DATABASE_URL).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any, NamedTuple

import psycopg
from django.conf import settings
from django.db import DatabaseError, connections
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.json import strict_constant

from effect_project.effects.errors import json_exception_handler
from effect_project.effects.models import Effect
from effect_project.effects.views import SCOPE
from rivet import tracing
from rivet.idempotency.conf import MAX_KEY_LENGTH, setting
from rivet.idempotency.errors import IdempotencyKeyReused
from rivet.idempotency.fingerprint import canonical_json, request_fingerprint
from rivet.idempotency.models import IdempotencyRecord
from rivet.text import json_depth_problem, key_problem, unstorable

PATH = "/effects"
CONTENT_TYPE = "application/json"
#: What the full stack adds to every answer of this view: DRF's Allow, and SecurityMiddleware's
#: three headers under the service's settings (test_effect_service's
#: test_the_fast_path_and_the_full_stack_answer_alike compares the two paths).
COMMON_HEADERS = [
    ("Allow", "POST, OPTIONS"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
]
REPLAY_HEADER = ("Idempotent-Replay", "true")

_RECORD = IdempotencyRecord._meta.db_table
_EFFECT = Effect._meta.db_table
#: The one round trip: BEGIN, the dedup row holding its answer already, the effect only if the
#: dedup row went in, COMMIT. One statement, so the effect's insert sees whether the dedup row's
#: went in (a CTE's rows, not a re-read); the effect's id comes from its own sequence and its
#: created_at is the statement's time (as the column's default, Now(), would make it), so the
#: answer is known before either row is written and needs no UPDATE afterwards. The answer is
#: what the view's JSONRenderer writes: Python renders every part but those two, and created_at
#: is spelled as DRF spells it (ISO 8601 in UTC, "Z", no fraction when it is .000000).
WRITE_SQL = f"""
BEGIN;
WITH effect AS (
    SELECT nextval(pg_get_serial_sequence('{_EFFECT}', 'id')) AS id, statement_timestamp() AS at
), answer AS (
    SELECT id, at, %(head)s::text || id::text || %(middle)s::text
        || to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN date_part('microseconds', at)::bigint %% 1000000 = 0 THEN ''
                ELSE to_char(at AT TIME ZONE 'UTC', '.US') END
        || 'Z"}}' AS text
    FROM effect
), dedup AS (
    INSERT INTO {_RECORD}
        (scope, key, fingerprint, response_status, response_content_type, response_body)
    SELECT %(scope)s, %(key)s, %(fingerprint)s, 201, %(content_type)s, text FROM answer
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING response_body
)
INSERT INTO {_EFFECT} (id, key, body, created_at)
SELECT answer.id, %(key)s, %(body)s::jsonb, answer.at FROM answer, dedup
RETURNING (SELECT response_body FROM dedup);
COMMIT
"""
#: A taken key: the row another request committed (READ COMMITTED: this statement sees it).
REPLAY_SQL = (
    f"SELECT fingerprint, response_status, response_content_type, response_body"
    f" FROM {_RECORD} WHERE scope = %s AND key = %s"
)

StartResponse = Callable[..., Any]


class Admitted(NamedTuple):
    """A request the fast path serves: its key, the parsed body and its fingerprint."""

    key: str
    data: dict[str, Any]
    fingerprint: str


class Answer(NamedTuple):
    status: int
    content_type: str
    body: bytes
    replay: bool = False


class _Reconnect(Exception):
    """The query failed on a kept connection the server had closed, almost surely before it ran
    (should it have committed all the same, the query sent again finds the key and replays)."""


def effects_application(django_application: Callable[..., Iterable[bytes]]):
    """The WSGI application of the service: the fast path, in front of ``django_application``.

    On PostgreSQL only (its ``ON CONFLICT``, its multi-statement queries): on SQLite the service
    is the Django application alone.
    """
    if connections["default"].vendor != "postgresql":
        return django_application

    def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        admitted = None if tracing.recording() else admit(environ)
        if admitted is None:
            return django_application(environ, start_response)
        return _respond(serve(admitted), start_response)

    return application


def admit(environ: dict[str, Any]) -> Admitted | None:
    """The request's key, body and fingerprint when the fast path may serve it, else None.

    When the body was read and the request still goes to Django, ``wsgi.input`` is replaced by
    the bytes read, so Django sees the request as it came.
    """
    if (
        environ.get("REQUEST_METHOD") != "POST"
        or environ.get("PATH_INFO") != PATH
        or environ.get("SCRIPT_NAME")
        or environ.get("QUERY_STRING")
        or environ.get("CONTENT_TYPE") != CONTENT_TYPE
        or settings.EFFECT_FAIL_BETWEEN_WRITES
        or not _allowed_host(environ.get("HTTP_HOST", ""))
    ):
        return None
    key = environ.get("HTTP_IDEMPOTENCY_KEY", "")
    if not key or len(key) > MAX_KEY_LENGTH or key_problem(key) is not None:
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    if not 0 < length <= setting("IDEMPOTENCY_MAX_BODY_BYTES"):
        return None
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)  # for Django, should the request go there
    try:
        # As rivet's JSONParser reads it: UTF-8, no NaN or Infinity, and the depth read from
        # the text before the parser recurses into it (Django's stack answers a deeper body).
        text = body.decode("utf-8")
        if json_depth_problem(text):
            return None
        data = json.loads(text, parse_constant=strict_constant)
    except ValueError:
        return None
    if not isinstance(data, dict) or unstorable(canonical_json(data), json_text=True):
        return None
    return Admitted(key, data, request_fingerprint("POST", PATH, data))


def _allowed_host(host: str) -> bool:
    """The Host header names one of ALLOWED_HOSTS exactly, or they allow any (``*``); Django
    decides every other case (patterns, a DEBUG host), and refuses the bad ones."""
    name, colon, port = host.rpartition(":")
    if not colon or not port.isdigit():
        name = host
    allowed = settings.ALLOWED_HOSTS
    return bool(name) and (name in allowed or "*" in allowed)


def serve(admitted: Admitted) -> Answer:
    """The answer to an admitted request: written, replayed, refused (422) or 503."""
    connection = connections["default"]
    connection.close_if_unusable_or_obsolete()  # CONN_MAX_AGE, errors: as between requests
    try:
        try:
            return _serve_once(connection, admitted)
        except _Reconnect:
            connection.close()
            return _serve_once(connection, admitted)
    except DatabaseError as exc:
        connection.close_if_unusable_or_obsolete()
        return _rendered(json_exception_handler(exc, {}))
    except IdempotencyKeyReused as exc:
        return _rendered(json_exception_handler(exc, {}))


def _serve_once(connection, admitted: Admitted) -> Answer:
    kept = connection.connection is not None
    with connection.wrap_database_errors:
        connection.ensure_connection()
        raw = connection.connection
        render = JSONRenderer().render
        params = {
            "scope": SCOPE,
            "key": admitted.key,
            "fingerprint": admitted.fingerprint,
            "content_type": CONTENT_TYPE,
            # As Django's JSONField writes it, so a row is the same whichever path wrote it.
            "body": json.dumps(admitted.data),
            # The answer (views._effect_data, rendered) around its id and its created_at.
            "head": '{"id":',
            "middle": (
                f',"key":{render(admitted.key).decode()}'
                f',"body":{render(admitted.data).decode()},"created_at":"'
            ),
        }
        try:
            # Django's cursors bind on the client: one execute sends several statements in one
            # simple query (one round trip), each statement's rows a result set of its own.
            cursor = raw.cursor()
            try:
                cursor.execute(WRITE_SQL, params)
            except psycopg.OperationalError:
                if kept and raw.broken:
                    raise _Reconnect() from None
                raise
            cursor.nextset()  # past BEGIN's result
            written = cursor.fetchone()
            if written is None:  # the key is taken: nothing was written
                return _replay(cursor, admitted)
            return Answer(201, CONTENT_TYPE, written[0].encode())
        finally:
            _end_transaction(raw)


def _replay(cursor, admitted: Admitted) -> Answer:
    cursor.execute(REPLAY_SQL, [SCOPE, admitted.key])
    row = cursor.fetchone()
    if row is None:  # cannot happen: the insert found the key taken by a committed row
        raise DatabaseError(f"the dedup row of key {admitted.key!r} vanished")
    fingerprint, _, content_type, text = row
    if fingerprint != admitted.fingerprint:
        raise IdempotencyKeyReused(admitted.key)
    return Answer(200, content_type, text.encode(), replay=True)


def _end_transaction(raw) -> None:
    """Roll back whatever a failure left open, so the connection goes back idle."""
    if not raw.closed and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        try:
            raw.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the connection is unusable: closed before its next use


def _rendered(response) -> Answer:
    return Answer(response.status_code, CONTENT_TYPE, JSONRenderer().render(response.data))


def _respond(answer: Answer, start_response: StartResponse) -> list[bytes]:
    headers = [
        ("Content-Type", answer.content_type),
        ("Content-Length", str(len(answer.body))),
        *COMMON_HEADERS,
    ]
    if answer.replay:
        headers.append(REPLAY_HEADER)
    start_response(f"{answer.status} {HTTPStatus(answer.status).phrase}", headers)
    return [answer.body]
