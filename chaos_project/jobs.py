"""Demo job kinds of the host project: ``noop``, ``fail`` and ``sleep``.

rivet's app config imports every installed app's ``jobs`` module, so these register when
Django starts.
"""

from __future__ import annotations

from typing import Any

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
