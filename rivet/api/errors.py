"""Error bodies of rivet's HTTP API: DRF's shape plus a stable machine-readable ``code``.

Every error answer is a JSON object with ``detail`` (for people) and ``code`` (for programs);
a validation error also keeps DRF's field errors beside them (``{"queue": ["..."]}``, or for
the bulk call ``{"tasks": {"3": {"queue": ["..."]}}}``). rivet's exceptions are mapped to
statuses here, in one place, by :func:`exception_handler`, which only rivet's views use: the
host's own ``EXCEPTION_HANDLER`` is left alone.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from rivet.conf import rivet_settings
from rivet.dberrors import Failure, classify, explain, migrate_command, missing_table
from rivet.errors import IdempotencyMismatch, InvalidInput, PayloadTooLarge, StoreError

logger = logging.getLogger("rivet.api")

#: Every ``code`` an error body of the API may carry, with its statuses and meaning. A
#: missing or wrong credential answers 401 when the host's first authentication class names
#: a scheme (WWW-Authenticate, e.g. Basic), else 403 (e.g. Session), as DRF decides.
ERROR_CODES: dict[str, tuple[tuple[int, ...], str]] = {
    "invalid_input": ((400,), "a field is missing, of the wrong type or out of bounds"),
    "invalid_name": ((400,), "a queue or kind name is empty, too long or has other characters"),
    "unknown_kind": ((400,), "no installed app registers the kind (RIVET['ALLOW_UNKNOWN_KINDS'])"),
    "invalid_json": ((400,), "the request body is not valid JSON"),
    "idempotency_key_conflict": ((400,), "the Idempotency-Key header and idem_key field differ"),
    "idempotency_key_invalid": (
        (400,),
        "the Idempotency-Key header or idem_key field is not 1..200 visible ASCII characters "
        "but the comma (or the header was sent twice)",
    ),
    "too_many_tasks": ((400,), "the bulk call carries more tasks than RIVET['API_BULK_MAX']"),
    "not_authenticated": ((401, 403), "no credentials were given"),
    "authentication_failed": ((401, 403), "the credentials (or the metrics token) are wrong"),
    "permission_denied": ((403,), "the user lacks the rivet permission the endpoint needs"),
    "not_found": (
        (404,),
        "no task with that id (or not a dead letter), no schedule of that name, or a bad cursor",
    ),
    "method_not_allowed": ((405,), "the endpoint does not answer that method"),
    "not_acceptable": ((406,), "no renderer for the Accept header"),
    "not_dead": (
        (409,),
        "the task is not in the dead letters (pending or done), or it left them meanwhile",
    ),
    "not_requeued": ((409,), "a pending task of the same kind holds the task's unique key"),
    "payload_too_large": ((413,), "the payload is over RIVET['MAX_PAYLOAD_BYTES'] encoded"),
    "unsupported_media_type": ((415,), "the body is not JSON"),
    "idempotency_mismatch": ((422,), "the idempotency key already names different work"),
    "throttled": ((429,), "the host's rate for the throttle scope rivet-enqueue is used up"),
    "database_unavailable": ((503,), "the database does not answer; retry later"),
    "not_migrated": (
        (503,),
        "the database has no tables yet: run `python manage.py migrate` "
        "(with `--database ALIAS` where rivet is on another alias)",
    ),
    "extra_missing": ((501,), "the endpoint needs an extra of django-rivet that is not installed"),
}

# DRF's own codes that rivet renames so the list above stays the whole vocabulary.
_RENAMED = {"parse_error": "invalid_json", "invalid": "invalid_input"}


class Conflict(exceptions.APIException):
    """409: the operation does not apply to the task in its current state."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "not_dead"


class PayloadTooLargeError(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


class Unprocessable(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_mismatch"


class DatabaseUnavailable(exceptions.APIException):
    """503: the database failed; the server's log has the whole line (where, and why)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = "the database does not answer; retry later (the server's log says why)"


class NotMigrated(exceptions.APIException):
    """503: the database answers but its tables do not exist yet."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "not_migrated"
    default_detail = (
        "the database has no tables for this yet: run `python manage.py migrate` on the host"
    )


def database_error(exc: Exception) -> exceptions.APIException | None:
    """The 503 a failed database answers as, or None for an error that is no outage (a bug)."""
    failure, _ = classify(exc)
    alias = rivet_settings.DATABASE_ALIAS
    if failure is Failure.NOT_MIGRATED or missing_table(exc):
        answer: exceptions.APIException = NotMigrated(
            f"the database has no tables for this yet: run `{migrate_command(alias)}` on the host"
        )
    elif failure is not Failure.OTHER or isinstance(
        exc, StoreError | OperationalError | InterfaceError
    ):
        answer = DatabaseUnavailable()
    else:
        return None
    # The client gets no database address; the operator's log does.
    logger.error("rivet API: %s", explain(exc, alias))
    return answer


class ExtraMissing(exceptions.APIException):
    """501: the endpoint needs an extra that is not installed; the detail names it."""

    status_code = status.HTTP_501_NOT_IMPLEMENTED
    default_code = "extra_missing"


def api_error(exc: Exception) -> exceptions.APIException | Exception:
    """The DRF exception a rivet (or Django) exception answers as; others pass through."""
    if isinstance(exc, DatabaseError | StoreError):
        return database_error(exc) or exc
    if isinstance(exc, IdempotencyMismatch):
        return Unprocessable(str(exc))
    if isinstance(exc, PayloadTooLarge):
        return PayloadTooLargeError(str(exc))
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLargeError(
            "the request body is larger than the host's DATA_UPLOAD_MAX_MEMORY_SIZE"
        )
    if isinstance(exc, InvalidInput):
        message = exceptions.ErrorDetail(str(exc), code=exc.code)
        return exceptions.ValidationError({exc.field: [message]} if exc.field else [message])
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler on the mapped exception, then ``detail`` and ``code`` on every body."""
    mapped = api_error(exc)
    response = drf_exception_handler(mapped, context)
    if response is None:
        return None
    response.data = _body(mapped, response.data)
    if isinstance(exc, IdempotencyMismatch):
        response.data.update(idem_key=exc.idem_key, existing_task_id=exc.existing_id)
    return response


def _body(exc: Exception, data: Any) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        return _validation_body(exc, data)
    detail = data.get("detail", "") if isinstance(data, dict) else str(data)
    code = str(getattr(detail, "code", None) or getattr(exc, "default_code", "invalid_input"))
    body = dict(data) if isinstance(data, dict) else {}
    body.update(detail=str(detail), code=_RENAMED.get(code, code))
    return body


def _validation_body(exc: exceptions.ValidationError, data: Any) -> dict[str, Any]:
    codes = _leaf_codes(exc.get_codes())
    named = {_RENAMED.get(code, code) for code in codes}
    known = {code if code in ERROR_CODES else "invalid_input" for code in named}
    code = known.pop() if len(known) == 1 else "invalid_input"
    messages = _leaf_messages(data)
    summary = messages[0] if len(messages) == 1 else f"{len(messages)} errors; see the fields"
    if isinstance(data, dict):
        return {"detail": summary, "code": code, **data}
    return {"detail": summary, "code": code}


def _leaf_codes(codes: Any) -> list[str]:
    if isinstance(codes, dict):
        return [c for value in codes.values() for c in _leaf_codes(value)]
    if isinstance(codes, list):
        return [c for value in codes for c in _leaf_codes(value)]
    return [str(codes)]


def _leaf_messages(data: Any) -> list[str]:
    if isinstance(data, dict):
        return [m for value in data.values() for m in _leaf_messages(value)]
    if isinstance(data, list):
        return [m for value in data for m in _leaf_messages(value)]
    return [str(data)]
