"""OpenTelemetry: a task carries its producer's trace; each attempt is a span of it.

The producer (rivet.enqueue, enqueue_many) stores the current W3C context beside the task; the
worker starts one span per attempt as its child, with the task's identity and how the attempt
ended, and marks fenced writes and dead endings as events. In-process against a MemoryStore,
with the SDK's in-memory exporter (the ``spans`` fixture); tests/acceptance/test_tracing.py
follows one trace across real processes.
"""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import rivet
from rivet import tracing
from rivet.jobs import JobContext, job
from tests.otel import hex_id
from tests.unit.worker_kit import Background, enqueue, make_worker, wait_until

tracer = trace.get_tracer("tests")


def attempt_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.name.startswith(tracing.ATTEMPT_SPAN)]


def test_enqueue_outside_a_trace_stores_no_context(store, spans):
    task_id = rivet.enqueue("noop", using=store).task_id
    assert store.task_get(task_id).trace_context is None


def test_enqueue_and_enqueue_many_store_the_current_context_not_in_the_payload(store, spans):
    with tracer.start_as_current_span("request") as request:
        one = rivet.enqueue("noop", {"n": 1}, using=store).task_id
        many = [r.task_id for r in rivet.enqueue_many([("noop", {"n": 2})], using=store)]
    ids = request.get_span_context()
    expected = f"00-{hex_id(ids.trace_id)}-{hex_id(ids.span_id, 16)}-{int(ids.trace_flags):02x}"
    for task_id in [one, *many]:
        task = store.task_get(task_id)
        assert task.trace_context == {"traceparent": expected}
        assert "traceparent" not in task.payload


def test_each_attempt_is_a_child_span_of_the_producer_with_its_ending(store, jobs, spans):
    runs: list[str] = []

    @job("flaky", registry=jobs)
    def flaky(ctx: JobContext):
        runs.append(trace.get_current_span().get_span_context().span_id)
        if ctx.attempt == 1:
            raise ValueError("first try fails")
        return "ok"

    with tracer.start_as_current_span("request") as request:
        task_id = enqueue(store, "flaky", max_attempts=3)
    make_worker(store, jobs, once=True, max_jobs=2).run()
    make_worker(store, jobs, once=True, max_jobs=2).run()
    first, second = attempt_spans(spans)
    parent = request.get_span_context()
    for number, span in enumerate([first, second], start=1):
        assert span.name == "rivet.attempt flaky" and span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == parent.trace_id
        assert span.parent.span_id == parent.span_id
        assert span.attributes["rivet.task.id"] == task_id
        assert span.attributes["rivet.task.queue"] == "q"
        assert span.attributes["rivet.task.kind"] == "flaky"
        assert span.attributes["rivet.attempt"] == number
        assert span.attributes["rivet.lease_epoch"] == number
    # The handler ran inside its attempt's span (what the effect client propagates).
    assert runs == [first.context.span_id, second.context.span_id]
    assert first.attributes["rivet.ending"] == "retried"
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["rivet.ending"] == "acked"
    assert second.status.status_code is StatusCode.UNSET


def test_an_attempt_after_a_lost_one_names_it_and_one_after_a_retry_does_not(store, jobs, spans):
    job("noop", registry=jobs)(lambda ctx: "ok")
    calls = {"n": 0}

    @job("flaky", registry=jobs)
    def flaky(ctx: JobContext):
        calls["n"] += 1
        if ctx.attempt == 1:
            raise ValueError("first try fails")

    with tracer.start_as_current_span("request"):
        killed = enqueue(store, "noop", max_attempts=3)
        retried = enqueue(store, "flaky", max_attempts=3)
    # A worker claims the first task and dies: attempt 1 (epoch 1) never settles, no span ends.
    (claimed,) = store.task_claim(queues=["q"], owner="killed", limit=1, lease_ttl=1).claimed
    assert (claimed.task_id, claimed.attempt, claimed.epoch) == (killed, 1, 1)
    store.clock.advance(2)
    for _ in range(2):
        make_worker(store, jobs, once=True, max_jobs=3).run()
    by_task = {(s.attributes["rivet.task.id"], s.attributes["rivet.attempt"]): s for s in
               attempt_spans(spans)}  # fmt: skip
    assert sorted(by_task) == [(killed, 2), (retried, 1), (retried, 2)]
    (event,) = [e for e in by_task[(killed, 2)].events if e.name == tracing.LOST_EVENT]
    assert dict(event.attributes) == {
        "rivet.lost.attempt": 1,
        "rivet.lost.lease_epoch": 1,
        "rivet.settled_epoch": -1,
    }
    for key in [(retried, 1), (retried, 2)]:  # attempt 1 settled (retried): nothing was lost
        assert [e.name for e in by_task[key].events if e.name == tracing.LOST_EVENT] == []


def test_a_dead_ending_is_an_event_with_the_last_error(store, jobs, spans):
    job("broken", registry=jobs)(lambda ctx: 1 / 0)
    enqueue(store, "broken", max_attempts=1)
    make_worker(store, jobs, once=True).run()
    (span,) = attempt_spans(spans)
    assert span.attributes["rivet.ending"] == "dead"
    # The handler's exception is recorded where it was raised, then the burial.
    exception, event = span.events
    assert exception.name == "exception"
    assert exception.attributes["exception.type"] == "ZeroDivisionError"
    assert event.name == "rivet.dead"
    assert "ZeroDivisionError" in event.attributes["rivet.error"]


def test_a_fenced_write_is_an_event_on_the_stale_attempts_span(store, jobs, spans):
    @job("block", registry=jobs)
    def block(ctx: JobContext):
        ctx.wait(10)
        return "too late"

    task_id = enqueue(store, "block")
    bg = Background(make_worker(store, jobs, lease_ttl=0.3))
    wait_until(lambda: store.task_get(task_id).attempts == 1, "the claim")
    store.clock.advance(1.0)  # the lease lapses in the store's time
    store.task_claim(queues=["q"], owner="thief", limit=1, lease_ttl=60)
    wait_until(lambda: store.fenced_count("q", "fail") == 1, "the fence record")
    wait_until(lambda: attempt_spans(spans), "the stale attempt's span to end")
    bg.stop()
    (span,) = attempt_spans(spans)
    assert (span.attributes["rivet.ending"], span.attributes["rivet.lease_epoch"]) == ("fenced", 1)
    (event,) = span.events
    assert event.name == "rivet.fenced"
    assert event.attributes["rivet.op"] == "fail"
    assert event.attributes["rivet.reason"] == "lease lost (fenced)"


def test_without_opentelemetry_nothing_is_stored_or_recorded(monkeypatch, store, spans):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    monkeypatch.setattr(tracing, "_api", None)  # looked for again
    with tracer.start_as_current_span("request"):
        task_id = rivet.enqueue("noop", using=store).task_id
        headers = {"Accept": "application/json"}
        tracing.inject(headers)
    assert store.task_get(task_id).trace_context is None
    assert headers == {"Accept": "application/json"}
    assert not tracing.enabled()
    span = tracing.start_attempt(
        task_id=task_id, queue="q", kind="noop", attempt=1, epoch=1, trace_context=None
    )
    assert span is tracing.NO_SPAN
    with span.current(), tracing.span("x") as inner:
        assert inner is None
    span.end("acked")
    assert [s.name for s in spans.get_finished_spans()] == ["request"]


def test_start_attempt_takes_the_callers_answer_on_recording(monkeypatch, spans):
    asked: list[bool] = []

    def recording() -> bool:
        asked.append(True)
        return True

    monkeypatch.setattr(tracing, "recording", recording)
    task = {"task_id": 1, "queue": "q", "kind": "noop", "attempt": 1, "epoch": 1}
    assert tracing.start_attempt(**task, trace_context=None, is_recording=False) is tracing.NO_SPAN
    assert asked == []  # the caller's answer stands: not asked again
    told = tracing.start_attempt(**task, trace_context=None, is_recording=True)
    assert told is not tracing.NO_SPAN and asked == []
    told.end("acked")
    asked_here = tracing.start_attempt(**task, trace_context=None)
    assert asked_here is not tracing.NO_SPAN and asked == [True]
    asked_here.end("acked")
    assert [s.attributes["rivet.ending"] for s in attempt_spans(spans)] == ["acked", "acked"]


def test_the_worker_asks_whether_spans_are_recorded_once_per_claim(monkeypatch, store, jobs):
    real = tracing.recording
    asked: list[bool] = []

    def recording() -> bool:
        asked.append(real())
        return asked[-1]

    monkeypatch.setattr(tracing, "recording", recording)
    job("noop", registry=jobs)(lambda ctx: None)
    for _ in range(3):
        enqueue(store, "noop")
    claims: list[int] = []
    original = store.task_settle_and_claim

    def counting(*args, **kwargs):
        flushed = original(*args, **kwargs)
        if flushed.batch.claimed:
            claims.append(len(flushed.batch.claimed))
        return flushed

    monkeypatch.setattr(store, "task_settle_and_claim", counting)
    stats = make_worker(store, jobs, once=True, concurrency=4).run()
    assert stats.acked == 3
    assert claims[0] == 3  # one claim leased the three tasks
    assert len(asked) == len(claims)


def test_async_handlers_in_flight_together_each_run_inside_their_own_attempt_span(
    store, jobs, spans
):
    import asyncio

    seen: dict[int, int] = {}
    arrived: list[int] = []
    both = asyncio.Event()

    @job("together", registry=jobs)
    async def together(ctx: JobContext):
        arrived.append(ctx.task_id)
        if len(arrived) == 2:
            both.set()
        await both.wait()  # both coroutines are in flight on one loop here
        seen[ctx.task_id] = trace.get_current_span().get_span_context().span_id
        if ctx.payload == "fail":
            raise ValueError("the second one fails")

    with tracer.start_as_current_span("request-1"):
        ok = enqueue(store, "together", "ok")
    with tracer.start_as_current_span("request-2"):
        bad = enqueue(store, "together", "fail", max_attempts=1)
    make_worker(store, jobs, once=True, async_concurrency=2).run()
    spans_by_task = {s.attributes["rivet.task.id"]: s for s in attempt_spans(spans)}
    assert seen == {t: spans_by_task[t].context.span_id for t in (ok, bad)}
    assert spans_by_task[ok].attributes["rivet.ending"] == "acked"
    assert spans_by_task[bad].attributes["rivet.ending"] == "dead"
    assert spans_by_task[bad].events[0].attributes["exception.type"] == "ValueError"
