"""The one table of rivet's settings and the worker's options.

Each entry says, once: its ``settings.RIVET`` key and default, the parser that reads it (with
its bounds), the worker's flag and ``RIVET_*`` variable when it is a worker option, a one
sentence help text, and the id of the system check that refuses a bad value. The rest is derived
from it:

- ``rivet.conf.DEFAULTS`` (every key and its default; a key not in the table is refused by
  rivet.E001),
- the system checks of each value (``rivet.checks``, and ``rivet.idempotency.checks`` for the
  keys of that app),
- the worker's flags, their ``--help`` and their parsing (``rivet.worker.options``),
- the settings tables of docs/reference/settings.md and docs/workers.md (:func:`settings_doc`,
  :func:`worker_doc`; ``python scripts/settings_docs.py --write`` rewrites them, a test and the
  docs build fail when they differ).

A parser reads a value from any of the three places (a flag's text, a variable's text, a
setting's Python value) and raises :class:`Expected` saying what it expected, so the worker and
the checks refuse a bad value in the same words. This module imports nothing of rivet above the
bottom layer: the checks, the worker and the docs import it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from django.conf import settings

from rivet.text import name_problem

MAX_OWNER_LENGTH = 200  # rivet_task.lease_owner
# Bounds a typo cannot cross: each is far beyond any sensible value, and named in the message.
MAX_CONCURRENCY = 1024
MAX_ASYNC_CONCURRENCY = 100_000
MAX_PREFETCH = 4096
MAX_POOL_SIZE = 1024
MAX_PRUNE_BATCH = 100_000
#: Most failed attempts a task's errors list may keep (each entry up to MAX_ERROR_LENGTH).
MAX_ERRORS_KEPT_LIMIT = 1000
DAY = 86400.0
#: Units a duration may carry: 90s, 15m, 12h, 7d, 2w (a bare number is seconds).
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
DURATION_RE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhdw]?)\s*$")
#: The longest retention a duration may name: ten years.
MAX_DURATION = 3650 * DAY
#: The aging step rivet ranks with when PRIORITY_AGING_SECS is None: one point per ten years,
#: longer than any task waits, so the order is priority first, then the task ready first. It is
#: also the largest step a setting may name (a rank stays within 100 steps of its ready time).
AGING_OFF_SECS = 10 * 365.25 * 24 * 3600.0
#: The stores RIVET['STORE'] may name.
STORES = ("auto", "memory", "sqlite", "postgres")
#: Levels the routine per-task lines may take; warnings and errors keep their own.
TASK_LOG_LEVELS = ("info", "debug")


class Expected(ValueError):
    """Raised by a parser: the text says what was expected."""


@dataclass(frozen=True)
class Parser:
    """A value's parser, and what it accepts in words (the docs' "accepts" column)."""

    expected: str
    parse: Callable[[Any], Any]

    def __call__(self, value: Any) -> Any:
        return self.parse(value)


# -- parsers: the worker's (they read the text of a flag or a variable too) -------------------


def _number(text: Any) -> float:
    if isinstance(text, bool):
        raise Expected("a number of seconds")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise Expected("a number of seconds") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise Expected("a finite number of seconds")
    return value


def _bound(high: float) -> str:
    """A bound as a person writes it: 2592000, not 2.592e+06."""
    return f"{high:.0f}" if high == int(high) else f"{high:g}"


def positive_secs(high: float) -> Parser:
    expected = f"a number of seconds > 0 and <= {_bound(high)}"

    def parse(text: Any) -> float:
        value = _number(text)
        if not 0 < value <= high:
            raise Expected(expected)
        return value

    return Parser(expected, parse)


def non_negative_secs(high: float) -> Parser:
    expected = f"a number of seconds between 0 and {_bound(high)}"

    def parse(text: Any) -> float:
        value = _number(text)
        if not 0 <= value <= high:
            raise Expected(expected)
        return value

    return Parser(expected, parse)


def integer_between(low: int, high: int | None = None, *, strict: bool = False) -> Parser:
    """An integer in ``low..high``; ``strict``: a Python int only (a setting), not its text."""
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: Any) -> int:
        if isinstance(text, bool | float) or (strict and not isinstance(text, int)):
            raise Expected(expected)
        try:
            value = int(str(text).strip())
        except ValueError:
            raise Expected(expected) from None
        if value < low or (high is not None and value > high):
            raise Expected(expected)
        return value

    return Parser(expected, parse)


def _prefetch(text: Any) -> int | str:
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        return integer_between(0, MAX_PREFETCH)(text)
    except Expected:
        raise Expected(prefetch_value.expected) from None


#: ``auto`` (the worker sets it by its handlers' run times) or an integer 0..MAX_PREFETCH.
prefetch_value = Parser(f"an integer from 0 to {MAX_PREFETCH}, or auto", _prefetch)


def _queue_list(text: Any) -> list[str]:
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    if not names:
        raise Expected(queue_list.expected)
    limit = rivet_value("MAX_NAME_LENGTH")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        limit = BY_KEY["MAX_NAME_LENGTH"].default  # a bad one is rivet.E002 of its own
    for name in names:
        problem = name_problem(name, limit)
        if problem:
            raise Expected(f"queue names (queue {problem})")
    return names


queue_list = Parser("a comma-separated list of queue names, e.g. high,default", _queue_list)


def _owner_name(text: Any) -> str:
    text = str(text).strip()
    if not text or len(text) > MAX_OWNER_LENGTH or not text.isprintable():
        raise Expected(owner_name.expected)
    return text


owner_name = Parser(f"a printable name of 1..{MAX_OWNER_LENGTH} characters", _owner_name)


def _port_number(text: Any) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise Expected(port_number.expected) from None
    if not 1 <= value <= 65535:
        raise Expected(port_number.expected)
    return value


port_number = Parser("a TCP port number, 1..65535", _port_number)


def _duration(text: Any) -> float:
    expected = "a duration such as 7d, 12h, 30m or 90s (or a number of seconds), above 0"
    if isinstance(text, bool):
        raise Expected(expected)
    if isinstance(text, int | float):
        secs = float(text)
    else:
        match = DURATION_RE.match(str(text))
        if match is None:
            raise Expected(expected)
        secs = float(match["number"]) * DURATION_UNITS[match["unit"] or "s"]
    if not 0 < secs <= MAX_DURATION:
        raise Expected(f"{expected} and at most {MAX_DURATION / DAY:g}d")
    return secs


#: Seconds from ``7d``, ``12h``, ``30m``, ``90s`` or a bare number of seconds; > 0.
duration = Parser(
    f"a duration such as 7d, 12h, 30m or 90s (or a number of seconds), above 0 and at most "
    f"{MAX_DURATION / DAY:g}d",
    _duration,
)


def one_of(*choices: str, lower: bool = False) -> Parser:
    """One of ``choices`` (``lower``: any case, and surrounding spaces, of a text)."""
    expected = " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"

    def parse(value: Any) -> str:
        if lower and isinstance(value, str):
            value = value.strip().lower()
        if value not in choices:
            raise Expected(expected)
        return str(value)

    return Parser(expected, parse)


log_format = one_of("text", "json")
task_log_level = one_of(*TASK_LOG_LEVELS, lower=True)


def _switch(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Expected(true_or_false.expected)
    return value


#: True or False: a Python bool (a setting), or a flag that takes no value.
true_or_false = Parser("True or False", _switch)


# -- parsers of the settings that are not worker options (Python values only) -----------------


def _positive_number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise Expected(positive_number.expected)
    return value


positive_number = Parser("a positive number", _positive_number)


def _positive_whole_number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Expected(positive_whole_number.expected)
    return value


positive_whole_number = Parser("a positive whole number", _positive_whole_number)


def _aging_secs(value: Any) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= (AGING_OFF_SECS)
    ):
        raise Expected(aging_secs.expected)
    return float(value)


aging_secs = Parser(
    f"None or a number of seconds above 0 and at most {AGING_OFF_SECS:.0f} (ten years)",
    _aging_secs,
)


def _metrics_token(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) < 16):
        raise Expected(metrics_token.expected)
    return value


metrics_token = Parser("None or a string of at least 16 characters", _metrics_token)


def _listen_url(url: Any) -> str | None:
    """None, or a PostgreSQL URL (or key=value string) libpq reads."""
    if url is None:
        return None
    reason = None
    if not isinstance(url, str) or not url.strip():
        reason = f"got {type(url).__name__} {url!r}"
    elif find_spec("psycopg") is not None:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(url)
        except ProgrammingError as exc:
            reason = " ".join(str(exc).split())
    if reason is not None:
        raise Expected(f"None or a PostgreSQL URL: {reason}")
    return url


listen_url = Parser("None or a PostgreSQL URL (or key=value string) libpq reads", _listen_url)


def unchecked(expected: str) -> Parser:
    """A setting no check reads by itself (or a cross-setting check does): any value passes."""
    return Parser(expected, lambda value: value)


# -- the table ---------------------------------------------------------------------------------

#: A bad value's message: ``name`` is ``RIVET['KEY']`` (or the flag, variable or old setting
#: name it came from), ``problem`` the parser's words.
MUST_BE = "{name} must be {problem}, got {value!r}"


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One setting of ``settings.RIVET``, one worker option, or both."""

    #: The ``settings.RIVET`` key; None for an option that only the worker has.
    key: str | None
    #: The default: of the setting, or of a worker-only option.
    default: Any = None
    parse: Parser
    #: One sentence, Markdown: the docs show it as it is, ``--help`` without links and backticks.
    help: str
    #: The worker's flag, variable and argparse dest; None when it is not a worker option.
    flag: str | None = None
    env: str | None = None
    dest: str | None = None
    metavar: str = "SECS"
    #: The system check that refuses a bad value; None: no check of this value by itself.
    check: str | None = "rivet.E002"
    message: str = MUST_BE
    hint: str | None = None
    #: Whether None skips the parser: a worker option left to the worker's own default.
    none_ok: bool = False
    #: How the docs show the default, when not as its Python value.
    shown_default: str | None = None
    #: A flag that takes no value (``--once``): not read from a variable or a setting.
    switch: bool = False

    @property
    def name(self) -> str:
        """How messages name the setting: ``RIVET['KEY']``."""
        return f"RIVET[{self.key!r}]"

    def problem(self, value: Any, name: str | None = None) -> str | None:
        """What is wrong with ``value`` as this setting, in the check's words, or None."""
        if value is None and self.none_ok:
            return None
        try:
            self.parse(value)
        except Expected as exc:
            return self.message.format(
                name=name or self.name,
                problem=exc,
                value=value,
                kind=type(value).__name__,
                length=len(str(value)),
            )
        return None


def _positive(key: str, default: int, help: str) -> Setting:
    return Setting(key=key, default=default, parse=positive_number, help=help)


def _flag(key: str, default: bool, help: str) -> Setting:
    return Setting(key=key, default=default, parse=true_or_false, help=help)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        key="QUEUE",
        default="default",
        parse=queue_list,
        help="the queue of a job that names none, and the queues a worker claims from, "
        "tried in the order given",
        flag="--queue",
        env="RIVET_QUEUE",
        dest="queues",
        metavar="Q[,Q...]",
        none_ok=True,
    ),
    Setting(
        key="STORE",
        default="auto",
        parse=one_of(*STORES),
        help="the store: `auto` picks it by the database vendor of `DATABASE_ALIAS`; `memory` "
        "is for tests only (`rivet.E006` refuses it elsewhere)",
        check="rivet.E003",
        message="{name} is {value!r}; expected {problem}",
    ),
    Setting(
        key="DATABASE_ALIAS",
        default="default",
        parse=unchecked("an alias of settings.DATABASES"),
        help="the Django database that holds `rivet_task`, and the queues no router or "
        "`QUEUE_DATABASES` places elsewhere",
        check=None,
    ),
    Setting(
        key="QUEUE_DATABASES",
        default={},
        parse=unchecked("a dict of exact queue names to aliases of settings.DATABASES"),
        help='queues that live on another database (`{"emails": "mail_db"}`); routers with '
        "a `db_for_queue(queue)` method are asked first "
        "([More than one database](databases.md))",
        check=None,  # rivet.E007 and rivet.E008 (rivet.checks) check it with the routers
    ),
    _positive("MAX_ATTEMPTS", 3, "attempts of a task whose job and enqueue name none"),
    Setting(
        key="PRIORITY_AGING_SECS",
        default=60.0,
        parse=aging_secs,
        help="seconds of waiting worth one priority point: a claim takes the highest "
        "`priority + seconds waited / PRIORITY_AGING_SECS` "
        "([priority and aging](jobs.md#priority-and-aging)); `None` turns aging off "
        "(priority first, then FIFO); applies to tasks that become runnable after a change",
        hint="the seconds of waiting worth one priority point; None turns aging off",
    ),
    _positive("MAX_PAYLOAD_BYTES", 1024 * 1024, "the largest payload, as UTF-8 JSON"),
    _positive("MAX_NAME_LENGTH", 100, "the longest queue or kind name"),
    _positive("MAX_IDEM_KEY_LENGTH", 200, "the longest idempotency or unique key"),
    _positive("MAX_ERROR_LENGTH", 4000, "`last_error` is clipped to this"),
    Setting(
        key="MAX_ERRORS_KEPT",
        default=20,
        parse=integer_between(1, MAX_ERRORS_KEPT_LIMIT, strict=True),
        help="how many failed attempts a task's `errors` list keeps, the oldest dropped first",
        hint="it bounds each task's errors list: the newest failed attempts are kept",
    ),
    Setting(
        key="LEASE_TTL_SECS",
        default=30.0,
        parse=positive_secs(DAY),
        help="lease length; heartbeats extend it every third of it",
        flag="--lease-ttl-secs",
        env="RIVET_LEASE_TTL_SECS",
        dest="lease_ttl",
        none_ok=True,
    ),
    Setting(
        key="CONCURRENCY",
        default=4,
        parse=integer_between(1, MAX_CONCURRENCY),
        help="handlers run at once, one thread each",
        flag="--concurrency",
        env="RIVET_CONCURRENCY",
        dest="concurrency",
        metavar="N",
        none_ok=True,
    ),
    Setting(
        key="ASYNC_CONCURRENCY",
        default=100,
        parse=integer_between(1, MAX_ASYNC_CONCURRENCY),
        help="`async def` handlers in flight at once, on the worker's one event loop thread "
        "(beside the `--concurrency` threads of sync jobs; [Async jobs](workers.md#async-jobs))",
        flag="--async-concurrency",
        env="RIVET_ASYNC_CONCURRENCY",
        dest="async_concurrency",
        metavar="N",
        none_ok=True,
    ),
    Setting(
        key="PREFETCH",
        default="auto",
        parse=prefetch_value,
        help="claimed tasks that may wait for a free slot, so one round trip settles and "
        "claims many; `auto` sets it from the handlers' run times, 0 claims only into free "
        "slots ([Prefetch](scaling.md#prefetch-how-many-tasks-one-claim-asks-for))",
        flag="--prefetch",
        env="RIVET_PREFETCH",
        dest="prefetch",
        metavar="N|auto",
        none_ok=True,
    ),
    Setting(
        key="RETRY_BACKOFF_SECS",
        default=1.0,
        parse=non_negative_secs(DAY),
        help="base of the retry wait: random in `[0, min(cap, backoff * 2**attempts)]`",
        flag="--retry-backoff-secs",
        env="RIVET_RETRY_BACKOFF_SECS",
        dest="retry_backoff",
        none_ok=True,
    ),
    Setting(
        key="RETRY_BACKOFF_CAP_SECS",
        default=300.0,
        parse=non_negative_secs(30 * DAY),
        help="the longest retry wait",
        flag="--retry-backoff-cap-secs",
        env="RIVET_RETRY_BACKOFF_CAP_SECS",
        dest="retry_backoff_cap",
        none_ok=True,
    ),
    Setting(
        key="POOL_SIZE",
        default=10,
        parse=integer_between(2, MAX_POOL_SIZE),
        help="most database connections a worker process holds: its PostgreSQL pool",
        flag="--pool-size",
        env="RIVET_POOL_SIZE",
        dest="pool_size",
        metavar="N",
        none_ok=True,
    ),
    Setting(
        key=None,
        default=None,
        parse=owner_name,
        help="the name written as `lease_owner` and in every log line",
        flag="--owner",
        env="RIVET_OWNER",
        dest="owner",
        metavar="NAME",
        shown_default="`hostname:pid`",
    ),
    Setting(
        key="POLL_INTERVAL_SECS",
        default=1.0,
        parse=positive_secs(3600.0),
        help="seconds between claims when idle (PostgreSQL also wakes a worker on enqueue)",
        flag="--poll-interval",
        env="RIVET_POLL_INTERVAL",
        dest="poll_interval",
        none_ok=True,
    ),
    Setting(
        key="JOB_TIMEOUT_SECS",
        default=None,
        parse=positive_secs(30 * DAY),
        help="seconds before an attempt counts as failed (a job's own `timeout` wins)",
        flag="--job-timeout",
        env="RIVET_JOB_TIMEOUT",
        dest="job_timeout",
        none_ok=True,
    ),
    Setting(
        key="SHUTDOWN_TIMEOUT_SECS",
        default=30.0,
        parse=non_negative_secs(DAY),
        help="seconds to let in-flight handlers finish after SIGTERM/SIGINT",
        flag="--shutdown-timeout",
        env="RIVET_SHUTDOWN_TIMEOUT",
        dest="shutdown_timeout",
        none_ok=True,
    ),
    Setting(
        key="CONNECT_TIMEOUT_SECS",
        default=5.0,
        parse=positive_secs(300.0),
        help="at start, how long to wait for the database to answer before exiting 1; while "
        "running, how long a database call waits before the log says so (`db_waiting`)",
        flag="--connect-timeout-secs",
        env="RIVET_CONNECT_TIMEOUT_SECS",
        dest="connect_timeout",
        none_ok=True,
    ),
    Setting(
        key="IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        default=30.0,
        parse=non_negative_secs(DAY),
        help="PostgreSQL ends the session of a transaction rivet opened (a scheduler pass, an "
        "operator's requeue or cancel) that sits idle longer than this, freeing its locks; 0 "
        "for no bound ([a stalled process]"
        "(operations.md#a-stalled-process-holds-no-lock-for-long))",
        flag="--idle-in-transaction-timeout-secs",
        env="RIVET_IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        dest="idle_in_transaction_timeout",
        hint="0 turns the bound off (rivet.stores.idle); the default is 30",
    ),
    Setting(
        key="RETENTION",
        default=None,
        parse=duration,
        help="delete done tasks and fenced-write records older than this (`7d`, `12h`, ...) "
        "while the worker runs, and `rivet_prune`'s default `--older-than`; `None` keeps them "
        "forever; pruning a done task releases its idempotency key "
        "([Retention](commands.md#retention-rivet_prune-and---retention))",
        flag="--retention",
        env="RIVET_RETENTION",
        dest="retention",
        metavar="DURATION",
        none_ok=True,
    ),
    Setting(
        key="PRUNE_EVERY_SECS",
        default=300.0,
        parse=positive_secs(DAY),
        help="with a retention: seconds between prunes (one at start)",
        flag="--prune-every-secs",
        env="RIVET_PRUNE_EVERY_SECS",
        dest="prune_every",
        none_ok=True,
    ),
    Setting(
        key="PRUNE_BATCH_SIZE",
        default=1000,
        parse=integer_between(1, MAX_PRUNE_BATCH),
        help="with a retention: most rows one prune statement deletes (its own transaction), "
        "and `rivet_prune`'s default `--batch-size`",
        flag="--prune-batch-size",
        env="RIVET_PRUNE_BATCH_SIZE",
        dest="prune_batch_size",
        metavar="N",
        none_ok=True,
    ),
    Setting(
        key=None,
        default=None,
        parse=integer_between(1),
        help="exit 0 after this many attempts are settled",
        flag="--max-jobs",
        env="RIVET_MAX_JOBS",
        dest="max_jobs",
        metavar="N",
        shown_default="none",
    ),
    Setting(
        key=None,
        default=None,
        parse=port_number,
        help="serve Prometheus metrics at `http://0.0.0.0:PORT/metrics` ([Metrics](metrics.md))",
        flag="--metrics-port",
        env="RIVET_METRICS_PORT",
        dest="metrics_port",
        metavar="PORT",
        shown_default="off",
    ),
    Setting(
        key="TASK_LOG_LEVEL",
        default="info",
        parse=task_log_level,
        help="level of the routine per-task worker lines (claimed, acked, retry); `debug` "
        "leaves them out of the default INFO log, which is cheaper at full speed",
        flag="--task-log-level",
        env="RIVET_TASK_LOG_LEVEL",
        dest="task_log_level",
        metavar="info|debug",
        none_ok=True,
    ),
    Setting(
        key=None,
        default="text",
        parse=log_format,
        help="one line per event, as text or as JSON",
        flag="--log-format",
        env="RIVET_LOG_FORMAT",
        dest="log_format",
        metavar="text|json",
    ),
    Setting(
        key=None,
        default=False,
        parse=true_or_false,
        help="run what is runnable now, then exit 0",
        flag="--once",
        dest="once",
        switch=True,
        shown_default="off",
    ),
    Setting(
        key="JOB_MODULES",
        default=[],
        parse=unchecked("a list of module names"),
        help="modules imported at start-up so their `@rivet.job` kinds register (every "
        "installed app's `jobs.py` is imported anyway)",
        check=None,
    ),
    _flag(
        "ALLOW_UNKNOWN_KINDS",
        False,
        "whether an enqueue may name a kind no installed app registers (`True` for a producer "
        "whose workers run elsewhere); otherwise it is refused: `UnknownKind`, `rivet_enqueue` "
        "exit 2, the API's 400 `unknown_kind`",
    ),
    Setting(
        key="NOTIFY_CHANNEL",
        default="rivet_task",
        parse=unchecked("a PostgreSQL channel name"),
        help="the PostgreSQL `LISTEN/NOTIFY` channel",
        check=None,
    ),
    Setting(
        key="LISTEN_DATABASE_URL",
        default=None,
        parse=listen_url,
        help="a PostgreSQL URL for the workers' LISTEN connection that bypasses a transaction "
        "pooler, its keys replacing the alias's (`postgres://db-primary:5432`); `None`: LISTEN "
        "on the alias's own parameters, and poll every `POLL_INTERVAL_SECS` when the alias "
        "goes through a transaction pooler ([PgBouncer](pgbouncer.md))",
        message="{name} must be {problem}",
        hint="e.g. 'postgres://db-primary:5432': the keys it gives replace the alias's "
        "for the workers' LISTEN connection (docs/pgbouncer.md)",
    ),
    _positive(
        "API_BULK_MAX",
        1000,
        "most tasks one `POST rivet/tasks/bulk/` may carry ([HTTP API](http-api.md))",
    ),
    Setting(
        key="METRICS_TOKEN",
        default=None,
        parse=metrics_token,
        help="a bearer token that may read `rivet/metrics/` without a user "
        "([Metrics](metrics.md)); `None`: users only",
        check="rivet.E005",
        # The token itself is never shown: only its type and length.
        message="{name} must be {problem}, got {kind} of length {length}",
        hint="make one: python -c 'import secrets; print(secrets.token_urlsafe())'",
    ),
    _flag(
        "FAILPOINTS",
        False,
        "whether workers honour `RIVET_FAILPOINT` ([Failpoints](failpoints.md)); `True` only "
        "in test and chaos projects",
    ),
    _flag(
        "SCHEDULER",
        True,
        "whether workers enqueue the due ticks of schedules ([Schedules](schedules.md)); "
        "every worker may, none leads",
    ),
    Setting(
        key="IDEMPOTENCY_RETENTION_SECS",
        default=7 * 24 * 3600,
        parse=positive_whole_number,
        help="`rivet.idempotency`: dedup rows older than this are deleted by `manage.py "
        "prune_idempotency`, and a key reused after that is new work "
        "([Effect service](effect-service.md#settings))",
        check="rivet_idempotency.E001",
        hint=f"remove it to use the default ({7 * 24 * 3600})",
    ),
    Setting(
        key="IDEMPOTENCY_MAX_BODY_BYTES",
        default=64 * 1024,
        parse=positive_whole_number,
        help="`rivet.idempotency`: a request body larger than this is refused with 413 before "
        "it is read or parsed",
        check="rivet_idempotency.E001",
        hint=f"remove it to use the default ({64 * 1024})",
    ),
)

BY_KEY: dict[str, Setting] = {entry.key: entry for entry in SETTINGS if entry.key is not None}


def defaults() -> dict[str, Any]:
    """Every ``settings.RIVET`` key with its default, in the table's order."""
    return {key: entry.default for key, entry in BY_KEY.items()}


def rivet_dict() -> dict[str, Any]:
    """``settings.RIVET`` (``{}`` when unset or None), as read now."""
    return getattr(settings, "RIVET", None) or {}


def rivet_value(key: str) -> Any:
    """One setting as read now, or its default."""
    return rivet_dict().get(key, BY_KEY[key].default)


def value_problems(
    entries: Iterable[Setting], read: Callable[[str], tuple[Any, str]]
) -> Iterator[tuple[Setting, str]]:
    """(entry, message) for each entry with a check that refuses its value: ``read(key)`` gives
    the value and the name the message gives it (``RIVET['KEY']``, or an old setting's name)."""
    for entry in entries:
        if entry.check is None or entry.key is None:
            continue
        value, name = read(entry.key)
        problem = entry.problem(value, name)
        if problem is not None:
            yield entry, problem


# -- the docs' tables --------------------------------------------------------------------------


def shown(value: Any) -> str:
    """A default as the docs' tables show it."""
    if isinstance(value, bool) or value is None or isinstance(value, str | dict | list):
        return f"`{value!r}`".replace("'", '"') if isinstance(value, str) else f"`{value!r}`"
    if isinstance(value, float) and value.is_integer() and not math.isinf(value):
        return f"{value:.1f}"
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str | None) -> str:
    return f"`{_cell(text)}`" if text else ""


def _flag_cell(entry: Setting) -> str:
    if entry.flag is None:
        return ""
    return _code(entry.flag if entry.switch else f"{entry.flag} {entry.metavar}")


def settings_doc() -> str:
    """The table of docs/reference/settings.md: every ``settings.RIVET`` key."""
    lines = [
        "| key | default | accepts | worker flag | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry in BY_KEY.values():
        lines.append(
            f"| `{entry.key}` | {_cell(shown(entry.default))} | {_cell(entry.parse.expected)} | "
            f"{_code(entry.flag)} | {_cell(_links(entry.help, '../'))} |"
        )
    return "\n".join(lines) + "\n"


def worker_doc() -> str:
    """The table of docs/workers.md: every flag of ``rivet_worker``, its variable and key."""
    lines = [
        "| flag | variable | `RIVET` key | default | accepts | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for entry in SETTINGS:
        if entry.flag is None:
            continue
        default = entry.shown_default or shown(entry.default)
        accepts = "" if entry.switch else _cell(entry.parse.expected)
        lines.append(
            f"| {_flag_cell(entry)} | {_code(entry.env)} | {_code(entry.key)} | "
            f"{_cell(default)} | {accepts} | {_cell(entry.help)} |"
        )
    return "\n".join(lines) + "\n"


_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")


def _links(text: str, prefix: str) -> str:
    """The help's links (written from docs/) as a page in a folder below docs/ reaches them."""
    return _LINK.sub(lambda m: f"[{m[1]}]({prefix}{m[2]})", text)


#: A link that is all of a parenthesis, `` ([Metrics](metrics.md))``, or its last part,
#: ``; [Async jobs](workers.md#async-jobs))``.
_SEE_ALSO = re.compile(r" \(\[[^\]]+\]\([^)]+\)\)|; \[[^\]]+\]\([^)]+\)(?=\))")


def plain(text: str) -> str:
    """The help text as ``--help`` shows it: a link that only points elsewhere (``([Metrics]
    (metrics.md))``) left out, other links as their text, no backticks, ``%`` escaped."""
    text = _LINK.sub(lambda m: m[1], _SEE_ALSO.sub("", text)).replace("`", "")
    return text.replace("%", "%%")


#: The pages of docs/ that show a table drawn from this one, and the function that draws it.
DOC_TABLES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_doc,
    "workers.md": worker_doc,
}
#: The lines around a drawn table in its page; what is between them is the table's, never edited.
DOC_BEGIN = "<!-- drawn from rivet/settings_table.py: python scripts/settings_docs.py --write -->"
DOC_END = "<!-- /drawn -->"


def fill_doc(markdown: str, table: str) -> str:
    """``markdown`` with the drawn table between DOC_BEGIN and DOC_END replaced by ``table``."""
    begin, end = markdown.find(DOC_BEGIN), markdown.find(DOC_END)
    if begin < 0 or end < begin:
        raise ValueError(f"no {DOC_BEGIN!r} ... {DOC_END!r} in the page")
    return f"{markdown[: begin + len(DOC_BEGIN)]}\n{table}{markdown[end:]}"
