"""Bounds on what a producer may enqueue. A bad value raises InvalidInput and writes nothing."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rivet import tracing
from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, InvalidKey, InvalidName, PayloadTooLarge
from rivet.text import (
    KEY_CHARACTERS,
    NAME_RE,  # noqa: F401  (the API's schema takes the name pattern from here)
    depth_message,
    json_depth_problem,
    key_problem,
    name_problem,
    unstorable,
)
from rivet.values import TaskSpec, frozen_instance

PRIORITY_MIN, PRIORITY_MAX = -100, 100
MAX_ATTEMPTS_LIMIT = 1000
# Ten years: beyond it a delay is a mistake, and the databases' interval types overflow.
MAX_DELAY_SECS = 10 * 365 * 24 * 3600
# One encoder for every payload: json.dumps with options would build a new one per call.
_PAYLOAD_ENCODER = json.JSONEncoder(
    allow_nan=False, separators=(",", ":"), sort_keys=True, ensure_ascii=False
)


# The C parts JSONEncoder.encode ends in (None without the C accelerator).
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ENCODE_TEXT = json.encoder.encode_basestring  # ensure_ascii=False's string encoder


def _not_json(value: Any) -> Any:
    """The encoder's ``default``: what JSONEncoder.default raises for a value JSON lacks."""
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _payload_text(payload: Any) -> str:
    """``_PAYLOAD_ENCODER.encode(payload)``: the same text and the same errors, through the C
    encoder built straight from its options (JSONEncoder.encode goes through iterencode's
    Python first: half the time of a small payload, and an enqueue_many encodes thousands).
    Each call gets its own circular-reference markers, so threads never share them."""
    if _C_MAKE_ENCODER is None:  # no C accelerator (another Python): the encoder's own way
        return _PAYLOAD_ENCODER.encode(payload)
    return "".join(
        _C_MAKE_ENCODER(
            {},  # markers: what is being encoded now (a payload that contains itself is refused)
            _not_json,
            _ENCODE_TEXT,
            None,  # indent
            ":",
            ",",
            True,  # sort_keys
            False,  # skipkeys
            False,  # allow_nan
        )(payload, 0)
    )


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The settings an enqueue is checked against, read once per call (once per bulk)."""

    queue: str
    max_attempts: int
    name: int
    key: int
    payload: int
    allow_unknown_kinds: bool = False

    @classmethod
    def read(cls) -> Limits:
        """The limits of the settings now. The settings are read on every call, so a change
        however made (override_settings, or the dict edited in place) counts at once; the
        Limits of values seen before are reused rather than built again (an enqueue reads
        them on every call)."""
        values = rivet_settings.values(*_LIMIT_SETTINGS)
        # With their types: 1 == True and 3 == 3.0, but only True allows unknown kinds, and
        # 3.0 attempts is refused.
        seen = (*values, *map(type, values))
        try:
            return _LIMITS[seen]
        except KeyError:
            pass
        except TypeError:  # a value that cannot be a key (a bad setting): no reuse
            return cls._of(values)
        if len(_LIMITS) >= _LIMITS_KEPT:
            _LIMITS.clear()
        limits = _LIMITS[seen] = cls._of(values)
        return limits

    @classmethod
    def _of(cls, values: tuple[Any, ...]) -> Limits:
        queue, max_attempts, name, key, payload, allow_unknown_kinds = values
        return cls(
            queue=queue,
            max_attempts=max_attempts,
            name=name,
            key=key,
            payload=payload,
            allow_unknown_kinds=allow_unknown_kinds is True,
        )


#: build_spec's ``trace_context`` when the caller has not read it: the current one is read.
CURRENT_TRACE: Any = object()

#: The settings Limits holds, in the order of ``Limits._of``.
_LIMIT_SETTINGS = (
    "QUEUE",
    "MAX_ATTEMPTS",
    "MAX_NAME_LENGTH",
    "MAX_IDEM_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "ALLOW_UNKNOWN_KINDS",
)
#: Limits by the values (and types) of their settings; emptied when it reaches _LIMITS_KEPT entries.
_LIMITS: dict[tuple[Any, ...], Limits] = {}
_LIMITS_KEPT = 64


def check_name(what: str, value: Any, limit: int | None = None) -> str:
    """A queue or kind name: 1..MAX_NAME_LENGTH of ASCII letters, digits and ``_ . : -``."""
    if not isinstance(value, str) or not value:
        raise InvalidName(f"{what} must be a non-empty string, got {value!r}", field=what)
    problem = name_problem(value, rivet_settings.MAX_NAME_LENGTH if limit is None else limit)
    if problem:
        raise InvalidName(f"{what} {problem}", field=what)
    return value


def check_key(
    what: str, value: Any, *, allow_empty: bool = False, limit: int | None = None
) -> str | None:
    """An idempotency or unique key: None, or up to MAX_IDEM_KEY_LENGTH printable characters.

    The empty string is allowed only where it means something: a unique key of ``""`` is
    "one pending task of this kind, whoever asks".
    """
    if value is None:
        return None
    limit = rivet_settings.MAX_IDEM_KEY_LENGTH if limit is None else limit
    empty_refused = not value and not allow_empty
    if not isinstance(value, str) or empty_refused or not value.isprintable():
        raise InvalidInput(
            f"{what} must be a non-empty printable string, got {value!r}", field=what
        )
    if len(value) > limit:
        raise InvalidInput(f"{what} is {len(value)} characters; at most {limit}", field=what)
    return value


def check_idem_key(value: Any, limit: int | None = None) -> str | None:
    """An idempotency key: None, or 1..MAX_IDEM_KEY_LENGTH characters of visible ASCII.

    The same rule holds for the producer API, the CLI, the HTTP header and the body field, so
    one key has one meaning wherever it comes from; anything else is refused, never re-encoded.
    """
    if value is None:
        return None
    limit = rivet_settings.MAX_IDEM_KEY_LENGTH if limit is None else limit
    if not isinstance(value, str) or not value:
        raise InvalidKey(
            f"idem_key must be a non-empty string of {KEY_CHARACTERS}, got {value!r}",
            field="idem_key",
        )
    problem = key_problem(value)
    if problem:
        raise InvalidKey(f"idem_key {value[:40]!r} {problem}", field="idem_key")
    if len(value) > limit:
        raise InvalidKey(f"idem_key is {len(value)} characters; at most {limit}", field="idem_key")
    return value


def encode_payload(payload: Any, limit: int | None = None) -> str:
    """The payload as JSON text, refused if not JSON, nested deeper than MAX_JSON_DEPTH or
    over MAX_PAYLOAD_BYTES of UTF-8."""
    try:
        text = _payload_text(payload)
    except RecursionError as exc:  # the encoder recursed past the stack: far past the limit
        raise InvalidInput(f"payload {depth_message()}", field="payload") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload must be JSON-serialisable: {exc}", field="payload") from exc
    reason = unstorable(text, json_text=True) or json_depth_problem(text)
    if reason:
        raise InvalidInput(f"payload {reason}", field="payload")
    limit = rivet_settings.MAX_PAYLOAD_BYTES if limit is None else limit
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"payload is {size} bytes encoded; the limit is {limit} bytes", field="payload"
        )
    return text


def parse_payload(text: str) -> Any:
    """Payload JSON given as text (the CLI), refused with the parser's message if malformed."""
    # The depth before the parser, which recurses once per level.
    reason = unstorable(text) or json_depth_problem(text)
    if reason:
        raise InvalidInput(f"payload {reason}", field="payload")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"payload is not valid JSON: {exc}", field="payload") from exc


def _check_int(what: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, got {value!r}", field=what)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidInput(f"{what} must be {bound}, got {value}", field=what)
    return value


def build_spec(
    *,
    queue: str,
    kind: str,
    payload: Any = None,
    idem_key: str | None = None,
    unique_key: str | None = None,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    limits: Limits | None = None,
    trace_context: Any = CURRENT_TRACE,
) -> TaskSpec:
    """Validate every input of an enqueue and return the TaskSpec the stores take.

    ``limits``: the settings to check against, when the caller read them already;
    ``trace_context``: the producer's trace context (``rivet.tracing.carrier()``), when the
    caller read it already (once per bulk call: OpenTelemetry's lookup of the current span is
    a large part of validating one task, docs/decisions/0006-bulk-enqueue-copy.md); by default
    it is read here.
    """
    limits = limits or Limits.read()
    delay = 0.0 if delay is None else _delay_secs(delay)
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
        raise InvalidInput(
            f"run_at must be a timezone-aware datetime, got {run_at!r}", field="run_at"
        )
    if run_at is not None and delay:
        raise InvalidInput("give delay or run_at, not both", field="delay")
    payload_json = encode_payload(payload, limits.payload)
    attempts = limits.max_attempts if max_attempts is None else max_attempts
    # frozen_instance: TaskSpec's __post_init__ only encodes a payload_json not given.
    return frozen_instance(
        TaskSpec,
        queue=check_name("queue", queue, limits.name),
        kind=check_name("kind", kind, limits.name),
        payload=payload,
        payload_json=payload_json,
        idem_key=check_idem_key(idem_key, limits.key),
        unique_key=check_key("unique_key", unique_key, allow_empty=True, limit=limits.key),
        delay_secs=float(delay),
        run_at=run_at,
        priority=_check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX),
        max_attempts=_check_int("max_attempts", attempts, 1, MAX_ATTEMPTS_LIMIT),
        trace_context=tracing.carrier() if trace_context is CURRENT_TRACE else trace_context,
    )


def _delay_secs(delay: Any) -> float:
    if hasattr(delay, "total_seconds"):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay):
        raise InvalidInput(f"delay must be a number of seconds, got {delay!r}", field="delay")
    if delay < 0 or delay > MAX_DELAY_SECS:
        raise InvalidInput(
            f"delay must be between 0 and {MAX_DELAY_SECS} seconds (ten years), got {delay}",
            field="delay",
        )
    return delay


def clip_error(text: str) -> str:
    """An error message cut to MAX_ERROR_LENGTH, keeping the end where the reason usually is."""
    limit = rivet_settings.MAX_ERROR_LENGTH
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]
