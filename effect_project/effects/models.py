from django.db import models
from django.db.models.functions import Now

from rivet.idempotency.conf import MAX_KEY_LENGTH


class Effect(models.Model):
    """One side effect. `key` is deliberately not unique: a duplicate must be countable.

    The dedup row's unique index (rivet.idempotency) is what prevents a second effect; a unique
    index here would turn a broken dedup into an error instead of letting /verify report it.
    """

    key = models.CharField(max_length=MAX_KEY_LENGTH, db_index=True)
    body = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"effect {self.pk} ({self.key})"
