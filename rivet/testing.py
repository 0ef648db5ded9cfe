"""A testing fake for producers, and ``run_now`` for testing job logic without a queue.

::

    with rivet.testing.fake() as queue:
        signup(user)                       # calls rivet.enqueue("mail.welcome", ...)
    queue.assert_enqueued("mail.welcome", times=1, payload={"user": user.pk})

While a fake is active, every enqueue (``rivet.enqueue``, ``enqueue_many``, the django.tasks
backend, ``rivet_enqueue``) is validated as usual and then recorded in an in-memory store
instead of the database, whatever ``using`` says; idempotency keys and unique keys behave as
on a real store. The fake ignores transactions: a task enqueued in a block that rolls back
stays recorded. The module-level assertions (``rivet.testing.assert_enqueued`` ...) use the
innermost active fake and raise NotAFake when there is none, so a test that forgot to install
the fake fails instead of passing vacuously.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rivet.errors import RivetError
from rivet.stores import override_store
from rivet.stores.memory import MemoryStore
from rivet.values import EnqueueResult, TaskRecord, TaskSpec

__all__ = [
    "FakeQueue",
    "NotAFake",
    "active_fake",
    "assert_enqueued",
    "assert_not_enqueued",
    "assert_nothing_enqueued",
    "enqueued",
    "fake",
    "arun_now",
    "run_now",
]


class NotAFake(RivetError, AssertionError):
    """An enqueue assertion was made where no rivet.testing fake records enqueues."""


_UNSET: Any = object()


@dataclass(frozen=True, kw_only=True)
class EnqueueCall:
    """One enqueue the fake saw, duplicates included."""

    spec: TaskSpec
    result: EnqueueResult


class RecordingStore(MemoryStore):
    """A MemoryStore that also keeps every enqueue call, duplicates included."""

    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[EnqueueCall] = []

    def task_enqueue(self, spec: TaskSpec) -> EnqueueResult:
        result = super().task_enqueue(spec)
        self.calls.append(EnqueueCall(spec=spec, result=result))
        return result

    def task_enqueue_many(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        results = super().task_enqueue_many(specs)
        self.calls.extend(
            EnqueueCall(spec=s, result=r) for s, r in zip(specs, results, strict=True)
        )
        return results


class FakeQueue:
    """The enqueues made while a fake was active, with assertions on them."""

    def __init__(self) -> None:
        self.store = RecordingStore()

    @property
    def calls(self) -> list[EnqueueCall]:
        """Every enqueue call, in order, including those that returned a duplicate."""
        return list(self.store.calls)

    def enqueued(self, kind: str | None = None) -> list[TaskRecord]:
        """The tasks recorded (one per task, not per duplicate call), optionally of one kind."""
        return [t for t in self.store.task_list(limit=10**9) if kind is None or t.kind == kind]

    def assert_enqueued(
        self,
        kind: str,
        *,
        times: int | None = None,
        queue: str | None = None,
        payload: Any = _UNSET,
    ) -> list[TaskRecord]:
        """Fail unless tasks of ``kind`` (matching queue and payload if given) were recorded.

        ``times`` asks for an exact count; without it, at least one must match. Returns them.
        """
        matching = [
            t
            for t in self.enqueued(kind)
            if (queue is None or t.queue == queue)
            and (payload is _UNSET or t.payload == _as_json(payload))
        ]
        wanted = f"{times} task(s)" if times is not None else "a task"
        if (times is None and not matching) or (times is not None and len(matching) != times):
            raise AssertionError(
                f"expected {wanted} of kind {kind!r}{_filters(queue, payload)}, "
                f"found {len(matching)}; recorded: {self._summary()}"
            )
        return matching

    def assert_not_enqueued(self, kind: str) -> None:
        """Fail if any task of ``kind`` was recorded."""
        found = self.enqueued(kind)
        if found:
            raise AssertionError(
                f"expected no task of kind {kind!r}, found {len(found)}: "
                f"{[t.payload for t in found]!r}"
            )

    def assert_nothing_enqueued(self) -> None:
        """Fail if anything at all was recorded."""
        if self.store.calls:
            raise AssertionError(f"expected nothing enqueued; recorded: {self._summary()}")

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self.store = RecordingStore()

    def _summary(self) -> str:
        tasks = self.enqueued()
        if not tasks:
            return "nothing"
        return ", ".join(f"{t.kind}@{t.queue} {json.dumps(t.payload)}" for t in tasks)


_stack: list[FakeQueue] = []
_stack_lock = threading.Lock()


@contextlib.contextmanager
def fake() -> Iterator[FakeQueue]:
    """Record enqueues in a FakeQueue instead of performing them, for the ``with`` block."""
    queue = FakeQueue()
    with _stack_lock:
        _stack.append(queue)
    try:
        with override_store(lambda: queue.store):
            yield queue
    finally:
        with _stack_lock:
            _stack.remove(queue)


def active_fake() -> FakeQueue | None:
    """The innermost active fake, or None when enqueues go to a real store."""
    with _stack_lock:
        return _stack[-1] if _stack else None


def _require_fake(what: str) -> FakeQueue:
    current = active_fake()
    if current is None:
        raise NotAFake(
            f"rivet.testing.{what}() needs an active fake, but enqueues are going to the real "
            "store; wrap the code under test in `with rivet.testing.fake() as queue:` and "
            "assert on `queue`"
        )
    return current


def enqueued(kind: str | None = None) -> list[TaskRecord]:
    """FakeQueue.enqueued on the active fake; NotAFake if there is none."""
    return _require_fake("enqueued").enqueued(kind)


def assert_enqueued(
    kind: str, *, times: int | None = None, queue: str | None = None, payload: Any = _UNSET
) -> list[TaskRecord]:
    """FakeQueue.assert_enqueued on the active fake; NotAFake if there is none."""
    current = _require_fake("assert_enqueued")
    return current.assert_enqueued(kind, times=times, queue=queue, payload=payload)


def assert_not_enqueued(kind: str) -> None:
    """FakeQueue.assert_not_enqueued on the active fake; NotAFake if there is none."""
    _require_fake("assert_not_enqueued").assert_not_enqueued(kind)


def assert_nothing_enqueued() -> None:
    """FakeQueue.assert_nothing_enqueued on the active fake; NotAFake if there is none."""
    _require_fake("assert_nothing_enqueued").assert_nothing_enqueued()


def run_now(
    kind: str,
    payload: Any = None,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    queue: str | None = None,
    idem_key: str | None = None,
    task_id: int = 0,
) -> Any:
    """Run the registered handler of ``kind`` once, with a JobContext and no queue.

    The payload and the return value go through JSON as they would on a real queue. If the
    handler raises on the last attempt, the job's ``failed`` hook runs before the re-raise. An
    ``async def`` handler (or hook) runs to its end on an event loop of its own; from async
    code (a running loop), await ``arun_now`` instead.
    """
    import asyncio

    if _is_async_job(kind):
        if asyncio._get_running_loop() is not None:
            raise RivetError(
                f"job {kind!r} is async def and an event loop is running here: "
                "await rivet.testing.arun_now(...) instead of run_now"
            )
        return asyncio.run(
            arun_now(
                kind,
                payload,
                attempt=attempt,
                max_attempts=max_attempts,
                queue=queue,
                idem_key=idem_key,
                task_id=task_id,
            )
        )
    definition, context = _job_and_context(
        kind, payload, attempt, max_attempts, queue, idem_key, task_id
    )
    try:
        result = definition(context)
    except Exception as error:
        if context.is_last_attempt and definition.failed is not None:
            _finish_hook(definition.failed(context, error))
        raise
    return _as_json(result, what=f"the return value of job {kind!r}")


async def arun_now(
    kind: str,
    payload: Any = None,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    queue: str | None = None,
    idem_key: str | None = None,
    task_id: int = 0,
) -> Any:
    """``run_now`` from async code: an ``async def`` handler (or hook) is awaited, a sync one
    is called as ``run_now`` calls it.

    :param kind: the registered job kind to run.
    :param payload: its payload (through JSON, as on a queue).
    :param attempt: the attempt number the context says.
    :param max_attempts: the attempts allowed; default the job's, else the setting.
    :param queue: the queue the context says; default the job's, else the setting.
    :param idem_key: the idempotency key the context says.
    :param task_id: the task id the context says.
    :returns: the handler's result, through JSON.
    """
    import inspect

    definition, context = _job_and_context(
        kind, payload, attempt, max_attempts, queue, idem_key, task_id
    )
    try:
        result = definition(context)
        if inspect.isawaitable(result):
            result = await result
    except Exception as error:
        if context.is_last_attempt and definition.failed is not None:
            hooked = definition.failed(context, error)
            if inspect.isawaitable(hooked):
                await hooked
        raise
    return _as_json(result, what=f"the return value of job {kind!r}")


def _is_async_job(kind: str) -> bool:
    from rivet.jobs import registry

    return registry.get(kind).is_async


def _finish_hook(hooked: Any) -> None:
    """A failed hook's answer: an async hook's coroutine runs to its end here."""
    import asyncio
    import inspect

    if inspect.isawaitable(hooked):
        asyncio.run(_awaited(hooked))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _job_and_context(
    kind: str,
    payload: Any,
    attempt: int,
    max_attempts: int | None,
    queue: str | None,
    idem_key: str | None,
    task_id: int,
) -> tuple[Any, Any]:
    from rivet.conf import rivet_settings
    from rivet.jobs import JobContext, registry

    definition = registry.get(kind)
    limit = max_attempts or definition.max_attempts or rivet_settings.MAX_ATTEMPTS
    context = JobContext(
        task_id=task_id,
        queue=queue or definition.queue or rivet_settings.QUEUE,
        kind=kind,
        payload=_as_json(payload),
        attempt=attempt,
        max_attempts=limit,
        idem_key=idem_key,
    )
    return definition, context


def _as_json(value: Any, what: str = "payload") -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise RivetError(f"{what} must be JSON-serialisable: {exc}") from exc


def _filters(queue: str | None, payload: Any) -> str:
    parts = []
    if queue is not None:
        parts.append(f"queue={queue!r}")
    if payload is not _UNSET:
        parts.append(f"payload={payload!r}")
    return f" with {', '.join(parts)}" if parts else ""
