"""Settings of rivet.idempotency, read from Django settings with defaults."""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    # Dedup rows older than this are deleted by `manage.py prune_idempotency`; a key reused
    # after that is new work.
    "IDEMPOTENCY_RETENTION_SECS": 7 * 24 * 3600,
    # A request body larger than this is refused with 413 before it is read or parsed.
    "IDEMPOTENCY_MAX_BODY_BYTES": 64 * 1024,
}

MAX_KEY_LENGTH = 200
"""Longest accepted Idempotency-Key header, in characters (the column is this wide)."""


def setting(name: str) -> int:
    """The value of one rivet.idempotency setting, or its default."""
    return getattr(settings, name, DEFAULTS[name])
