"""The dedup row: one per (scope, Idempotency-Key), holding the first answer for replays."""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models.functions import Now

from rivet.idempotency.conf import MAX_KEY_LENGTH


class IdempotencyRecordQuerySet(models.QuerySet):
    def older_than(self, seconds: float) -> IdempotencyRecordQuerySet:
        """Rows created more than `seconds` ago, by the database server's clock."""
        return self.filter(created_at__lt=Now() - timedelta(seconds=seconds))


class IdempotencyRecord(models.Model):
    """A key that was used, the request it was used for, and the answer that request got.

    The row is inserted before the view runs and completed after it, in the view's own
    transaction: the unique (scope, key) index is the lock a concurrent request with the same
    key waits on, and a committed row always holds a complete answer.
    """

    scope = models.CharField(max_length=100)
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    fingerprint = models.CharField(
        max_length=64, help_text="sha256 of method, path and canonical JSON body"
    )
    response_status = models.PositiveSmallIntegerField(null=True)
    response_content_type = models.CharField(max_length=100, default="application/json")
    response_body = models.TextField(default="")
    created_at = models.DateTimeField(db_default=Now())

    objects = IdempotencyRecordQuerySet.as_manager()

    class Meta:
        db_table = "rivet_idempotency_record"
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="rivet_idem_scope_key_uniq"),
        ]
        indexes = [models.Index(fields=["created_at"], name="rivet_idem_created_idx")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key}"
