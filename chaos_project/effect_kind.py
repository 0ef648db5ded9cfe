"""The ``effect`` demo kind: a side effect worth protecting, through the effect service.

The key sent as ``Idempotency-Key`` is the task's idempotency key, or ``rivet-task-<id>`` when
it has none; both are the same on every delivery of the task (and after a requeue), which is
what turns deliveries 2..N into replays. A replay completes the task with the first answer.

Errors: ``EffectRejected`` (a 4xx) and ``EffectUnavailable`` (no connection, a timeout, a 5xx)
are both handler errors, with the service's answer in last_error. rivet has one failure path:
an attempt that raises is retried after the backoff until max_attempts, and then buried with
last_error ending ``max attempts exceeded (handler error)``. A 4xx will fail the same way on
every attempt, so such a task dies after max_attempts (5 here) with the 4xx body in last_error;
a 5xx or an outage usually clears, and a retry with the same key is safe.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from rivet.effect_client import EffectResponse, post_effect
from rivet.failpoints import failpoint, fires
from rivet.jobs import JobContext, job

#: Seconds to connect to the service and to wait for each read of its answer.
EFFECT_CONNECT_TIMEOUT_SECS = 1.0
EFFECT_READ_TIMEOUT_SECS = 5.0


def effect_key(context: JobContext) -> str:
    """The Idempotency-Key for a task: stable across deliveries of that task."""
    return context.idem_key or f"rivet-task-{context.task_id}"


def send_effect(context: JobContext) -> EffectResponse:
    """Unless the lease is lost: fire ``before_effect``, then POST the payload under the key."""
    context.check()
    failpoint("before_effect")
    return post_effect(
        settings.EFFECT_SERVICE_URL,
        effect_key(context),
        context.payload,
        timeout=EFFECT_READ_TIMEOUT_SECS,
        connect_timeout=EFFECT_CONNECT_TIMEOUT_SECS,
    )


@job("effect", max_attempts=5)
@fires("before_effect")
def effect(context: JobContext) -> dict[str, Any]:
    """POST the payload to the effect service under the task's key; return its answer."""
    response = send_effect(context)
    return {"status": response.status, "replay": response.replay, "effect": response.body}
