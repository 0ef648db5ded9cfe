"""Structured worker logs: one line per state change of a task, as text or as JSON.

Every line of a task event carries ``task``, ``kind``, ``attempt``, ``epoch`` and ``owner``;
events are ``claimed``, ``acked``, ``fenced``, ``retry``, ``dead``,
``lease_expired``, ``abandoned`` and ``unknown_kind``, plus worker events (``worker_started``,
``worker_stopping``, ``worker_stopped``) and operational ones (``listener_failed``,
``pool_external``, ``pool_undersized``, ``pool_unavailable``, ``failpoint_fired``). Records
of the libraries the worker uses (psycopg's pool and driver, ``django.db``) go to the same
handler, as events ``db_pool``, ``db_driver`` and ``db_django`` with the library's words in
``message``.
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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _quote
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
    if logger.isEnabledFor(level):
        _emit(name, level, fields, exc_info)


def _emit(name: str, level: int, fields: dict[str, Any], exc_info: bool = False) -> None:
    """Write an enabled event: straight into rivet's handler when nothing else could see it,
    else as a record through logging."""
    if not exc_info:
        handler = _direct_handler(level)
        if handler is not None:
            handler.emit_event(level, name, fields)
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


_root = logging.getLogger("rivet")


def _direct_handler(level: int) -> LineHandler | None:
    """The handler an event can be written to without a LogRecord, or None.

    That is the case when :func:`configure`'s handler is the only place the line could go:
    the only handler on ``rivet``, with rivet's own formatter, and no filter or other handler
    anywhere on the way that could see, change or drop the record. Anything else (Django's
    LOGGING, a test's handler, a filter) gets the record through logging as usual.
    """
    if logger.handlers or logger.filters or not logger.propagate:
        return None
    handlers = _root.handlers
    if len(handlers) != 1 or _root.filters or _root.propagate:
        return None
    handler = handlers[0]
    if (
        type(handler) is not LineHandler
        or handler.filters
        or level < handler.level
        or type(handler.formatter) not in DIRECT_FORMATS
    ):
        return None
    return handler


class Line:
    """An event's text line, built only if a handler formats the message (JSON does not)."""

    __slots__ = ("fields", "name")

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        self.name, self.fields = name, fields

    def __str__(self) -> str:
        return self.name + _text_fields(self.fields)


def _text_fields(fields: dict[str, Any]) -> str:
    """`` key=value`` for each field, as a text line ends."""
    text = ""
    for key, value in fields.items():
        text += f" {key}={value}" if type(value) is int else f" {key}={_text(value)}"
    return text


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
    if not logger.isEnabledFor(level):
        return  # before the fields are gathered: a routine line below the level costs this
    if not fields:
        handler = _direct_handler(level)
        if handler is not None:
            handler.emit_task_event(level, name, claimed)
            return
    line = task_fields(claimed)
    if fields:
        line.update(fields)
    _emit(name, level, line)


_stamp: list[Any] = [None, None, ""]  # [whole second, its text, [millisecond, whole stamp]]


def _timestamp(created: float) -> str:
    """``2026-01-01T12:00:00.123+00:00``; reused within the same millisecond, and the part up
    to the seconds within the same second (a busy worker writes several lines a millisecond)."""
    millis = int(created * 1000)
    last = _stamp[2]
    if last and last[0] == millis:
        return last[1]
    whole, part = divmod(millis, 1000)
    if _stamp[0] != whole:
        _stamp[0] = whole
        _stamp[1] = datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    text = f"{_stamp[1]}.{part:03d}+00:00"
    _stamp[2] = (millis, text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, event, logger, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
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
        text = f"{_timestamp(record.created)} {record.levelname} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _direct_json(created: float, level: int, name: str, fields: dict[str, Any]) -> str:
    """What JsonFormatter writes for an event (the same text), without a LogRecord.

    Built by hand for the usual field types (int, str): json.dumps of the whole dict would be
    most of a line's cost (docs/decisions/0005-worker-python-per-task.md); anything else goes
    through json.dumps as the formatter would.
    """
    return _json_head(created, level, name) + _json_fields(fields) + "}"


def _json_head(created: float, level: int, name: str) -> str:
    rest = _JSON_HEADS.get((level, name))
    if rest is None:
        rest = (
            f'", "level": "{_level_name(level).lower()}", '
            f'"event": {_quote(name)}, "logger": "{logger.name}"'
        )
        if len(_JSON_HEADS) < MAX_JSON_HEADS:
            _JSON_HEADS[(level, name)] = rest
    return f'{{"ts": "{_timestamp(created)}{rest}'


#: The part of a JSON line's head after its timestamp, by level and event: the same for every
#: line of that event (a worker writes two a task); at most ``MAX_JSON_HEADS`` are kept.
_JSON_HEADS: dict[tuple[int, str], str] = {}
MAX_JSON_HEADS = 512


def _json_fields(fields: dict[str, Any]) -> str:
    """``, "key": value`` for each field, as a JSON line ends (before its brace)."""
    text = ""
    for key, value in fields.items():
        kind = type(value)
        if kind is int:
            text += f", {_quote(key)}: {value}"
        elif kind is str:
            text += f", {_quote(key)}: {_quote(value)}"
        else:
            text += f", {_quote(key)}: {json.dumps(value, default=str)}"
    return text


def _direct_text(created: float, level: int, name: str, fields: dict[str, Any]) -> str:
    """What TextFormatter writes for an event, without a LogRecord."""
    return f"{_timestamp(created)} {_level_name(level)} {Line(name, fields)}"


def _task_json(created: float, level: int, name: str, claimed: Any) -> str:
    """What ``_direct_json`` writes for a task event with no fields beyond the task's."""
    return _json_head(created, level, name) + _task_tail(claimed, "json") + "}"


def _task_text(created: float, level: int, name: str, claimed: Any) -> str:
    """What ``_direct_text`` writes for a task event with no fields beyond the task's."""
    return f"{_timestamp(created)} {_level_name(level)} {name}{_task_tail(claimed, 'text')}"


#: Where a task's fields, written out once per format, are kept on its Claimed.
TAILS_ATTR = "_rivet_log_tails"


def _task_tail(claimed: Any, form: str) -> str:
    """The task's fields as its lines end, written once per task and format: a task logs two
    lines or more (claimed, acked), with the same fields, and a Claimed never changes."""
    kept = getattr(claimed, "__dict__", None)
    tails = kept.get(TAILS_ATTR) if kept is not None else None
    if tails is None:
        tails = {}
        if kept is not None:
            kept[TAILS_ATTR] = tails  # a frozen dataclass's own dict (its fields are not in it)
    tail = tails.get(form)
    if tail is None:
        fields = task_fields(claimed)
        tail = tails[form] = _json_fields(fields) if form == "json" else _text_fields(fields)
    return tail


def _level_name(level: int) -> str:
    return _LEVEL_NAMES.get(level) or logging.getLevelName(level)


_LEVEL_NAMES = {level: logging.getLevelName(level) for level in (10, 20, 30, 40, 50)}
#: The formatters whose lines an event can be written in directly, and how.
DIRECT_FORMATS: dict[type, Callable[[float, int, str, dict[str, Any]], str]] = {
    JsonFormatter: _direct_json,
    TextFormatter: _direct_text,
}
#: The same, for a task event with only the task's fields (``task_event`` with none more).
DIRECT_TASK_FORMATS: dict[type, Callable[[float, int, str, Any], str]] = {
    JsonFormatter: _task_json,
    TextFormatter: _task_text,
}


def library_event(logger_name: str) -> str:
    """The event name of a record that did not come through :func:`event`."""
    for prefix, name in LIBRARY_EVENTS.items():
        if logger_name == prefix or logger_name.startswith(prefix + "."):
            return name
    return "log"


def _text(value: Any) -> str:
    """A value as one token: quoted (JSON) if it is empty, has a space, a quote or anything
    unprintable, so a value can never break the line or run into the next field."""
    text = value if type(value) is str else str(value)
    if text and text.isprintable() and " " not in text and '"' not in text:
        return text
    return json.dumps(text)


class LineHandler(logging.StreamHandler):
    """Writes the worker's lines in batches: one write per loop round, not one per line.

    A line at WARNING or above is written at once, with every line before it; the others wait
    for ``flush`` (the worker's loop calls ``logs.flush()`` before it waits, and logging does
    at exit) or for ``BATCH_LINES`` of them. A write syscall per routine line, with the GIL
    released and taken back around it, would be a large part of a busy worker's CPU
    (docs/decisions/0001-settle-and-claim-in-one-flush.md).
    """

    BATCH_LINES = 256

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._add(line, record.levelno)

    def emit_event(self, level: int, name: str, fields: dict[str, Any]) -> None:
        """Write an event's line as :meth:`emit` would, from the event without a LogRecord.

        Building a LogRecord (clock, thread, process, the logger's lookups) and passing it
        through the handler chain cost a busy worker more than the line itself.
        """
        self._add(DIRECT_FORMATS[type(self.formatter)](time.time(), level, name, fields), level)

    def emit_task_event(self, level: int, name: str, claimed: Any) -> None:
        """:meth:`emit_event` for a task event with only the task's fields (same line)."""
        line = DIRECT_TASK_FORMATS[type(self.formatter)](time.time(), level, name, claimed)
        self._add(line, level)

    def _add(self, line: str, level: int) -> None:
        """Hold ``line``; write the held lines now if it is a warning or they are many."""
        with self.lock:  # type: ignore[union-attr]
            self._lines.append(line)
            if level >= logging.WARNING or len(self._lines) >= self.BATCH_LINES:
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
    flush()  # the lines the handler being replaced still holds
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
