"""The chaos harness's job kind: work a while, then the effect, under the task's key.

``chaos.effect`` waits ``payload["work_ms"]`` milliseconds before its effect, so that a worker
the harness stops (SIGSTOP) or kills is likely to hold tasks in flight. The wait ends early when
the guard stops the handler (its lease was fenced or lapsed), and then no effect is attempted.
A later attempt works at least ``LATER_ATTEMPT_MIN_MS``: the new holder of a task taken from a
stopped worker is then still at work when the harness looks (every 50 ms), and the harness can
hold it there while the stopped worker's late write meets its lease (see
``chaos_project.chaos.loop``, pinning).
The effect itself is the ``effect`` kind's: a POST to the effect service with the task's
idempotency key, so a second delivery is a replay and never a second effect.

Some chaos tasks fail on purpose, after the wait and before any effect, so that the run sends
retries and burials through the store's guards as well as acks: ``fail_attempts: N`` raises on
attempts 1..N (a retry, or with N >= max_attempts a burial as ``max attempts exceeded``), and
``permanent_at: K`` raises ``rivet.Permanent`` at attempt K (buried at once).

With ``RIVET_CHAOS_HANDLERS=async`` in a worker's environment (``rivet_chaos --handlers
async``), ``chaos.effect`` is the same work as an ``async def``: the wait is an ``await`` (a stop
cancels it) and the effect goes through the asyncio client, so kills, failpoints and zombies
reach tasks in flight on the worker's event loop. ``use_handlers`` registers the variant a
worker's environment asks for (a forked worker calls it again after taking its environment).

``chaos.tick`` is the task of a chaos schedule's tick (``rivet_chaos --schedules N``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from chaos_project.effect_kind import asend_effect, send_effect
from rivet.errors import InvalidInput, Permanent
from rivet.failpoints import fires
from rivet.jobs import JobContext, job, registry

MAX_WORK_MS = 60_000
LATER_ATTEMPT_MIN_MS = 300


EFFECT_KIND = "chaos.effect"
#: The worker environment's choice of ``chaos.effect``'s handler: sync (a def) or async.
HANDLERS_ENV = "RIVET_CHAOS_HANDLERS"
HANDLERS = ("sync", "async")


@fires("before_effect")
def chaos_effect(context: JobContext) -> dict[str, Any]:
    """Work ``work_ms`` (stopping early if the lease is lost), then make the effect once."""
    context.wait(_ms(context) / 1000)
    _fail_by_design(context)
    response = send_effect(context)
    return {"status": response.status, "replay": response.replay, "effect_id": effect_id(response)}


@fires("before_effect")
async def chaos_effect_async(context: JobContext) -> dict[str, Any]:
    """``chaos_effect`` as a coroutine: the work is awaited, the effect is the asyncio POST."""
    await asyncio.sleep(_ms(context) / 1000)
    context.check()
    _fail_by_design(context)
    response = await asend_effect(context)
    return {"status": response.status, "replay": response.replay, "effect_id": effect_id(response)}


def _ms(context: JobContext) -> int:
    ms = work_ms(context.payload)
    return max(ms, LATER_ATTEMPT_MIN_MS) if context.attempt > 1 else ms


def _fail_by_design(context: JobContext) -> None:
    payload = context.payload
    if payload.get("permanent_at") == context.attempt:
        raise Permanent(f"chaos task {payload.get('chaos_task')} fails permanently by design")
    fail_attempts = payload.get("fail_attempts", 0)
    if isinstance(fail_attempts, int) and context.attempt <= fail_attempts:
        raise RuntimeError(
            f"chaos task {payload.get('chaos_task')} fails attempt {context.attempt} by design"
        )


def use_handlers(handlers: str | None) -> None:
    """Register ``chaos.effect`` as the sync (default) or the async handler."""
    handlers = handlers or "sync"
    if handlers not in HANDLERS:
        raise InvalidInput(f"{HANDLERS_ENV} must be sync or async, got {handlers!r}")
    registry.unregister(EFFECT_KIND)
    target = chaos_effect_async if handlers == "async" else chaos_effect
    job(EFFECT_KIND, max_attempts=10)(target)


use_handlers(os.environ.get(HANDLERS_ENV))


def effect_id(response: Any) -> int | None:
    """The id of the effect the service's answer names (the verifier's H5 looks it up in the
    service's own table)."""
    body = response.body
    found = body.get("id") if isinstance(body, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def work_ms(payload: Any) -> int:
    ms = payload.get("work_ms") if isinstance(payload, dict) else None
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_WORK_MS:
        raise InvalidInput(
            f'chaos.effect needs a payload {{"work_ms": N, ...}} with N an integer in '
            f"0..{MAX_WORK_MS}, got {payload!r}"
        )
    return ms


@job("chaos.tick", max_attempts=10)
def chaos_tick(context: JobContext) -> dict[str, Any]:
    """A chaos schedule's tick (``rivet_chaos --schedules``): nothing to do but be one task.

    The verifier counts these tasks per (schedule, tick), from the payload the scheduler wrote:
    T1 and T2 (chaos_project.chaos.ticks).
    """
    return {"scheduled_at": context.payload.get("scheduled_at")}
