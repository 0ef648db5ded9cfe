"""Structured worker logs: one line per state change of a task, as text or as JSON.

Every line of a task event carries ``task``, ``kind``, ``attempt``, ``epoch`` and ``owner``;
events are ``claimed``, ``acked``, ``fenced``, ``retry``, ``dead``,
``lease_expired``, ``abandoned`` and ``unknown_kind``, plus worker events (``worker_started``,
``worker_stopping``, ``worker_stopped``) and operational ones (``listener_failed``,
``pool_external``, ``pool_undersized``, ``failpoint_fired``). Records of the libraries the
worker uses (psycopg's pool and driver, ``django.db``) go to the same handler, as events
``db_pool``, ``db_driver`` and ``db_django`` with the library's words in ``message``.
The routine lines of a task that went well (``claimed``, ``acked``, ``retry``) are logged at
``RIVET['TASK_LOG_LEVEL']`` (``--task-log-level``): ``info`` by default, or ``debug`` to leave
them out of the INFO log at full speed; an event below the logger's level costs one check.
``--log-format json`` writes one JSON object a line::

    {"ts": "2026-01-01T12:00:00.123+00:00", "level": "info", "event": "acked", "task": 12,
     "kind": "noop", "attempt": 1, "epoch": 1, "owner": "host:4242", "queue": "demo"}
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
FIELDS_ATTR = "rivet_fields"
EVENT_ATTR = "rivet_event"
#: Loggers of libraries the worker uses, sent to the same handler; their records get a stable
#: event name (by logger prefix) and their own words in ``message``.
LIBRARY_EVENTS = {"psycopg.pool": "db_pool", "psycopg": "db_driver", "django.db": "db_django"}

logger = logging.getLogger("rivet.worker")
#: RIVET['TASK_LOG_LEVEL'] (and --task-log-level) names: the level of routine per-task lines.
LEVELS = {"info": logging.INFO, "debug": logging.DEBUG}


def event(name: str, level: int = logging.INFO, *, exc_info: bool = False, **fields: Any) -> None:
    """Log one event with its fields (they become JSON keys, or ``key=value`` in text).

    The message itself is the text line, so any handler (Django's LOGGING included) shows the
    fields; the JSON formatter reads the event name and fields from the record instead.
    """
    if not logger.isEnabledFor(level):
        return
    extra = {EVENT_ATTR: name, FIELDS_ATTR: fields}
    if exc_info:
        logger.log(level, "%s", Line(name, fields), exc_info=True, extra=extra)
        return
    # What logger.log does, less its walk up the stack for the caller: the caller it would
    # find is this function anyway, and a busy worker logs two lines a task.
    record = logger.makeRecord(
        logger.name, level, __file__, EVENT_LINE, "%s", (Line(name, fields),), None, "event", extra
    )
    logger.handle(record)


class Line:
    """An event's text line, built only if a handler formats the message (JSON does not)."""

    __slots__ = ("fields", "name")

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        self.name, self.fields = name, fields

    def __str__(self) -> str:
        pairs = (f"{key}={_text(value)}" for key, value in self.fields.items())
        return " ".join([self.name, *pairs])


#: The line number a record of :func:`event` carries: the function's own.
EVENT_LINE = event.__code__.co_firstlineno


def task_fields(claimed: Any) -> dict[str, Any]:
    """The fields every task event carries, from a Claimed."""
    return {
        "task": claimed.task_id,
        "kind": claimed.kind,
        "attempt": claimed.attempt,
        "epoch": claimed.epoch,
        "owner": claimed.owner,
        "queue": claimed.queue,
    }


def task_event(name: str, claimed: Any, level: int = logging.INFO, **fields: Any) -> None:
    """Log a state change of one task."""
    event(name, level, **task_fields(claimed), **fields)


_second: list[Any] = [None, ""]  # [whole second, its text up to the seconds]


def _timestamp(record: logging.LogRecord) -> str:
    """``2026-01-01T12:00:00.123+00:00``; the part up to the seconds is reused within one."""
    whole, micros = divmod(round(record.created * 1_000_000), 1_000_000)
    if _second[0] != whole:
        text = datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second[0], _second[1] = whole, text
    return f"{_second[1]}.{micros // 1000:03d}+00:00"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, event, logger, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "event": getattr(record, EVENT_ATTR, None) or library_event(record.name),
            "logger": record.name,
        }
        if not hasattr(record, EVENT_ATTR):
            line["message"] = record.getMessage()
        line.update(getattr(record, FIELDS_ATTR, {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """``ts LEVEL event key=value ...``: readable, and still one line per event."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def library_event(logger_name: str) -> str:
    """The event name of a record that did not come through :func:`event`."""
    for prefix, name in LIBRARY_EVENTS.items():
        if logger_name == prefix or logger_name.startswith(prefix + "."):
            return name
    return "log"


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


class LineHandler(logging.StreamHandler):
    """Writes the worker's lines in batches: one write per loop round, not one per line.

    A line at WARNING or above is written at once, with every line before it; the others wait
    for ``flush`` (the worker's loop calls ``logs.flush()`` before it waits, and logging does
    at exit) or for ``BATCH_LINES`` of them. A write syscall per routine line, with the GIL
    released and taken back around it, was a large part of a busy worker's CPU.
    """

    BATCH_LINES = 256

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record))
        except Exception:
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING or len(self._lines) >= self.BATCH_LINES:
            self._write()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write()

    def _write(self) -> None:
        if self._lines:
            lines, self._lines = self._lines, []
            self.stream.write("\n".join(lines) + self.terminator)
            self.stream.flush()


def flush() -> None:
    """Write the lines the ``rivet`` logger's handlers hold back."""
    for handler in logging.getLogger("rivet").handlers:
        handler.flush()


def configure(log_format: str = "text", *, stream: TextIO | None = None) -> logging.Handler:
    """Send the ``rivet`` loggers to ``stream`` (stderr) in ``log_format``, replacing handlers."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = LineHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger("rivet")
    root.handlers = [handler]
    root.propagate = False
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    for name in LIBRARY_EVENTS:
        library = logging.getLogger(name)
        if "." in name and name.split(".")[0] in LIBRARY_EVENTS:
            continue  # a child of a library logger configured here: it propagates to it
        library.handlers = [handler]
        library.propagate = False
        if library.level == logging.NOTSET:
            library.setLevel(logging.WARNING)
    return handler
