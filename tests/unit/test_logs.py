"""The worker's log lines: the direct path (no LogRecord) writes what logging would have.

An event goes straight to configure()'s handler only when nothing else could see the record;
these tests hold the two paths to the same text and check that a filter, another handler or a
traceback sends the event through logging.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivet import logs

CLAIMED = SimpleNamespace(
    task_id=12, kind="noop", attempt=1, epoch=3, owner="host:4242", queue="default"
)
NAMES = ("rivet", "rivet.worker")


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    saved = {
        name: (
            logging.getLogger(name).handlers[:],
            logging.getLogger(name).filters[:],
            logging.getLogger(name).propagate,
            logging.getLogger(name).level,
        )
        for name in (*NAMES, *logs.LIBRARY_EVENTS)
    }
    yield
    for name, (handlers, filters, propagate, level) in saved.items():
        log = logging.getLogger(name)
        log.handlers, log.filters, log.propagate = handlers, filters, propagate
        log.setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    logs.flush()
    return stream.getvalue().splitlines()


def without_ts(line: str, log_format: str) -> object:
    if log_format == "json":
        data = json.loads(line)
        assert data.pop("ts")
        return data
    ts, rest = line.split(" ", 1)
    assert ts.endswith("+00:00")
    return rest


class Passing(logging.Filter):
    """A filter that lets everything through and remembers what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen.append(getattr(record, logs.EVENT_ATTR))
        return True


values = st.one_of(
    st.integers(),
    st.text(max_size=12),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
)
#: The line's own keys: rivet's events never name a field so (a field would replace the key).
RESERVED = {"ts", "level", "event", "logger", "message", "exception"}
fields = st.dictionaries(
    st.from_regex(r"[a-z_]{1,8}", fullmatch=True).filter(lambda key: key not in RESERVED),
    values,
    max_size=5,
)


@pytest.mark.parametrize("log_format", logs.LOG_FORMATS)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(extra=fields)
def test_direct_lines_are_what_logging_writes(restore_loggers, log_format, extra):
    direct, through = io.StringIO(), io.StringIO()
    logs.configure(log_format, stream=direct)
    assert logs._direct_handler(logging.INFO) is not None
    logs.task_event("acked", CLAIMED, **extra)
    logs.event("worker_started", **extra)
    logs.configure(log_format, stream=through)
    passing = Passing()  # anything that could see the record sends it through logging
    logging.getLogger("rivet.worker").addFilter(passing)
    try:
        assert logs._direct_handler(logging.INFO) is None
        logs.task_event("acked", CLAIMED, **extra)
        logs.event("worker_started", **extra)
    finally:
        logging.getLogger("rivet.worker").removeFilter(passing)
    got, want = lines(direct), lines(through)
    assert len(got) == len(want) == 2
    assert passing.seen == ["acked", "worker_started"]
    assert [without_ts(line, log_format) for line in got] == [
        without_ts(line, log_format) for line in want
    ]


def test_a_filter_on_the_handler_sees_and_can_drop_every_event(restore_loggers):
    stream = io.StringIO()
    handler = logs.configure("text", stream=stream)
    seen = Passing()
    handler.addFilter(seen)
    logs.task_event("claimed", CLAIMED)
    handler.addFilter(lambda record: record.rivet_event != "acked")
    logs.task_event("acked", CLAIMED)
    assert seen.seen == ["claimed", "acked"]
    assert [line.split()[2] for line in lines(stream)] == ["claimed"]


def test_a_second_handler_gets_the_records(restore_loggers):
    stream = io.StringIO()
    logs.configure("json", stream=stream)
    records: list[logging.LogRecord] = []
    extra = logging.Handler()
    extra.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("rivet.worker").addHandler(extra)
    logs.task_event("acked", CLAIMED)
    assert [r.rivet_fields["task"] for r in records] == [12]  # type: ignore[attr-defined]
    assert [json.loads(line)["event"] for line in lines(stream)] == ["acked"]


def test_events_below_the_level_are_not_written(restore_loggers):
    stream = io.StringIO()
    logs.configure("text", stream=stream)
    logs.task_event("claimed", CLAIMED, logging.DEBUG)
    logging.getLogger("rivet").setLevel(logging.WARNING)
    logs.task_event("acked", CLAIMED)
    logs.task_event("dead", CLAIMED, logging.WARNING, error="boom")
    assert [line.split()[1:3] for line in lines(stream)] == [["WARNING", "dead"]]


def test_a_warning_is_written_at_once_with_the_lines_before_it(restore_loggers):
    stream = io.StringIO()
    logs.configure("text", stream=stream)
    logs.task_event("claimed", CLAIMED)
    assert stream.getvalue() == ""  # held back until the loop flushes
    logs.task_event("dead", CLAIMED, logging.WARNING, error="boom")
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["claimed", "dead"]


def test_a_traceback_goes_through_logging(restore_loggers):
    stream = io.StringIO()
    logs.configure("json", stream=stream)
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        logs.event("loop_error", logging.ERROR, exc_info=True, where="test")
    (line,) = lines(stream)
    data = json.loads(line)
    assert data["event"] == "loop_error" and data["where"] == "test"
    assert "ZeroDivisionError" in data["exception"]


def test_timestamps_are_utc_to_the_millisecond():
    assert logs._timestamp(1767225600.1234) == "2026-01-01T00:00:00.123+00:00"
    assert logs._timestamp(1767225601.9996) == "2026-01-01T00:00:01.999+00:00"  # truncated


def test_a_text_value_never_breaks_the_line(restore_loggers):
    stream = io.StringIO()
    logs.configure("text", stream=stream)
    logs.task_event("retry", CLAIMED, error='bad\nline "x"\u2028end', note="")
    (line,) = lines(stream)
    assert line.endswith(r'error="bad\nline \"x\"\u2028end" note=""')


def test_json_heads_are_kept_per_level_and_event_and_stop_being_kept_at_the_bound(
    restore_loggers, monkeypatch
):
    monkeypatch.setattr(logs, "_JSON_HEADS", {})
    monkeypatch.setattr(logs, "MAX_JSON_HEADS", 2)
    direct, through = io.StringIO(), io.StringIO()
    events = [("acked", logging.INFO), ("acked", logging.WARNING), ("claimed", logging.INFO)]
    logs.configure("json", stream=direct)
    for _ in range(2):  # the second round reads the kept heads (and the one not kept)
        for name, level in events:
            logs.task_event(name, CLAIMED, level)
    assert len(logs._JSON_HEADS) == 2
    logs.configure("json", stream=through)
    logging.getLogger("rivet.worker").addFilter(Passing())  # through logging, no heads kept
    try:
        for _ in range(2):
            for name, level in events:
                logs.task_event(name, CLAIMED, level)
    finally:
        logging.getLogger("rivet.worker").filters.clear()
    got, want = lines(direct), lines(through)
    assert [without_ts(line, "json") for line in got] == [without_ts(line, "json") for line in want]
    assert [(json.loads(line)["event"], json.loads(line)["level"]) for line in got] == [
        ("acked", "info"),
        ("acked", "warning"),
        ("claimed", "info"),
    ] * 2
