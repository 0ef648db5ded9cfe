"""The ``effect`` demo kind: a side effect worth protecting, through the effect service.

The key sent as ``Idempotency-Key`` is the task's idempotency key, or ``rivet-task-<id>`` when
it has none; both are the same on every delivery of the task (and after a requeue), which is
what turns deliveries 2..N into replays. A replay completes the task with the first answer.

Errors: ``EffectUnavailable`` (no connection, a timeout, 408, 429, a 5xx) usually clears, so it
is an ordinary handler error: retried after the backoff with the same key (safe), and buried
after max_attempts (5 here) with last_error ending ``max attempts exceeded (handler error)``.
``EffectRejected`` (any other 4xx: 422 for a key reused with another body, 400 for a request the
service refuses) fails the same way on every attempt, so it is raised as ``rivet.Permanent``:
the task is buried at once, the service's answer and ``permanent failure (retrying cannot
help)`` in last_error.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from effect_project.aclient import apost_effect
from effect_project.client import EffectRejected, EffectResponse, post_effect
from rivet.errors import Permanent
from rivet.failpoints import failpoint, fires
from rivet.jobs import JobContext, job

#: Seconds to connect to the service and to wait for each read of its answer.
EFFECT_CONNECT_TIMEOUT_SECS = 1.0
EFFECT_READ_TIMEOUT_SECS = 5.0


def effect_key(context: JobContext) -> str:
    """The Idempotency-Key for a task: stable across deliveries of that task."""
    return context.idem_key or f"rivet-task-{context.task_id}"


def send_effect(context: JobContext) -> EffectResponse:
    """Unless the lease is lost: fire ``before_effect``, then POST the payload under the key.

    A 4xx the service would give on every attempt is raised as ``rivet.Permanent``.
    """
    context.check()
    failpoint("before_effect")
    try:
        return post_effect(
            settings.EFFECT_SERVICE_URL,
            effect_key(context),
            context.payload,
            timeout=EFFECT_READ_TIMEOUT_SECS,
            connect_timeout=EFFECT_CONNECT_TIMEOUT_SECS,
        )
    except EffectRejected as exc:
        raise Permanent(str(exc)) from exc


async def asend_effect(context: JobContext) -> EffectResponse:
    """``send_effect`` for an ``async def`` handler: the same POST through the asyncio client
    (``effect_project.aclient``); a stop cancels the wait for the answer."""
    context.check()
    failpoint("before_effect")
    try:
        return await apost_effect(
            settings.EFFECT_SERVICE_URL,
            effect_key(context),
            context.payload,
            timeout=EFFECT_READ_TIMEOUT_SECS,
            connect_timeout=EFFECT_CONNECT_TIMEOUT_SECS,
        )
    except EffectRejected as exc:
        raise Permanent(str(exc)) from exc


@job("effect", max_attempts=5)
@fires("before_effect")
def effect(context: JobContext) -> dict[str, Any]:
    """POST the payload to the effect service under the task's key; return its answer."""
    response = send_effect(context)
    return {"status": response.status, "replay": response.replay, "effect": response.body}


@job("async_effect", max_attempts=5)
@fires("before_effect")
async def async_effect(context: JobContext) -> dict[str, Any]:
    """The ``effect`` kind as an ``async def``: the same POST through the asyncio client."""
    response = await asend_effect(context)
    return {"status": response.status, "replay": response.replay, "effect": response.body}
