"""The effect API: POST /effects (idempotent), GET /effects/<key>, GET /verify, GET /health."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, OuterRef
from django.db.models.functions import Now
from django.http.request import RawPostDataException
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from effect_project.effects.models import Effect
from rivet import tracing
from rivet.errors import RivetError
from rivet.idempotency.conf import setting
from rivet.idempotency.decorators import KEY_HEADER, check_key, idempotent
from rivet.idempotency.models import IdempotencyRecord

SCOPE = "effects"
INVARIANTS = ("duplicate_effects", "effects_without_dedup", "dedup_without_effect")


class FailpointHit(RivetError):
    """The EFFECT_FAIL_BETWEEN_WRITES failpoint fired; the transaction rolls back."""


class EffectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Effect
        fields = ["id", "key", "body", "created_at"]


class EffectCreateView(APIView):
    @idempotent(scope=SCOPE)
    def post(self, request: Request) -> Response:
        if not _has_body(request):  # DRF reads an empty body as {}: no effect is "nothing"
            raise ValidationError(
                {"body": 'is empty; an effect is a JSON object, e.g. {"amount": 100}'},
                code="empty_body",
            )
        if not isinstance(request.data, dict):
            raise ValidationError({"body": 'must be a JSON object, e.g. {"amount": 100}'})
        key = request.headers[KEY_HEADER]
        with tracing.span("effect.write", **{"effect.key": key}):
            effect = Effect.objects.create(key=key, body=request.data)
        if settings.EFFECT_FAIL_BETWEEN_WRITES:
            raise FailpointHit("EFFECT_FAIL_BETWEEN_WRITES: effect written, answer not stored")
        return Response(_effect_data(effect), status=201)


def _has_body(request: Request) -> bool:
    """Whether the request carries a body (``@idempotent`` read it whole before the view)."""
    try:
        return bool(request.body)
    except RawPostDataException:  # read as a stream: DRF saw bytes, so there were some
        return True


_CREATED_AT = serializers.DateTimeField()


def _effect_data(effect: Effect) -> dict[str, object]:
    """What EffectSerializer gives for a new effect, without building a serializer per request
    (the POST is the service's hot path; test_get_effect_by_key holds the POST's answer to the
    GET's, which EffectSerializer writes)."""
    return {
        "id": effect.pk,
        "key": effect.key,
        "body": effect.body,
        "created_at": _CREATED_AT.to_representation(effect.created_at),
    }


class EffectDetailView(APIView):
    def get(self, request: Request, key: str) -> Response:
        check_key("the key in the path", key)  # a key no POST could have stored: 400
        effect = Effect.objects.filter(key=key).order_by("id").first()
        if effect is None:
            raise NotFound(f"no effect has the key {key!r}")
        return Response(EffectSerializer(effect).data)


class HealthView(APIView):
    """Whether the service serves and reaches its database: one ``SELECT 1``, no table read.

    What a supervisor, a load balancer or a harness waits on before sending work. ``/verify``
    counts every effect, which takes seconds once the tables hold a few hundred thousand rows,
    and waits behind any lock on them. A database that does not answer is the service's usual
    503 (``database_unavailable``)."""

    def get(self, request: Request) -> Response:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return Response({"ok": True})


class VerifyView(APIView):
    def get(self, request: Request) -> Response:
        return Response(verify())


def verify() -> dict[str, int | bool]:
    """Count the effects and the violations of each invariant (each must be 0)."""
    dedup = IdempotencyRecord.objects.filter(scope=SCOPE)
    # Dedup rows past retention are pruned on purpose, so only younger effects must have one.
    retained = Now() - timedelta(seconds=setting("IDEMPOTENCY_RETENTION_SECS"))
    report = {
        "effects_written": Effect.objects.count(),
        "keys": Effect.objects.values("key").distinct().count(),
        "duplicate_effects": (
            Effect.objects.values("key").annotate(n=Count("id")).filter(n__gt=1).count()
        ),
        "effects_without_dedup": (
            Effect.objects.filter(created_at__gte=retained)
            .filter(~Exists(dedup.filter(key=OuterRef("key"))))
            .count()
        ),
        "dedup_without_effect": (
            dedup.filter(~Exists(Effect.objects.filter(key=OuterRef("key")))).count()
        ),
    }
    report["ok"] = not any(report[name] for name in INVARIANTS)
    return report
