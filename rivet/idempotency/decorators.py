"""``@idempotent``: replay the first answer to every later request with the same key.

Usage, on an APIView method or under ``@api_view``::

    class PaymentView(APIView):
        @idempotent(scope="payments")
        def post(self, request):
            payment = Payment.objects.create(...)
            return Response(PaymentSerializer(payment).data, status=201)

One ``transaction.atomic()`` holds the dedup row, everything the view writes and the stored answer,
so they commit together or not at all. The dedup row is inserted *before* the view runs: a second
request with the same new key blocks on the unique index until the first commits, then replays
its answer (or, if the first rolled back, runs the view itself). The view therefore runs at most
once per committed key, and a racing duplicate gets success, never an error.

On Postgres this needs READ COMMITTED (the default): the waiting request must see the row the
winner committed. On SQLite, ``transaction_mode: IMMEDIATE`` serializes the transactions instead.
The view's own writes must go to the same database as the dedup table (``using``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connections, router, transaction
from django.db.models import Field
from django.http import HttpResponse, HttpResponseBase
from django.http.request import RawPostDataException
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from rivet.idempotency.conf import MAX_KEY_LENGTH, setting
from rivet.idempotency.errors import (
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    IdempotencyKeyTooLong,
    RequestBodyTooLarge,
    UnstorableText,
)
from rivet.idempotency.fingerprint import canonical_json, request_fingerprint
from rivet.idempotency.models import IdempotencyRecord
from rivet.text import key_problem, unstorable

KEY_HEADER = "Idempotency-Key"
MAX_SCOPE_LENGTH = 60  # leaves room for "|user:<pk>" in the 100-character scope column
REPLAY_HEADER = "idempotent-replay"


class _Discard(Exception):
    """Carries a non-2xx answer out of the transaction, which then rolls back."""

    def __init__(self, response: HttpResponseBase) -> None:
        self.response = response


def idempotent(
    scope: str,
    *,
    using: str | None = None,
    max_body_bytes: int | None = None,
    per_user: bool = True,
):
    """Make a DRF view method idempotent under the ``Idempotency-Key`` header.

    scope: names the key space, so two views may use the same key for different things.
    using: database alias of the dedup table; default: the router's choice for writes.
    max_body_bytes: larger bodies get 413; default: RIVET['IDEMPOTENCY_MAX_BODY_BYTES'].
    per_user: give each authenticated user a key space of their own, so one client's key can
        never replay another client's stored answer (anonymous requests share one space).
    """
    if not scope or len(scope) > MAX_SCOPE_LENGTH:
        raise ValueError(f"scope must be 1 to {MAX_SCOPE_LENGTH} characters, got {scope!r}")

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> HttpResponseBase:
            request = _drf_request(args, view)
            limit = max_body_bytes or setting("IDEMPOTENCY_MAX_BODY_BYTES")
            key, fingerprint = _admit(request, limit)
            db = using or router.db_for_write(IdempotencyRecord)
            space = _key_space(scope, request) if per_user else scope
            return _run_once(space, key, fingerprint, db, lambda: view(*args, **kwargs))

        return wrapper

    return decorate


def _key_space(scope: str, request: Request) -> str:
    """``scope``, narrowed to the authenticated user when there is one."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return scope
    return f"{scope}|user:{user.pk}"[:100]


def _drf_request(args: tuple[Any, ...], view: Callable[..., Any]) -> Request:
    for arg in args[:2]:
        if isinstance(arg, Request):
            return arg
    raise TypeError(
        f"@idempotent on {view.__qualname__}: no DRF Request among the arguments; "
        "decorate an APIView method or a function under @api_view"
    )


def _admit(request: Request, limit: int) -> tuple[str, str]:
    """Check the key and the body before any database work; return the key and fingerprint."""
    key = request.headers.get(KEY_HEADER, "")
    if not key:
        raise IdempotencyKeyMissing()
    check_key(f"{KEY_HEADER} header", key)
    _check_body_size(request, limit)
    data = _body_data(request)
    _refuse_unstorable("request body", canonical_json(data), json_text=True)
    return key, request_fingerprint(request.method, request.get_full_path(), data)


def check_key(where: str, key: str) -> None:
    """Refuse a key no request could store: too long (IdempotencyKeyTooLong) or not of the key
    characters (IdempotencyKeyInvalid); both 400, wherever the key comes from."""
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyTooLong(len(key), where.removesuffix(" header"))
    check_key_text(where, key)


def check_key_text(where: str, key: str) -> None:
    """Refuse a key that is not visible ASCII (0x21-0x7E), with IdempotencyKeyInvalid (400)."""
    # A server reads a header's bytes as Latin-1: a UTF-8 key would be stored as other
    # characters, and the same key sent in a URL or a body would name something else.
    problem = key_problem(key)
    if problem:
        raise IdempotencyKeyInvalid(where, problem)


def _refuse_unstorable(where: str, text: str, *, json_text: bool = False) -> None:
    reason = unstorable(text, json_text=json_text)
    if reason:
        raise UnstorableText(where, reason)


def _check_body_size(request: Request, limit: int) -> None:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:  # refuse without reading it
        raise RequestBodyTooLarge(declared, limit)
    try:
        size = len(request.body)
    except RawPostDataException:  # already parsed by someone, so it was within the limits
        return
    if size > limit:
        raise RequestBodyTooLarge(size, limit)


def _body_data(request: Request) -> Any:
    """The parsed body in a form that encodes canonically; malformed JSON raises ParseError."""
    if not request.content_type and request.body:
        # DRF would read a body without a Content-Type as empty, and fingerprint it as {}.
        raise UnsupportedMediaType("", detail="a request body needs Content-Type: application/json")
    data = request.data
    if hasattr(data, "lists"):  # a QueryDict from a form body
        return dict(sorted(data.lists()))
    return data


def _run_once(
    scope: str, key: str, fingerprint: str, db: str, call_view: Callable[[], HttpResponseBase]
) -> HttpResponseBase:
    try:
        with transaction.atomic(using=db):
            # Blocks here while another transaction holds an uncommitted row for this key.
            record, created = _insert_or_get(scope, key, fingerprint, db)
            if not created:
                if record.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(key)
                return _answer(record, replay=True)
            response = call_view()
            if not 200 <= response.status_code < 300:
                raise _Discard(response)  # an error is not remembered: the client may retry
            _store(record, response, db)
            return _answer(record, replay=False)
    except _Discard as discard:
        return discard.response


def _insert_or_get(
    scope: str, key: str, fingerprint: str, db: str
) -> tuple[IdempotencyRecord, bool]:
    """The dedup row for (scope, key), and whether this request inserted it.

    On PostgreSQL and SQLite one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` does it: it
    waits on another transaction's uncommitted row for the key as the unique index always made
    it, then inserts (the other rolled back) or returns nothing (the other committed: its row,
    with its answer, is read). That is one statement where ``get_or_create`` takes four (read,
    savepoint, insert, release); other databases get ``get_or_create``.
    """
    connection = connections[db]
    if (
        connection.vendor not in _UPSERT_VENDORS
        or not connection.features.can_return_columns_from_insert
    ):
        return IdempotencyRecord.objects.using(db).get_or_create(
            scope=scope, key=key, defaults={"fingerprint": fingerprint}
        )
    record = IdempotencyRecord(scope=scope, key=key, fingerprint=fingerprint)
    with connection.cursor() as cursor:
        cursor.execute(
            _dedup_sql(connection).insert,
            [scope, key, fingerprint, record.response_content_type, record.response_body],
        )
        row = cursor.fetchone()
    if row is None:
        return IdempotencyRecord.objects.using(db).get(scope=scope, key=key), False
    record.pk = row[0]
    record._state.adding = False
    record._state.db = db
    return record, True


_UPSERT_VENDORS = frozenset({"postgresql", "sqlite"})


class _DedupSql(NamedTuple):
    """The dedup row's two statements in one database vendor's quoting."""

    insert: str  # a new row, yielding its id, or nothing when the (scope, key) is taken
    update: str  # the answer stored on a row, by its id


#: The dedup row's statements by database vendor, built once (they were built on every request).
#: The update is a statement of its own rather than ``Model.save(update_fields=...)``: the row is
#: the decorator's, no signal or override of the model's save is expected on it, and the save
#: path cost more than the request's own writes.
_DEDUP_SQL: dict[str, _DedupSql] = {}


def _dedup_sql(connection) -> _DedupSql:
    built = _DEDUP_SQL.get(connection.vendor)
    if built is not None:
        return built
    quote = connection.ops.quote_name
    table, id_column = quote(IdempotencyRecord._meta.db_table), quote(_column("id"))
    inserted = ["scope", "key", "fingerprint", "response_content_type", "response_body"]
    answered = ["response_status", "response_content_type", "response_body"]
    conflict = ", ".join(quote(_column(name)) for name in ("scope", "key"))
    built = _DEDUP_SQL[connection.vendor] = _DedupSql(
        insert=(
            f"INSERT INTO {table} ({', '.join(quote(_column(name)) for name in inserted)})"
            f" VALUES ({', '.join(['%s'] * len(inserted))})"
            f" ON CONFLICT ({conflict}) DO NOTHING RETURNING {id_column}"
        ),
        update=(
            f"UPDATE {table} SET "
            + ", ".join(f"{quote(_column(name))} = %s" for name in answered)
            + f" WHERE {id_column} = %s"
        ),
    )
    return built


def _column(name: str) -> str:
    field = IdempotencyRecord._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise TypeError(f"IdempotencyRecord.{name} is not a column")
    return field.column


def _store(record: IdempotencyRecord, response: HttpResponseBase, db: str) -> None:
    if isinstance(response, Response):
        body, content_type = JSONRenderer().render(response.data), "application/json"
    elif isinstance(response, HttpResponse):
        body, content_type = response.content, response["Content-Type"]
    else:
        raise TypeError(f"an @idempotent view must return a Response, got {type(response)}")
    record.response_status = response.status_code
    record.response_content_type = content_type
    record.response_body = body.decode(getattr(response, "charset", None) or "utf-8")
    connection = connections[db]
    with connection.cursor() as cursor:
        cursor.execute(
            _dedup_sql(connection).update,
            [record.response_status, content_type, record.response_body, record.pk],
        )


def _answer(record: IdempotencyRecord, *, replay: bool) -> HttpResponse:
    """The stored answer; the first request and every replay get the same bytes."""
    response = HttpResponse(
        record.response_body,
        status=200 if replay else record.response_status,
        content_type=record.response_content_type,
    )
    if replay:
        response[REPLAY_HEADER] = "true"
    return response
