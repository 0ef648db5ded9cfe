"""Errors the idempotency layer answers with; DRF renders each as its status code."""

from __future__ import annotations

from rest_framework import exceptions, status

from rivet.errors import RivetError
from rivet.idempotency.conf import MAX_KEY_LENGTH


class IdempotencyRefused(RivetError, exceptions.APIException):
    """A request the idempotency layer refused before the view ran; nothing was written."""


class IdempotencyKeyMissing(IdempotencyRefused):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "idempotency_key_missing"
    default_detail = (
        "missing Idempotency-Key header; send a key of 1 to "
        f"{MAX_KEY_LENGTH} characters, one per distinct request"
    )


class IdempotencyKeyTooLong(IdempotencyRefused):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "idempotency_key_too_long"

    def __init__(self, length: int, where: str = "Idempotency-Key") -> None:
        super().__init__(f"{where} is {length} characters long; the limit is {MAX_KEY_LENGTH}")


class IdempotencyKeyInvalid(IdempotencyRefused):
    """The key holds a character outside visible ASCII, the one rule for a key everywhere."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "idempotency_key_invalid"

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}; nothing was written")


class UnstorableText(IdempotencyRefused):
    """The key or the body holds text the database cannot store (NUL, a lone surrogate)."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "unstorable_text"

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where} {reason}; nothing was written")


class RequestBodyTooLarge(IdempotencyRefused):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_body_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"request body is {size} bytes; the limit is {limit} "
            "(setting RIVET['IDEMPOTENCY_MAX_BODY_BYTES'])"
        )


class IdempotencyKeyReused(IdempotencyRefused):
    """The key was used before for a different request: a client bug, never retried."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            {
                "detail": (
                    f"Idempotency-Key {key!r} was already used for a different request "
                    "(method, path or body differ); use a new key for new work"
                ),
                "idempotency_key": key,
            }
        )
