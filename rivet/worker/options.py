"""The worker's options: each from its flag, else its RIVET_* variable, else settings.RIVET.

Every value goes through one parser, whichever of the three it came from, so a bad value is
refused the same way and the message names where it came from (``--concurrency``,
``RIVET_LEASE_TTL_SECS`` or ``RIVET['POOL_SIZE']``) and what is expected. The same table
serves the system checks (``rivet.checks``) and ``WorkerConfig`` (``rivet.worker.config``),
whose fields go through ``checked``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, RivetConfigError
from rivet.validation import check_name


class OptionError(RivetConfigError):
    """A worker option has a bad value; the message names the flag, variable or setting."""


MAX_OWNER_LENGTH = 200  # rivet_task.lease_owner
# Bounds a typo cannot cross: each is far beyond any sensible value, and named in the message.
MAX_CONCURRENCY = 1024
MAX_ASYNC_CONCURRENCY = 100_000
MAX_PREFETCH = 4096
MAX_POOL_SIZE = 1024
MAX_PRUNE_BATCH = 100_000
DAY = 86400.0
#: Units a duration may carry: 90s, 15m, 12h, 7d, 2w (a bare number is seconds).
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
DURATION_RE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhdw]?)\s*$")
#: The longest retention a duration may name: ten years.
MAX_DURATION = 3650 * DAY


class Expected(ValueError):
    """Raised by a parser: the text says what was expected."""


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


def positive_secs(high: float) -> Callable[[Any], float]:
    def parse(text: Any) -> float:
        value = _number(text)
        if not 0 < value <= high:
            raise Expected(f"a number of seconds > 0 and <= {high:g}")
        return value

    return parse


def non_negative_secs(high: float) -> Callable[[Any], float]:
    def parse(text: Any) -> float:
        value = _number(text)
        if not 0 <= value <= high:
            raise Expected(f"a number of seconds between 0 and {high:g}")
        return value

    return parse


def integer_between(low: int, high: int | None = None) -> Callable[[Any], int]:
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: Any) -> int:
        if isinstance(text, bool | float):
            raise Expected(expected)
        try:
            value = int(str(text).strip())
        except ValueError:
            raise Expected(expected) from None
        if value < low or (high is not None and value > high):
            raise Expected(expected)
        return value

    return parse


def prefetch_value(text: Any) -> int | str:
    """``auto`` (the worker sets it by its handlers' run times) or an integer 0..MAX_PREFETCH."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        return integer_between(0, MAX_PREFETCH)(text)
    except Expected:
        raise Expected(f"an integer from 0 to {MAX_PREFETCH}, or auto") from None


def queue_list(text: Any) -> list[str]:
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    if not names:
        raise Expected("a comma-separated list of queue names, e.g. high,default")
    try:
        return [check_name("queue", name) for name in names]
    except InvalidInput as exc:
        raise Expected(f"queue names ({exc})") from None


def owner_name(text: Any) -> str:
    text = str(text).strip()
    if not text or len(text) > MAX_OWNER_LENGTH or not text.isprintable():
        raise Expected(f"a printable name of 1..{MAX_OWNER_LENGTH} characters")
    return text


def port_number(text: Any) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise Expected("a TCP port number, 1..65535") from None
    if not 1 <= value <= 65535:
        raise Expected("a TCP port number, 1..65535")
    return value


def duration(text: Any) -> float:
    """Seconds from ``7d``, ``12h``, ``30m``, ``90s`` or a bare number of seconds; > 0."""
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


def log_format(text: Any) -> str:
    if text not in ("text", "json"):
        raise Expected("text or json")
    return str(text)


#: Levels the routine per-task lines may take; warnings and errors keep their own.
TASK_LOG_LEVELS = ("info", "debug")


def task_log_level(text: Any) -> str:
    level = str(text).strip().lower()
    if level not in TASK_LOG_LEVELS:
        raise Expected("info or debug")
    return level


@dataclass(frozen=True, kw_only=True)
class Option:
    """One worker option and the three places it can come from."""

    dest: str
    flag: str
    env: str
    setting: str | None
    parse: Callable[[Any], Any]
    help: str
    metavar: str = "SECS"
    default: Any = None


OPTIONS = (
    Option(
        dest="queues",
        flag="--queue",
        env="RIVET_QUEUE",
        setting="QUEUE",
        parse=queue_list,
        metavar="Q[,Q...]",
        help="queues to claim from, comma-separated, tried in that order",
    ),
    Option(
        dest="lease_ttl",
        flag="--lease-ttl-secs",
        env="RIVET_LEASE_TTL_SECS",
        setting="LEASE_TTL_SECS",
        parse=positive_secs(DAY),
        help="lease length; heartbeats extend it every third of it",
    ),
    Option(
        dest="concurrency",
        flag="--concurrency",
        env="RIVET_CONCURRENCY",
        setting="CONCURRENCY",
        parse=integer_between(1, MAX_CONCURRENCY),
        metavar="N",
        help="handlers run at once (one thread each)",
    ),
    Option(
        dest="async_concurrency",
        flag="--async-concurrency",
        env="RIVET_ASYNC_CONCURRENCY",
        setting="ASYNC_CONCURRENCY",
        parse=integer_between(1, MAX_ASYNC_CONCURRENCY),
        metavar="N",
        help="async def handlers in flight at once, on the worker's one event loop thread "
        "(beside the --concurrency threads of sync jobs)",
    ),
    Option(
        dest="prefetch",
        flag="--prefetch",
        env="RIVET_PREFETCH",
        setting="PREFETCH",
        parse=prefetch_value,
        metavar="N|auto",
        help="claimed tasks that may wait for a free slot, so one round trip settles and "
        "claims many; auto (the default) sets it from the handlers' run times, 0 claims only "
        "into free slots",
    ),
    Option(
        dest="retry_backoff",
        flag="--retry-backoff-secs",
        env="RIVET_RETRY_BACKOFF_SECS",
        setting="RETRY_BACKOFF_SECS",
        parse=non_negative_secs(DAY),
        help="retry wait = random in [0, min(cap, backoff * 2**attempts)]",
    ),
    Option(
        dest="retry_backoff_cap",
        flag="--retry-backoff-cap-secs",
        env="RIVET_RETRY_BACKOFF_CAP_SECS",
        setting="RETRY_BACKOFF_CAP_SECS",
        parse=non_negative_secs(30 * DAY),
        help="the longest retry wait",
    ),
    Option(
        dest="pool_size",
        flag="--pool-size",
        env="RIVET_POOL_SIZE",
        setting="POOL_SIZE",
        parse=integer_between(2, MAX_POOL_SIZE),
        metavar="N",
        help="most database connections the worker holds: its PostgreSQL pool (>= 2)",
    ),
    Option(
        dest="owner",
        flag="--owner",
        env="RIVET_OWNER",
        setting=None,
        parse=owner_name,
        metavar="NAME",
        help="name written as lease_owner (default: hostname:pid)",
    ),
    Option(
        dest="poll_interval",
        flag="--poll-interval",
        env="RIVET_POLL_INTERVAL",
        setting="POLL_INTERVAL_SECS",
        parse=positive_secs(3600.0),
        help="seconds between claims when idle (PostgreSQL also wakes on enqueue)",
    ),
    Option(
        dest="job_timeout",
        flag="--job-timeout",
        env="RIVET_JOB_TIMEOUT",
        setting="JOB_TIMEOUT_SECS",
        parse=positive_secs(30 * DAY),
        help="seconds before an attempt counts as failed (a job's own timeout wins)",
    ),
    Option(
        dest="shutdown_timeout",
        flag="--shutdown-timeout",
        env="RIVET_SHUTDOWN_TIMEOUT",
        setting="SHUTDOWN_TIMEOUT_SECS",
        parse=non_negative_secs(DAY),
        help="seconds to let in-flight handlers finish after SIGTERM/SIGINT",
    ),
    Option(
        dest="connect_timeout",
        flag="--connect-timeout-secs",
        env="RIVET_CONNECT_TIMEOUT_SECS",
        setting="CONNECT_TIMEOUT_SECS",
        parse=positive_secs(300.0),
        help=(
            "at start, how long to wait for the database to answer before exiting 1; while "
            "running, how long a database call waits before the log says so (db_waiting)"
        ),
    ),
    Option(
        dest="idle_in_transaction_timeout",
        flag="--idle-in-transaction-timeout-secs",
        env="RIVET_IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        setting="IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        parse=non_negative_secs(DAY),
        help=(
            "PostgreSQL ends the session of a transaction the worker opened (a scheduler pass) "
            "that sits idle longer than this, freeing its locks; 0 for no bound"
        ),
    ),
    Option(
        dest="retention",
        flag="--retention",
        env="RIVET_RETENTION",
        setting="RETENTION",
        parse=duration,
        metavar="DURATION",
        help=(
            "delete done tasks and fenced-write records older than this (7d, 12h, ...); "
            "off by default. Pruning a done task releases its idempotency key"
        ),
    ),
    Option(
        dest="prune_every",
        flag="--prune-every-secs",
        env="RIVET_PRUNE_EVERY_SECS",
        setting="PRUNE_EVERY_SECS",
        parse=positive_secs(DAY),
        help="with a retention: seconds between prunes (one at start)",
    ),
    Option(
        dest="prune_batch_size",
        flag="--prune-batch-size",
        env="RIVET_PRUNE_BATCH_SIZE",
        setting="PRUNE_BATCH_SIZE",
        parse=integer_between(1, MAX_PRUNE_BATCH),
        metavar="N",
        help="with a retention: most rows one prune statement deletes (its own transaction)",
    ),
    Option(
        dest="max_jobs",
        flag="--max-jobs",
        env="RIVET_MAX_JOBS",
        setting=None,
        parse=integer_between(1),
        metavar="N",
        help="exit after this many attempts are settled",
    ),
    Option(
        dest="metrics_port",
        flag="--metrics-port",
        env="RIVET_METRICS_PORT",
        setting=None,
        parse=port_number,
        metavar="PORT",
        help="serve Prometheus metrics at http://0.0.0.0:PORT/metrics (off by default)",
    ),
    Option(
        dest="task_log_level",
        flag="--task-log-level",
        env="RIVET_TASK_LOG_LEVEL",
        setting="TASK_LOG_LEVEL",
        parse=task_log_level,
        metavar="info|debug",
        help="level of the routine per-task lines (claimed, acked, retry); debug leaves them "
        "out of the default INFO log, which is cheaper at full speed",
    ),
    Option(
        dest="log_format",
        flag="--log-format",
        env="RIVET_LOG_FORMAT",
        setting=None,
        parse=log_format,
        metavar="text|json",
        default="text",
        help="text (default) or json, one line per event",
    ),
)


BY_DEST = {option.dest: option for option in OPTIONS}


def checked(dest: str, value: Any) -> Any:
    """A WorkerConfig field through its option's parser; InvalidInput names it."""
    try:
        return BY_DEST[dest].parse(value)
    except Expected as exc:
        raise InvalidInput(f"{dest} must be {exc}, got {value!r}") from None


def setting_errors() -> list[str]:
    """What is wrong with the worker settings in settings.RIVET, one message per setting."""
    errors = []
    for option in OPTIONS:
        value = None if option.setting is None else getattr(rivet_settings, option.setting)
        if value is None:
            continue
        try:
            option.parse(value)
        except Expected as exc:
            errors.append(f"RIVET[{option.setting!r}] must be {exc}, got {value!r}")
    return errors


def _pick(option: Option, flags: Mapping[str, Any], environ: Mapping[str, str]):
    """(raw value, where it came from): the flag, else the variable, else the setting."""
    if flags.get(option.dest) is not None:
        return flags[option.dest], option.flag
    if environ.get(option.env, "").strip():
        return environ[option.env], option.env
    if option.setting is not None:
        return getattr(rivet_settings, option.setting), f"RIVET[{option.setting!r}]"
    return option.default, None


def resolve(flags: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Every option's value; raises OptionError naming the source of the first bad one."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw, source = _pick(option, flags, environ)
        if raw is None:
            values[option.dest] = None
            continue
        try:
            values[option.dest] = option.parse(raw)
        except Expected as exc:
            raise OptionError(f"{source} must be {exc}, got {raw!r}") from None
    return values
