"""The pieces of rivet.enqueue's lean path say what the plain ways said.

Each enqueue reads the settings past Django's LazyObject, finds the alias's vendor from a small
table, makes its store without a listener or claim floors, builds its spec through ``spec_of``
and asks OpenTelemetry for a span only when the current context holds anything. None of that
may change an answer: a setting changed any way, an alias DATABASES lacks, a store a worker
closes, a job's defaults, a producer's span.
"""

import pytest
from django.conf import settings
from django.db.utils import ConnectionDoesNotExist
from django.test import override_settings

from rivet import tracing
from rivet.conf import DEFAULTS, rivet_settings
from rivet.errors import UnknownKind
from rivet.jobs import registry, spec_of, task_spec
from rivet.stores import store_for_alias
from rivet.stores.floor import ClaimFloors
from rivet.stores.postgres import PostgresStore

OPTIONS = ("queue", "idem_key", "delay", "run_at", "priority", "max_attempts", "unique_key")


def test_the_settings_are_read_as_they_are_now_however_they_changed():
    with override_settings(RIVET={"QUEUE": "first"}):
        assert rivet_settings.QUEUE == "first"
        settings.RIVET["QUEUE"] = "edited in place"
        assert rivet_settings.values("QUEUE", "MAX_ATTEMPTS") == (
            "edited in place",
            DEFAULTS["MAX_ATTEMPTS"],
        )
        with override_settings(RIVET={"QUEUE": "inner"}):
            assert rivet_settings.QUEUE == "inner"
        assert rivet_settings.QUEUE == "edited in place"
        settings.RIVET = {"QUEUE": "assigned"}
        assert rivet_settings.QUEUE == "assigned"
        del settings.RIVET
        assert rivet_settings.QUEUE == DEFAULTS["QUEUE"]  # no RIVET at all: the defaults
    with override_settings(RIVET=None):
        assert rivet_settings.QUEUE == DEFAULTS["QUEUE"]


def test_an_alias_databases_lacks_is_refused_by_django_every_time():
    for _ in range(2):  # a refusal is not remembered as a vendor
        with pytest.raises(ConnectionDoesNotExist):
            store_for_alias("no-such-alias")


def test_a_store_makes_its_listener_and_floors_on_first_use_only():
    store = PostgresStore("default")
    assert "_listener" not in vars(store) and "floors" not in vars(store)
    store.close()  # a store an enqueue made and dropped: nothing to close, nothing made
    assert "_listener" not in vars(store)

    floors = store.floors
    assert store.floors is floors  # one per store, kept
    assert store._listener is store._listener
    own = ClaimFloors(secs=1.0)
    store.floors = own  # a test's own floors replace them
    assert store.floors is own
    store.close()


@pytest.fixture
def job():
    name = "enqueue-path-job"

    def handler(payload):
        return None

    from rivet.jobs import JobDefinition

    definition = registry.register(
        JobDefinition(
            name=name,
            handler=handler,
            queue="jobs-queue",
            priority=7,
            max_attempts=9,
            unique=lambda payload: f"u-{payload['n']}",
        )
    )
    yield definition
    registry.unregister(name)


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"queue": "mine", "priority": 0, "max_attempts": 1},
        {"idem_key": "key-1", "delay": 2.5, "unique_key": ""},
    ],
)
def test_spec_of_builds_what_task_spec_builds(job, given):
    payload = {"n": 3}
    by_name = task_spec(job.name, payload, trace_context=None, **given)
    by_position = spec_of(
        job.name, payload, *[given.get(option) for option in OPTIONS], trace_context=None
    )
    assert by_position == by_name
    if not given:  # the job's defaults, its unique key from the payload
        assert (by_name.queue, by_name.priority, by_name.max_attempts) == ("jobs-queue", 7, 9)
        assert by_name.unique_key == "u-3"


def test_spec_of_refuses_an_unknown_kind_unless_allowed():
    with pytest.raises(UnknownKind, match="no-such-kind"):
        spec_of("no-such-kind", None, *[None] * len(OPTIONS))
    with override_settings(RIVET={"ALLOW_UNKNOWN_KINDS": True, "QUEUE": "q0"}):
        spec = spec_of("no-such-kind", None, *[None] * len(OPTIONS), trace_context=None)
    assert (spec.queue, spec.priority, spec.max_attempts) == ("q0", 0, DEFAULTS["MAX_ATTEMPTS"])


def test_the_trace_carrier_reads_an_empty_context_as_no_span_and_a_span_as_headers():
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    assert not context.get_current()
    assert tracing.carrier() is None
    # A producer's incoming span (as a propagator leaves it), with no SDK configured.
    remote = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=TraceFlags(1))
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        headers = tracing.carrier()
    finally:
        context.detach(token)
    assert headers is not None
    assert headers["traceparent"].split("-")[1] == f"{0x1234:032x}"
    # A context holding something else than a span: still no span.
    token = context.attach(context.set_value("unrelated", 1))
    try:
        assert tracing.carrier() is None
    finally:
        context.detach(token)
