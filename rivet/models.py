"""The task table (one table, three states) and the durable record of fenced writes."""

from __future__ import annotations

from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Now

from rivet.values import TaskState


class Task(models.Model):
    """One unit of work. A claimed task is a pending task whose visible_at is in the future."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100)
    kind = models.CharField(max_length=100)
    payload = models.JSONField(null=True, blank=True)
    #: Unique among the tasks that have one (rivet_task_idem_key_uniq, a partial index: a task
    #: without a key enters no index for it).
    idem_key = models.CharField(max_length=200, null=True, blank=True)
    unique_key = models.CharField(max_length=200, null=True, blank=True)
    state = models.CharField(
        max_length=7, choices=TaskState.choices, default=TaskState.PENDING, db_default="pending"
    )
    attempts = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField(default=3, db_default=3)
    lease_epoch = models.BigIntegerField(default=0, db_default=0)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    visible_at = models.DateTimeField(db_default=Now())
    priority = models.SmallIntegerField(default=0, db_default=0)
    #: Claim order (priority aging): the task ranks as if it had become ready this early, its
    #: ready time less priority x RIVET['PRIORITY_AGING_SECS'] (priority clamped to -100..100).
    #: The stores write it whenever the task becomes runnable (enqueue, retry, requeue); a
    #: claim or a heartbeat leaves it, so a task whose lease lapses keeps its place. A row
    #: written by other means ranks by the time it was inserted (the database default).
    claim_rank = models.DateTimeField(db_default=Now(), editable=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    last_error = models.TextField(blank=True, default="", db_default="")
    #: Every failed attempt of the task's whole life, oldest first, the last MAX_ERRORS_KEPT:
    #: {"attempt": n, "at": ISO 8601 time from the database clock, "error": text}.
    errors = models.JSONField(default=list, db_default=Value([], models.JSONField()))
    result = models.JSONField(null=True, blank=True)
    #: An operator cancelled the task while it was leased: its worker buries it, never acks it.
    cancel_requested = models.BooleanField(default=False, db_default=False)
    #: The producer's W3C trace context ({"traceparent": ..., "tracestate": ...}) when it
    #: enqueued inside a trace (rivet.tracing); the worker's attempt spans are its children.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    #: The epoch and owner named by the last decision a settle applied (ack, retry, burial);
    #: on a done or dead task, the write that finished it. The chaos verifier checks that it
    #: is the epoch the task held: a stale write applied through a broken fence shows here.
    settled_epoch = models.BigIntegerField(null=True, blank=True)
    settled_by = models.CharField(max_length=200, null=True, blank=True)

    class Meta:
        db_table = "rivet_task"
        ordering = ["id"]
        permissions = [("cancel_task", "Can cancel tasks")]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=TaskState.values), name="rivet_task_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="rivet_task_max_attempts"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="rivet_task_attempts"),
            # One task per idempotency key. A constraint, not unique=True on the field: that
            # would add a second index on PostgreSQL (varchar_pattern_ops, for LIKE, which no
            # query runs) and index the NULL of every task enqueued without a key. Equality
            # lookups (find_by_idem_key, the admin's search) read this index.
            models.UniqueConstraint(
                fields=["idem_key"],
                condition=Q(idem_key__isnull=False),
                name="rivet_task_idem_key_uniq",
            ),
            models.UniqueConstraint(
                fields=["kind", "unique_key"],
                condition=Q(state="pending", unique_key__isnull=False),
                name="rivet_task_unique_pending",
            ),
        ]
        indexes = [
            # Serves the claim, read in (claim_rank, id) order: runnable-now and lease-expired
            # are one condition on visible_at, a key column, so leased and delayed rows are
            # stepped over inside the index, never fetched.
            models.Index(
                fields=["queue", "claim_rank", "id", "visible_at"],
                condition=Q(state="pending"),
                name="rivet_task_rank_idx",
            ),
            models.Index(fields=["queue", "state"], name="rivet_task_queue_state_idx"),
            # Serve the admin on a big table: the state and kind filters (and a loose index
            # scan for the kinds a filter offers), and the date hierarchy on created_at.
            models.Index(fields=["state", "kind"], name="rivet_task_state_kind_idx"),
            models.Index(fields=["created_at"], name="rivet_task_created_idx"),
            # The dead letters: listed by queue in id order, counted by queue (metrics, API).
            models.Index(
                fields=["queue", "id"], condition=Q(state="dead"), name="rivet_task_dead_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}#{self.id} ({self.state})"


class DeadTaskManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(state=TaskState.DEAD)


class DeadLetter(Task):
    """The dead-letter queue: tasks whose attempts are used up (a view over state='dead')."""

    objects = DeadTaskManager()  # type: ignore[misc]  # a narrower manager than Task's

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"
        permissions = [
            ("requeue_deadletter", "Can requeue dead letters (keeps the idempotency key)"),
            ("purge_deadletter", "Can purge dead letters (releases the idempotency keys)"),
        ]


class FencedWrite(models.Model):
    """A write (ack, fail or heartbeat) refused because its lease epoch was stale: the fence
    firing.

    Kept in the queue database so the count survives the worker that hit it.
    """

    class Op(models.TextChoices):
        ACK = "ack", "ack"
        """A stale worker tried to mark the task done."""
        FAIL = "fail", "fail"
        """A stale worker tried to record a failed attempt."""
        BEAT = "beat", "heartbeat"
        """A stale worker's heartbeat met a task another claim took."""

    id = models.BigAutoField(primary_key=True)
    task_id = models.BigIntegerField(db_index=True)
    queue = models.CharField(max_length=100)
    op = models.CharField(max_length=4, choices=Op.choices)
    owner = models.CharField(max_length=200, blank=True, default="")
    epoch = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "rivet_fenced_write"
        ordering = ["id"]
        indexes = [models.Index(fields=["queue", "op"], name="rivet_fence_queue_op_idx")]
        constraints = [
            # A lease's refused heartbeat is recorded once. Two heartbeats of one lease may be
            # refused at the same moment (the worker's heartbeat thread and its settler each
            # ask): the stores insert with ON CONFLICT DO NOTHING against this index.
            models.UniqueConstraint(
                fields=["task_id", "epoch"],
                condition=Q(op="beat"),
                name="rivet_fence_one_beat_per_lease",
            )
        ]

    def __str__(self) -> str:
        return f"fenced {self.op} on task {self.task_id} (epoch {self.epoch})"


# The Schedule table lives with the scheduler (rivet.schedules); Django finds it through here.
from rivet.schedules.models import Schedule  # noqa: E402

__all__ = ["DeadLetter", "FencedWrite", "Schedule", "Task"]
