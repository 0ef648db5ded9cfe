"""The worker's options: each from its flag, else its RIVET_* variable, else settings.RIVET.

The options are the entries of ``rivet.settings_table`` that have a flag: that table says each
one's flag, variable, setting, parser (with its bounds) and help, once. Every value goes through
its one parser, whichever of the three places it came from, so a bad value is refused the same
way and the message names where it came from (``--concurrency``, ``RIVET_LEASE_TTL_SECS`` or
``RIVET['POOL_SIZE']``) and what is expected; the system checks (``rivet.checks``) refuse a bad
setting in the same words. ``WorkerConfig`` (``rivet.worker.config``) puts its fields through
``checked``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, RivetConfigError
from rivet.settings_table import (  # noqa: F401  (the parsers, importable from here as before)
    DAY,
    DURATION_RE,
    DURATION_UNITS,
    MAX_ASYNC_CONCURRENCY,
    MAX_CONCURRENCY,
    MAX_DURATION,
    MAX_OWNER_LENGTH,
    MAX_POOL_SIZE,
    MAX_PREFETCH,
    MAX_PRUNE_BATCH,
    MUST_BE,
    SETTINGS,
    TASK_LOG_LEVELS,
    Expected,
    duration,
    integer_between,
    log_format,
    non_negative_secs,
    owner_name,
    plain,
    port_number,
    positive_secs,
    prefetch_value,
    queue_list,
    task_log_level,
)


class OptionError(RivetConfigError):
    """A worker option has a bad value; the message names the flag, variable or setting."""


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


#: The worker's options, in the table's order: each entry of rivet.settings_table with a flag
#: that takes a value (``--once``, a switch, is the command's own).
OPTIONS = tuple(
    Option(
        dest=entry.dest,
        flag=entry.flag,
        env=entry.env,
        setting=entry.key,
        parse=entry.parse,
        help=plain(entry.help),
        metavar=entry.metavar,
        default=None if entry.key is not None else entry.default,
    )
    for entry in SETTINGS
    if entry.flag is not None and entry.env is not None and entry.dest is not None
)
#: The help of each switch (a flag without a value), by its flag.
SWITCHES = {
    entry.flag: plain(entry.help) for entry in SETTINGS if entry.switch and entry.flag is not None
}

BY_DEST = {option.dest: option for option in OPTIONS}


def checked(dest: str, value: Any) -> Any:
    """A WorkerConfig field through its option's parser; InvalidInput names it."""
    try:
        return BY_DEST[dest].parse(value)
    except Expected as exc:
        raise InvalidInput(MUST_BE.format(name=dest, problem=exc, value=value)) from None


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
            raise OptionError(MUST_BE.format(name=source, problem=exc, value=raw)) from None
    return values
