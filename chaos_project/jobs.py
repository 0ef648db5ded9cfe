"""Demo job kinds of the host project: ``noop``, ``fail`` and ``sleep``, and the ``async def``
kinds ``async_noop``, ``async_sleep``, ``async_orm`` and ``async_crowd``.

rivet's app config imports every installed app's ``jobs`` module, so these register when
Django starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async

from rivet.errors import InvalidInput
from rivet.jobs import JobContext, job

MAX_SLEEP_MS = 600_000


class DemoFailure(Exception):
    """What the ``fail`` kind raises on every attempt."""


@job("noop")
def noop(context: JobContext) -> None:
    """Succeeds at once."""
    return None


@job("fail")
def fail(context: JobContext) -> Any:
    """Fails on every attempt: shows the retry path and the dead-letter path."""
    raise DemoFailure(f"the fail kind always fails (attempt {context.attempt})")


@job("sleep")
def sleep(context: JobContext) -> dict[str, int]:
    """Waits ``payload["ms"]`` milliseconds, stopping early if its lease is lost."""
    ms = sleep_ms(context.payload)
    context.wait(ms / 1000)
    context.check()
    return {"slept_ms": ms}


def sleep_ms(payload: Any) -> int:
    ms = payload.get("ms") if isinstance(payload, dict) else None
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_SLEEP_MS:
        raise InvalidInput(
            f'sleep needs a payload {{"ms": N}} with N an integer in 0..{MAX_SLEEP_MS}, '
            f"got {payload!r}"
        )
    return ms


@job("async_noop")
async def async_noop(context: JobContext) -> None:
    """Succeeds at once, on the worker's event loop."""
    return None


@job("async_sleep")
async def async_sleep(context: JobContext) -> dict[str, int]:
    """Awaits ``payload["ms"]`` milliseconds; a stop cancels the sleep."""
    ms = sleep_ms(context.payload)
    await asyncio.sleep(ms / 1000)
    return {"slept_ms": ms}


@job("async_orm")
async def async_orm(context: JobContext) -> dict[str, Any]:
    """Reads its own task row through Django's async ORM (``aget``, on asgiref's shared
    thread), or with ``{"threads": true}`` through ``sync_to_async(thread_sensitive=False)``
    (on the event loop's executor threads), awaiting ``payload["ms"]`` (default 0) between."""
    from rivet.models import Task

    payload = context.payload if isinstance(context.payload, dict) else {}
    ms = sleep_ms({"ms": payload.get("ms", 0)})
    if payload.get("threads"):

        def read() -> int:
            return Task.objects.get(pk=context.task_id).attempts

        before = await sync_to_async(read, thread_sensitive=False)()
    else:
        before = (await Task.objects.aget(pk=context.task_id)).attempts
    await asyncio.sleep(ms / 1000)
    count = await Task.objects.filter(pk=context.task_id).acount()
    return {"attempts": before, "found": count}


#: ``async_crowd`` handlers in flight on this worker's event loop now, and the most seen.
_crowd = {"now": 0, "most": 0}


@job("async_crowd")
async def async_crowd(context: JobContext) -> dict[str, int]:
    """Waits on the event loop until ``payload["n"]`` of its kind are in flight at once on this
    worker, or ``payload["ms"]`` pass; returns the most it saw in flight (``crowd``).

    A worker that fills its async slots as soon as it has the tasks gets every one to ``n``;
    one that claims more only when a handler returns gets none of them there.
    """
    payload = context.payload if isinstance(context.payload, dict) else {}
    wanted = int(payload.get("n", 1))
    give_up = asyncio.get_running_loop().time() + sleep_ms({"ms": payload.get("ms", 0)}) / 1000
    _crowd["now"] += 1
    try:
        while True:
            _crowd["most"] = max(_crowd["most"], _crowd["now"])
            if _crowd["most"] >= wanted or asyncio.get_running_loop().time() >= give_up:
                return {"crowd": _crowd["most"]}
            await asyncio.sleep(0.01)
    finally:
        _crowd["now"] -= 1
