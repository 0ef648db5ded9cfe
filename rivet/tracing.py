"""OpenTelemetry tracing (the `otel` extra): a task carries its producer's trace to each attempt.

rivet uses the OpenTelemetry API only; the host configures the SDK (a tracer provider and an
exporter) as for any other library. Without the ``opentelemetry-api`` package nothing here
imports it and every function is a no-op costing one attribute read.

- The producer: :func:`carrier` is the current W3C trace context (``traceparent``, and
  ``tracestate`` when there is one), stored in the task row's ``trace_context`` column, never in
  the payload. No current span: no context, NULL.
- The worker: :func:`start_attempt` starts one span per attempt (kind CONSUMER), a child of the
  stored context, with the task's id, queue, kind, attempt and lease epoch as attributes. The
  handler runs inside it (so the effect client's request carries it on); the attempt's ending
  (acked, retried, dead, cancelled, fenced, lost) is set when the worker settles it, and a
  fenced write or a dead ending is also an event on the span. An attempt whose previous attempt
  never settled (a killed worker's span is never exported) names it in the event
  ``rivet.previous_attempt_lost``.
- The effect client injects the current context into its request's headers (:func:`inject`);
  the effect service continues it (:func:`server_span`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

__all__ = [
    "AttemptSpan",
    "carrier",
    "enabled",
    "inject",
    "server_span",
    "span",
    "start_attempt",
]

TRACER_NAME = "rivet"
#: The span of one attempt; the kind follows it (``rivet.attempt demo.add``).
ATTEMPT_SPAN = "rivet.attempt"
#: Endings that are failures of the attempt (the span's status is ERROR).
FAILED_ENDINGS = frozenset({"retried", "dead", "fenced", "lost"})
#: Endings marked by an event as well as the ``rivet.ending`` attribute.
EVENT_ENDINGS = {"fenced": "rivet.fenced", "dead": "rivet.dead"}

#: The event on an attempt's span naming the attempt before it, which never settled.
LOST_EVENT = "rivet.previous_attempt_lost"

_api: Any = None  # once looked for: see _otel; False when opentelemetry is not installed


def _otel() -> Any:
    """``(trace, propagate, tracer, context)`` from opentelemetry-api, or None when it is not
    installed.

    The tracer is looked up once: before the host sets its provider it is a proxy that
    delegates to the provider once there is one.
    """
    global _api
    if _api is None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:  # not installed (or another opentelemetry-* package without the API)
            _api = False
        else:
            _api = (trace, propagate, trace.get_tracer(TRACER_NAME), context)
    return _api or None


def enabled() -> bool:
    """Whether opentelemetry-api is installed (a tracer provider may still be a no-op)."""
    return _otel() is not None


def recording() -> bool:
    """Whether spans started now are recorded: opentelemetry-api is installed and the host has
    set a tracer provider that records (without one, or with the no-op one, every span is a
    no-op)."""
    api = _otel()
    if api is None:
        return False
    trace = api[0]
    return not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers, or None: no current span, or no OpenTelemetry."""
    api = _otel()
    if api is None:
        return None
    # The common case, checked cheaply (an enqueue asks once per task): an empty context holds
    # no span, and a span's own context says whether it may be sent on.
    current = api[3].get_current()
    if not current or not api[0].get_current_span(current).get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    api[1].inject(headers)
    return headers or None


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current trace context to outgoing HTTP ``headers`` (nothing without one)."""
    api = _otel()
    if api is not None:
        api[1].inject(headers)


@contextlib.contextmanager
def server_span(name: str, headers: Mapping[str, str], **attributes: Any) -> Iterator[Any]:
    """A SERVER span continuing the context of incoming ``headers``; yields it (or None)."""
    api = _otel()
    if api is None:
        yield None
        return
    trace, propagate, tracer, _ = api
    parent = propagate.extract({k.lower(): v for k, v in headers.items()})
    kind = trace.SpanKind.SERVER
    with tracer.start_as_current_span(name, context=parent, kind=kind) as span:
        span.set_attributes(attributes)
        yield span


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span for a block, a child of the current one; yields it (or None)."""
    api = _otel()
    if api is None:
        yield None
        return
    with api[2].start_as_current_span(name) as current:
        current.set_attributes(attributes)
        yield current


class AttemptSpan:
    """The span of one attempt: entered around the handler, ended with the attempt's ending."""

    def __init__(self, span: Any, trace: Any) -> None:
        self.span = span
        self._trace = trace

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the attempt's span the current one (on the handler thread) for the block."""
        with self._trace.use_span(self.span, end_on_exit=False):
            yield

    def event(self, name: str, **attributes: Any) -> None:
        self.span.add_event(name, attributes)

    @property
    def recorded(self) -> bool:
        """Whether the span is recorded (events added to it are exported)."""
        return bool(self.span.is_recording())

    def previous_lost(self, *, attempt: int, epoch: int, settled_epoch: int | None) -> None:
        """Name the attempt before this one as lost: it never settled (its worker was killed,
        or lost the database), so its own span may never have been exported."""
        self.span.add_event(
            LOST_EVENT,
            {
                "rivet.lost.attempt": attempt,
                "rivet.lost.lease_epoch": epoch,
                # -1: no attempt of the task ever settled.
                "rivet.settled_epoch": -1 if settled_epoch is None else settled_epoch,
            },
        )

    def end(self, ending: str, **attributes: Any) -> None:
        """Record how the attempt ended (``acked``, ``retried``, ``dead``, ...) and end the span."""
        self.span.set_attribute("rivet.ending", ending)
        if ending in EVENT_ENDINGS:
            named = {f"rivet.{name}": value for name, value in attributes.items()}
            self.span.add_event(EVENT_ENDINGS[ending], named)
        if ending in FAILED_ENDINGS:
            status = self._trace.Status(self._trace.StatusCode.ERROR, ending)
            self.span.set_status(status)
        self.span.end()


class NoSpan(AttemptSpan):
    """No OpenTelemetry, or nothing that could record the span: nothing is recorded."""

    def __init__(self) -> None:
        pass

    def current(self) -> contextlib.nullcontext[None]:  # type: ignore[override]
        return _NOTHING

    @property
    def recorded(self) -> bool:
        return False

    def event(self, name: str, **attributes: Any) -> None:
        pass

    def previous_lost(self, *, attempt: int, epoch: int, settled_epoch: int | None) -> None:
        pass

    def end(self, ending: str, **attributes: Any) -> None:
        pass


NO_SPAN = NoSpan()
#: What ``NoSpan.current`` enters: one reusable context manager, not a generator per attempt.
_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()


def start_attempt(
    *,
    task_id: int,
    queue: str,
    kind: str,
    attempt: int,
    epoch: int,
    trace_context: Mapping[str, str] | None,
    is_recording: bool | None = None,
) -> AttemptSpan:
    """Start the span of one attempt, a child of the producer's context when the task has one.

    ``is_recording``: what :func:`recording` said, when the caller asked it for a whole claim
    (the worker does, once per claim batch, not once per task); None: asked here.
    """
    api = _otel()
    if api is None:
        return NO_SPAN
    trace, propagate, tracer, _ = api
    if not trace_context and not (recording() if is_recording is None else is_recording):
        # No SDK configured and no producer's context: the span would be the invalid one,
        # entered around the handler to no effect; a worker starts one per task.
        return NO_SPAN
    parent = propagate.extract(dict(trace_context)) if trace_context else None
    span = tracer.start_span(
        f"{ATTEMPT_SPAN} {kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "rivet",
            "messaging.destination.name": queue,
            "rivet.task.id": task_id,
            "rivet.task.queue": queue,
            "rivet.task.kind": kind,
            "rivet.attempt": attempt,
            "rivet.lease_epoch": epoch,
        },
    )
    return AttemptSpan(span, trace)
