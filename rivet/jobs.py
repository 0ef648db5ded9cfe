"""Job kinds: stable wire names registered to code, and the context a handler runs with.

A task stores only a kind (a string) and a JSON payload; the registry turns the kind back into
code in the worker. The name goes on the wire: renaming it strands every queued task of that
kind, so prefix by domain (``billing.invoice``) and keep it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from rivet.errors import InvalidInput, LeaseLost, UnknownJob, UnknownKind
from rivet.schedules.declare import CronSchedule, code_schedules
from rivet.stores import store_for_queue
from rivet.stores.base import Store
from rivet.validation import CURRENT_TRACE, Limits, build_spec, check_name
from rivet.values import Claimed, EnqueueResult, TaskSpec, frozen_instance

__all__ = [
    "JobContext",
    "JobDefinition",
    "JobRegistry",
    "LeaseLost",
    "job",
    "registry",
    "task_spec",
    "ENQUEUE_OPTIONS",
]


class StopSignal:
    """The worker's lever on one running handler: set once, with the reason it must stop.

    The ``threading.Event`` a handler waits on is made by its first ``wait``: most handlers
    never wait, and an Event (a Condition and its locks) per task is per-task CPU a busy worker
    need not spend (docs/decisions/0005-worker-python-per-task.md). ``_MAKING`` orders that
    against ``set``, so a wait never misses a stop.
    """

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None
        self.reason = ""

    def set(self, reason: str) -> None:
        with _MAKING:
            if self._set:
                return
            self.reason = reason
            self._set = True
            event = self._event
        if event is not None:
            event.set()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None) -> bool:
        if asyncio._get_running_loop() is not None:
            # Blocking here would stop every coroutine of the worker's event loop, the way a
            # handler that never returns would: refuse it loudly instead.
            raise RuntimeError(
                "context.wait() blocks the event loop it is called on; in an async def handler "
                "await asyncio.sleep(...) instead (a stop cancels it) or test "
                "context.should_stop"
            )
        event = self._event
        if event is None:
            with _MAKING:
                if self._event is None:
                    self._event = threading.Event()
                    if self._set:
                        self._event.set()
                event = self._event
        return event.wait(timeout)


#: Orders a StopSignal's first wait (which makes its Event) against its set.
_MAKING = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """What a running handler knows about its task: payload, ids, attempt, and when to stop.

    The worker stops a handler when its lease is lost, its deadline or timeout passes, an
    operator cancels the task, or the worker shuts down; the handler sees it through
    ``should_stop``, ``check()`` and ``wait()``. A stopped handler's result is never acked.
    """

    task_id: int
    """The task's id."""
    queue: str
    """The queue it was claimed from."""
    kind: str
    """The job kind being run."""
    payload: Any
    """The JSON value given at enqueue."""
    attempt: int
    """This attempt's number: 1 for the first, up to ``max_attempts``."""
    max_attempts: int
    """Attempts allowed before the task is dead."""
    idem_key: str | None = None
    """The producer's idempotency key, or None: pass it (or a key derived from it) to the side
    effect, so that attempts 2..N are no-ops."""
    epoch: int = 0
    """The lease epoch of this attempt: later claims of the task get a higher one."""
    owner: str = ""
    """The worker running it (``host:pid``)."""
    # Not a parameter: the worker gives its own signal through for_claimed; a context made by
    # hand (a test's) gets one nobody sets.
    _stop: StopSignal = field(default_factory=StopSignal, init=False, repr=False, compare=False)

    @classmethod
    def for_claimed(cls, claimed: Claimed, stop: StopSignal) -> JobContext:
        """The context of a claimed task, stopped through ``stop`` (the worker keeps it).

        Made with ``frozen_instance`` (a worker makes one per task): every field is given.
        """
        return frozen_instance(
            cls,
            task_id=claimed.task_id,
            queue=claimed.queue,
            kind=claimed.kind,
            payload=claimed.payload,
            attempt=claimed.attempt,
            max_attempts=claimed.max_attempts,
            idem_key=claimed.idem_key,
            epoch=claimed.epoch,
            owner=claimed.owner,
            _stop=stop,
        )

    @property
    def is_last_attempt(self) -> bool:
        """True on the attempt after which a failure buries the task instead of retrying it."""
        return self.attempt >= self.max_attempts

    @property
    def should_stop(self) -> bool:
        """True once the worker told the handler to stop: the result will not be acked."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> str:
        """Why the handler must stop ("" while it may go on)."""
        return self._stop.reason

    def wait(self, secs: float) -> bool:
        """Sleep up to ``secs`` seconds, waking early when told to stop.

        :param secs: the most seconds to sleep.
        :returns: True if the handler was told to stop (then it should return soon).
        """
        return self._stop.wait(secs)

    def check(self) -> None:
        """Raise LeaseLost if the handler should stop (call between steps of long work)."""
        if self._stop.is_set():
            reason = self._stop.reason or "stopped"
            raise LeaseLost(f"task {self.task_id} epoch {self.epoch}: {reason}")


Handler = Callable[[JobContext], Any]
FailedHook = Callable[[JobContext, BaseException], Any]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class HandlerClass(Protocol[R_co]):
    """A job class: ``handle(self, context)`` runs the task (``failed`` is optional)."""

    def handle(self, context: JobContext, /) -> R_co: ...


@dataclass(frozen=True, kw_only=True)
class JobDefinition(Generic[P, R]):
    """A registered kind: its handler and its defaults.

    Generic over the handler's parameters ``P`` and result ``R``: calling the definition calls
    the handler, with the handler's own signature.
    """

    name: str
    handler: Callable[P, R]
    queue: str | None = None
    max_attempts: int | None = None
    timeout_secs: float | None = None
    priority: int = 0
    failed: FailedHook | None = None
    unique: Callable[[Any], str | None] | None = None
    #: The handler is a coroutine function (``async def``): the worker runs it on its event
    #: loop, not on a handler thread. Set from ``handler``, never given.
    is_async: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", handler_is_async(self.name, self.handler))
        if self.failed is not None and not callable(self.failed):
            raise InvalidInput(
                f"job {self.name!r}: the failed hook must be callable (a def or an async def "
                f"taking (context, error)), got {type(self.failed).__name__}"
            )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.handler(*args, **kwargs)

    def unique_key(self, payload: Any) -> str | None:
        return None if self.unique is None else self.unique(payload)

    def enqueue(
        self,
        payload: Any = None,
        *,
        queue: str | None = None,
        idem_key: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        using: str | Store | None = None,
    ) -> EnqueueResult:
        """Enqueue this kind; the options are rivet.enqueue's."""
        spec = spec_of(
            self.name, payload, queue, idem_key, delay, run_at, priority, max_attempts, unique_key
        )
        return store_for_queue(spec.queue, using).task_enqueue(spec)

    async def aenqueue(
        self,
        payload: Any = None,
        *,
        queue: str | None = None,
        idem_key: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        using: str | Store | None = None,
    ) -> EnqueueResult:
        """``enqueue`` from async code (``rivet.aenqueue``'s way)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue, thread_sensitive=True)(
            payload,
            queue=queue,
            idem_key=idem_key,
            delay=delay,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            unique_key=unique_key,
            using=using,
        )


class JobRegistry:
    """Kind name -> JobDefinition. A name may be registered once (re-imports are tolerated)."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition[..., Any]] = {}
        self._lock = threading.Lock()

    def register(self, definition: JobDefinition[P, R]) -> JobDefinition[P, R]:
        check_name("job kind", definition.name)
        with self._lock:
            current = self._jobs.get(definition.name)
            if current is not None and _origin(current) != _origin(definition):
                raise InvalidInput(
                    f"job kind {definition.name!r} is already registered to "
                    f"{_origin(current)}; kind names must be unique"
                )
            self._jobs[definition.name] = definition
        return definition

    def get(self, kind: str) -> JobDefinition[..., Any]:
        try:
            return self._jobs[kind]
        except KeyError:
            raise UnknownJob(
                f"unknown job kind {kind!r}: no job is registered under that name "
                f"(known: {', '.join(sorted(self._jobs)) or 'none'}); "
                "check RIVET['JOB_MODULES'] and the @rivet.job name"
            ) from None

    def find(self, kind: str) -> JobDefinition[..., Any] | None:
        return self._jobs.get(kind)

    def unregister(self, kind: str) -> None:
        with self._lock:
            self._jobs.pop(kind, None)

    def names(self) -> list[str]:
        return sorted(self._jobs)


def handler_is_async(name: str, handler: Any) -> bool:
    """Whether ``handler`` is an ``async def`` (True) or a plain function (False).

    Anything that is neither a plain callable nor a coroutine function is refused here, at
    registration, with what was expected: a generator or an async generator function, or a
    value that is not callable at all, would otherwise fail (or never end) at run time.
    """
    if not callable(handler):
        raise InvalidInput(
            f"job {name!r}: the handler must be a function (def or async def) taking the "
            f"context, or a class with handle(self, context); got {type(handler).__name__}"
        )
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    call = type(target).__dict__.get("__call__") if not inspect.isroutine(target) else None
    candidates = [target] if call is None else [target, call]
    for each in candidates:
        if inspect.isasyncgenfunction(each) or inspect.isgeneratorfunction(each):
            kind = "an async generator" if inspect.isasyncgenfunction(each) else "a generator"
            raise InvalidInput(
                f"job {name!r}: the handler is {kind} function (it yields); a handler is a "
                "plain def (run on a handler thread) or an async def returning its result "
                "(run on the worker's event loop)"
            )
    return any(inspect.iscoroutinefunction(each) for each in candidates)


def _origin(definition: JobDefinition[..., Any]) -> str:
    handler = definition.handler
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', handler)}"


registry = JobRegistry()


def job(
    name: str,
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    priority: int = 0,
    unique: Callable[[Any], str | None] | None = None,
    failed: FailedHook | None = None,
    schedules: Sequence[CronSchedule] = (),
    registry: JobRegistry = registry,
) -> JobDecorator:
    """Register a function ``fn(context)`` or a class with ``handle(self, context)``.

    A class may also define ``failed(self, context, error)``, run once after the last attempt.
    The decorated name becomes the ``JobDefinition``, typed after the function (or ``handle``):
    ``send_invoice.enqueue(payload, ...)`` takes ``rivet.enqueue``'s keyword arguments.

    :param name: the kind's wire name, stored with every task: renaming it strands the queued
        tasks of the old name. Letters, digits and ``_.:-``, starting with a letter or digit.
    :param queue: the queue its tasks go to when an enqueue names none (default
        ``RIVET["QUEUE"]``).
    :param max_attempts: attempts before a task of this kind is dead, unless an enqueue says
        otherwise (default ``RIVET["MAX_ATTEMPTS"]``).
    :param timeout: seconds an attempt may run; past them the worker stops the handler
        (``should_stop``) and the attempt fails. None: no limit but the lease's.
    :param priority: the default priority of its tasks, -100..100 (higher runs first).
    :param unique: a function of the payload that returns a unique key (or None for none):
        while a pending task of this kind holds a key, an enqueue with the same key returns it
        as a duplicate instead of adding a second.
    :param failed: ``failed(context, error)``, run once when a task of this kind is dead after
        its last attempt (a class defines it as a method instead).
    :param schedules: ``rivet.cron(...)`` values: the workers enqueue a task of this kind at
        each tick.
    :param registry: where the job is registered: the process's own, which the workers and
        the producers read; a test may pass a ``JobRegistry`` of its own.
    """
    return JobDecorator(
        name=name,
        queue=queue,
        max_attempts=max_attempts,
        timeout=timeout,
        priority=priority,
        unique=unique,
        failed=failed,
        schedules=tuple(schedules),
        registry=registry,
    )


@dataclass(frozen=True, kw_only=True)
class JobDecorator:
    """What ``job(...)`` returns: registers the function or class it decorates."""

    name: str
    queue: str | None
    max_attempts: int | None
    timeout: float | None
    priority: int
    unique: Callable[[Any], str | None] | None
    failed: FailedHook | None
    schedules: tuple[CronSchedule, ...]
    registry: JobRegistry

    @overload
    def __call__(self, target: type[HandlerClass[R]]) -> JobDefinition[[JobContext], R]: ...

    @overload
    def __call__(self, target: Callable[P, R]) -> JobDefinition[P, R]: ...

    def __call__(self, target: Any) -> JobDefinition[..., Any]:
        if isinstance(target, type):
            _check_job_class(self.name, target)
            instance = target()
            handler = instance.handle
            hook = self.failed or getattr(instance, "failed", None)
        else:
            handler, hook = target, self.failed
        definition = JobDefinition(
            name=self.name,
            handler=handler,
            queue=self.queue,
            max_attempts=self.max_attempts,
            timeout_secs=self.timeout,
            priority=self.priority,
            failed=hook,
            unique=self.unique,
        )
        registered = self.registry.register(definition)
        if self.schedules:
            code_schedules.add(self.name, list(self.schedules))
        return registered


def _check_job_class(name: str, target: type) -> None:
    """A job class has one ``handle``, sync or async; refuse one that says both or neither."""
    handle = getattr(target, "handle", None)
    if handle is None or not callable(handle):
        raise InvalidInput(
            f"job {name!r}: the class {target.__qualname__} has no handle(self, context) "
            "method; a job class defines handle (def or async def)"
        )
    twin = getattr(target, "ahandle", None)
    if twin is not None:
        raise InvalidInput(
            f"job {name!r}: the class {target.__qualname__} defines both handle and ahandle; "
            "a job runs one way: define only handle, as a def (run on a handler thread) or an "
            "async def (run on the worker's event loop)"
        )


#: The options of an enqueue besides its kind and payload (``using`` picks the store).
ENQUEUE_OPTIONS = frozenset(
    {"queue", "idem_key", "delay", "run_at", "priority", "max_attempts", "unique_key"}
)


def task_spec(
    kind: str,
    payload: Any = None,
    *,
    limits: Limits | None = None,
    trace_context: Any = CURRENT_TRACE,
    **options: Any,
) -> TaskSpec:
    """Validate an enqueue and fill its defaults from the registered job, then settings.

    ``limits`` are the settings, and ``trace_context`` the producer's trace context
    (``rivet.tracing.carrier()``), read once by the caller (once per bulk call); by default
    both are read here.
    """
    if not ENQUEUE_OPTIONS.issuperset(options):
        unknown = sorted(set(options) - ENQUEUE_OPTIONS)
        raise TypeError(
            f"unknown enqueue options: {', '.join(unknown)}; "
            f"known: {', '.join(sorted(ENQUEUE_OPTIONS))}"
        )
    get = options.get
    return spec_of(
        kind,
        payload,
        get("queue"),
        get("idem_key"),
        get("delay"),
        get("run_at"),
        get("priority"),
        get("max_attempts"),
        get("unique_key"),
        limits,
        trace_context,
    )


def spec_of(
    kind: str,
    payload: Any,
    queue: str | None,
    idem_key: str | None,
    delay: float | timedelta | None,
    run_at: datetime | None,
    priority: int | None,
    max_attempts: int | None,
    unique_key: str | None,
    limits: Limits | None = None,
    trace_context: Any = CURRENT_TRACE,
) -> TaskSpec:
    """``task_spec`` with every option given, in ENQUEUE_OPTIONS' order of enqueue's signature
    (None: not given): how ``rivet.enqueue`` and a job's ``enqueue`` call it, one call per
    task, without the dict of keyword options ``task_spec`` takes and vets."""
    limits = limits or Limits.read()
    definition = registry.find(kind) if isinstance(kind, str) else None
    if definition is None:
        if not limits.allow_unknown_kinds:
            raise _unknown_kind(check_name("kind", kind, limits.name))
        queue = limits.queue if queue is None else queue
        priority = 0 if priority is None else priority
    else:
        # The first that is not None (a job's default of 0 is a real value), written out: this
        # runs once per task.
        if queue is None:
            queue = limits.queue if definition.queue is None else definition.queue
        if priority is None:
            priority = 0 if definition.priority is None else definition.priority
        if max_attempts is None:
            max_attempts = definition.max_attempts
        if unique_key is None:
            unique_key = definition.unique_key(payload)
    return build_spec(
        limits=limits,
        queue=queue,
        kind=kind,
        payload=payload,
        idem_key=idem_key,
        unique_key=unique_key,
        delay=delay,
        run_at=run_at,
        priority=priority,
        max_attempts=max_attempts,
        trace_context=trace_context,
    )


def _unknown_kind(kind: str) -> UnknownKind:
    known = ", ".join(registry.names()) or "none"
    return UnknownKind(
        f"unknown job kind {kind!r}: no installed app registers it (known: {known}); define it "
        f"with @rivet.job({kind!r}) in an installed app's jobs.py (or a module in "
        "RIVET['JOB_MODULES']), or, if workers elsewhere run it, set "
        "RIVET['ALLOW_UNKNOWN_KINDS'] = True",
        field="kind",
    )
