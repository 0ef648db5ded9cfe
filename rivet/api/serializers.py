"""What rivet's HTTP API reads and writes. Bounds come from ``rivet.validation``, not from here."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, PayloadTooLarge
from rivet.models import Task
from rivet.producer import task_spec
from rivet.validation import (
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECS,
    NAME_RE,
    PRIORITY_MAX,
    PRIORITY_MIN,
    check_idem_key,
    check_name,
)
from rivet.values import CancelOutcome

#: The header a client may send its idempotency key in (the IETF Idempotency-Key draft).
IDEMPOTENCY_HEADER = "Idempotency-Key"


def name_schema() -> dict[str, Any]:
    """A queue or kind name as JSON Schema: the rule ``rivet.validation.check_name`` applies."""
    return {
        "type": "string",
        "pattern": NAME_RE.pattern,
        "minLength": 1,
        "maxLength": rivet_settings.MAX_NAME_LENGTH,
    }


class TextField(serializers.CharField):
    """A string field that takes strings only: DRF's CharField turns a JSON number into its text
    (``-1.7e+16`` as a unique key), which the schema (``type: string``) says is refused."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(
                f"{self.field_name} must be a string, got {type(data).__name__}", code="invalid"
            )
        return super().to_internal_value(data)


def _key(**kwargs: Any) -> serializers.CharField:
    """An idempotency or unique key; rivet.validation.check_key has the last word."""
    return TextField(
        trim_whitespace=False,
        required=False,
        allow_null=True,
        max_length=rivet_settings.MAX_IDEM_KEY_LENGTH,
        **kwargs,
    )


#: An idempotency key as JSON Schema: the rule ``rivet.validation.check_idem_key`` applies.
IDEM_KEY_PATTERN = "^[!-+\\--~]([ -+\\--~]*[!-+\\--~])?$"  # 0x20-0x7E but the comma


def idem_key_schema() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": IDEM_KEY_PATTERN,
        "minLength": 1,
        "maxLength": rivet_settings.MAX_IDEM_KEY_LENGTH,
    }


def checked_header_key(header: str | None) -> str | None:
    """The key of the Idempotency-Key header, checked by the body field's rule.

    The server decodes header bytes as Latin-1, so a UTF-8 key arrives as other characters:
    refusing anything but visible ASCII is what keeps header and body one key.
    """
    if header is None:
        return None
    try:
        return check_idem_key(header)
    except InvalidInput as exc:
        message = str(exc).replace("idem_key", f"the {IDEMPOTENCY_HEADER} header", 1)
        raise serializers.ValidationError({"idem_key": [message]}, code=exc.code) from exc


@extend_schema_field(idem_key_schema())
class IdemKeyField(TextField):
    """An idempotency key, checked by rivet's rule (``idempotency_key_invalid`` when wrong)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, required=False, allow_null=True, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data == "":  # rivet's message and code, not DRF's "may not be blank"
            return self.to_internal_value(data)
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        text = super().to_internal_value(data)  # a string: check_idem_key gives it back checked
        try:
            check_idem_key(text)
        except InvalidInput as exc:
            raise serializers.ValidationError(str(exc), code=exc.code) from exc
        return text


@extend_schema_field(name_schema())
class NameField(TextField):
    """A queue or kind name, checked by rivet's rule (an ``invalid_name`` error when wrong)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data == "":  # rivet's message and code, not DRF's "may not be blank"
            return self.to_internal_value(data)
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        try:
            return check_name(self.field_name, value)
        except InvalidInput as exc:
            raise serializers.ValidationError(str(exc), code=exc.code) from exc


class SecondsField(serializers.FloatField):
    """A number of seconds; ``true`` and ``false`` are refused, as the integer fields do."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class EnqueueSerializer(serializers.Serializer):
    """One task to enqueue; the producer's defaults fill what is left out."""

    kind = NameField(help_text="registered job kind: letters, digits and _ . : -")
    payload = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="any JSON value"
    )
    queue = NameField(required=False, help_text="queue (default: the job's, else RIVET QUEUE)")
    idem_key = IdemKeyField(
        help_text=(
            "idempotency key: visible ASCII (0x21-0x7E) but the comma, spaces only between "
            "characters; the "
            f"{IDEMPOTENCY_HEADER} header may carry it instead"
        )
    )
    unique_key = _key(
        allow_blank=True, help_text='at most one pending task per kind and key ("": per kind)'
    )
    delay = SecondsField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_DELAY_SECS,
        help_text="seconds before the task may run",
    )
    run_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="when the task may run (instead of delay)"
    )
    priority = serializers.IntegerField(
        required=False, allow_null=True, min_value=PRIORITY_MIN, max_value=PRIORITY_MAX
    )
    max_attempts = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_ATTEMPTS_LIMIT
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Apply rivet's own rules (rivet.validation) and report them as field errors."""
        header = checked_header_key(self.context.get("idempotency_key"))
        if header is not None:
            given = attrs.get("idem_key")
            if given is not None and given != header:
                raise serializers.ValidationError(
                    {
                        "idem_key": [
                            f"the {IDEMPOTENCY_HEADER} header ({header!r}) and the idem_key "
                            f"field ({given!r}) differ; send the key once, or twice the same"
                        ]
                    },
                    code="idempotency_key_conflict",
                )
            attrs["idem_key"] = header
        options = {key: value for key, value in attrs.items() if key not in ("kind", "payload")}
        try:
            task_spec(attrs["kind"], attrs.get("payload"), **options)
        except PayloadTooLarge:
            raise
        except InvalidInput as exc:
            field = exc.field if exc.field in self.fields else "non_field_errors"
            raise serializers.ValidationError({field: [str(exc)]}, code=exc.code) from exc
        return attrs


@extend_schema_field(EnqueueSerializer(many=True))
class TaskItemsField(serializers.ListField):
    """The tasks of a bulk call: objects read here, each checked as POST tasks/ by the view."""

    child = serializers.DictField()


class BulkEnqueueSerializer(serializers.Serializer):
    """Several tasks, written all or none (checked item by item in the view)."""

    tasks = TaskItemsField(help_text="each item as the body of POST tasks/")


class AttemptErrorSerializer(serializers.Serializer):
    """One failed attempt in a task's history."""

    attempt = serializers.IntegerField(help_text="the attempt that failed (0: never ran)")
    at = serializers.CharField(help_text="when it ended: the database clock, ISO 8601 in UTC")
    error = serializers.CharField(help_text="why, as last_error said then")


class TaskSerializer(serializers.ModelSerializer):
    """A snapshot of one task row: the model's columns, less the internal ones.

    Left out: the cancel mark (a leased task shows it by dying), the producer's trace context
    (rivet.tracing's, not the API's) and the settle audit (the chaos verifier's evidence).
    """

    errors = AttemptErrorSerializer(
        many=True, help_text="every failed attempt of the whole life, oldest first, bounded"
    )
    database = serializers.SerializerMethodField(
        help_text="the Django database alias that holds the task (ids are per database)"
    )

    def get_database(self, task: Task) -> str:
        return task._state.db or ""

    def get_field_names(self, declared_fields, info):
        names = super().get_field_names(declared_fields, info)
        return [name for name in names if name != "database"] + ["database"]

    class Meta:
        model = Task
        exclude = (
            "cancel_requested",
            "trace_context",
            "settled_epoch",
            "settled_by",
            "claim_rank",
        )
        extra_kwargs = {
            "last_error": {"help_text": "why the current life is failing; empty once done"}
        }


class CancelResultSerializer(serializers.Serializer):
    """What a cancel did, and the task as it is now."""

    outcome = serializers.ChoiceField(
        choices=[o.value for o in CancelOutcome if o is not CancelOutcome.NOT_FOUND],
        help_text=(
            "cancelled: it was not running and is dead now; marked: it is running, its worker "
            "stops and buries it at the next heartbeat; finished: already done or dead, unchanged"
        ),
    )
    task = TaskSerializer()


class BulkItemResultSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="false: the key named this task already")
    task = TaskSerializer()


class BulkResultSerializer(serializers.Serializer):
    results = BulkItemResultSerializer(many=True, help_text="one per task, in the order given")


class QueueStatsSerializer(serializers.Serializer):
    """Counts for one queue, as the database sees them now."""

    queue = serializers.CharField()
    ready = serializers.IntegerField(help_text="pending and runnable now")
    leased = serializers.IntegerField(help_text="pending, held by a worker's lease")
    delayed = serializers.IntegerField(help_text="pending, waiting for a run time or a retry")
    done = serializers.IntegerField()
    dead = serializers.IntegerField()
    oldest_ready_age_secs = serializers.FloatField(allow_null=True)
    fenced = serializers.IntegerField(help_text="stale acks and fails the fence refused")
    done_estimated = serializers.BooleanField(
        help_text="done is past 10 000 and PostgreSQL's estimate, not a count"
    )
    database = serializers.CharField(help_text="the Django database alias that holds the queue")


class SweepResultSerializer(serializers.Serializer):
    queue = serializers.CharField()
    swept = serializers.IntegerField(help_text="pending tasks with no attempts left now buried")


class ErrorSerializer(serializers.Serializer):
    """An error body: ``detail`` for people, ``code`` for programs (and field errors)."""

    detail = serializers.CharField()
    code = serializers.CharField()
