"""The worker's options: each from its flag, else its RIVET_* variable, else settings.RIVET.

Every value goes through one parser, whichever of the three it came from, so a bad value is
refused the same way and the message names where it came from (``--concurrency``,
``RIVET_LEASE_TTL_SECS`` or ``RIVET['POOL_SIZE']``) and what is expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, RivetConfigError
from rivet.validation import check_name

MAX_OWNER_LENGTH = 200  # rivet_task.lease_owner


class OptionError(RivetConfigError):
    """A worker option has a bad value; the message names the flag, variable or setting."""


class Expected(ValueError):
    """Raised by a parser: the text says what was expected."""


def _number(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise Expected("a number of seconds") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise Expected("a finite number of seconds")
    return value


def positive_secs(text: Any) -> float:
    value = _number(text)
    if value <= 0:
        raise Expected("a number of seconds > 0")
    return value


def non_negative_secs(text: Any) -> float:
    value = _number(text)
    if value < 0:
        raise Expected("a number of seconds >= 0")
    return value


def integer_at_least(low: int) -> Callable[[Any], int]:
    def parse(text: Any) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise Expected(f"an integer >= {low}") from None
        if value < low:
            raise Expected(f"an integer >= {low}")
        return value

    return parse


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


def log_format(text: Any) -> str:
    if text not in ("text", "json"):
        raise Expected("text or json")
    return str(text)


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
        parse=positive_secs,
        help="lease length; heartbeats extend it every third of it",
    ),
    Option(
        dest="concurrency",
        flag="--concurrency",
        env="RIVET_CONCURRENCY",
        setting="CONCURRENCY",
        parse=integer_at_least(1),
        metavar="N",
        help="handlers run at once; also the most tasks one claim asks for",
    ),
    Option(
        dest="retry_backoff",
        flag="--retry-backoff-secs",
        env="RIVET_RETRY_BACKOFF_SECS",
        setting="RETRY_BACKOFF_SECS",
        parse=non_negative_secs,
        help="retry wait = random in [0, min(cap, backoff * 2**attempts)]",
    ),
    Option(
        dest="retry_backoff_cap",
        flag="--retry-backoff-cap-secs",
        env="RIVET_RETRY_BACKOFF_CAP_SECS",
        setting="RETRY_BACKOFF_CAP_SECS",
        parse=non_negative_secs,
        help="the longest retry wait",
    ),
    Option(
        dest="pool_size",
        flag="--pool-size",
        env="RIVET_POOL_SIZE",
        setting="POOL_SIZE",
        parse=integer_at_least(2),
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
        parse=positive_secs,
        help="seconds between claims when idle (PostgreSQL also wakes on enqueue)",
    ),
    Option(
        dest="job_timeout",
        flag="--job-timeout",
        env="RIVET_JOB_TIMEOUT",
        setting="JOB_TIMEOUT_SECS",
        parse=positive_secs,
        help="seconds before an attempt counts as failed (a job's own timeout wins)",
    ),
    Option(
        dest="shutdown_timeout",
        flag="--shutdown-timeout",
        env="RIVET_SHUTDOWN_TIMEOUT",
        setting="SHUTDOWN_TIMEOUT_SECS",
        parse=non_negative_secs,
        help="seconds to let in-flight handlers finish after SIGTERM/SIGINT",
    ),
    Option(
        dest="max_jobs",
        flag="--max-jobs",
        env="RIVET_MAX_JOBS",
        setting=None,
        parse=integer_at_least(1),
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
