"""Failpoints: abort the process (SIGABRT) at named points, to hit crash windows on purpose.

``RIVET_FAILPOINT=name:probability[,name:probability]`` arms points; ``failpoint(name)`` then
calls ``os.abort()`` with that probability. ``RIVET_FAILPOINT_SEED`` seeds the random source,
so a chaos run that failed can be repeated. The points, in the order a task meets them:

- ``after_claim``: the worker holds a lease and has not started the handler.
- ``before_effect``: nothing has happened yet. The worker fires it just before the handler,
  unless the handler is marked with ``@fires("before_effect")`` because it fires the point
  itself just before its side effect (the ``effect`` kind does, before its HTTP call).
- ``after_effect_before_ack``: the handler returned (its effect happened); the ack is not sent.
  This is the window that makes duplicate deliveries.
- ``after_error_before_fail``: the handler failed (or was stopped by its deadline) and the
  worker decided to retry or bury the task; that decision is not yet queued for writing.
- ``after_ack``: the task is done.

``after_error_before_retry`` and ``after_error_before_bury`` fire at the same moment as
``after_error_before_fail``, each only for its own kind of decision: a pause there holds that
one kind of late write. ``after_error_before_bury`` fires only for a burial with attempts left
(``rivet.Permanent``): a task at its last attempt is buried by the next claim once its lease
lapses, never taken by another worker, so a late burial of it never meets another's lease.

Two points fire at a write of several tasks rather than at one task's step:

- ``before_flush``: two or more decisions are about to be written in one statement (a batch);
  it fires only for a flush of two or more. While it is armed, a lone decision is held back
  for a second one (at most until half its lease is left), so that a batch forms.
- ``before_heartbeat``: the guard is about to extend the leases of the tasks in flight.

One point fires in the scheduler rather than at a task:

- ``scheduler_pass_locked``: a scheduler pass holds the rows of the due schedules it locked and
  has enqueued none of their ticks yet (the chaos harness's ``scheduler-stall`` stops it here).

``RIVET_FAILPOINT_ACTION=stop`` makes a point stop the process (SIGSTOP) instead of aborting
it: a pause, as a VM freeze or a long garbage collection makes, at a chosen moment, once (the
point is disarmed as it fires). Whoever continues it (SIGCONT) sees the write it was about to
make arrive late, under the lease it held when it stopped; the chaos harness uses it to send
stale acks, retries and burials through the fence.

Failpoints are off unless the project enables them: ``RIVET = {"FAILPOINTS": True}`` (the test
settings and the chaos host project do). Off, nothing fires whatever the environment says, and
``rivet_worker`` refuses to start (exit 2, one line) when RIVET_FAILPOINT is set, so a variable
left in a production environment cannot abort a worker, nor be believed armed when it is not.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rivet import logs
from rivet.conf import rivet_settings
from rivet.errors import RivetConfigError

ENV_VAR = "RIVET_FAILPOINT"
SEED_VAR = "RIVET_FAILPOINT_SEED"
ACTION_VAR = "RIVET_FAILPOINT_ACTION"
POINTS = (
    "after_claim",
    "before_effect",
    "after_effect_before_ack",
    "after_error_before_fail",
    "after_ack",
    "after_error_before_retry",
    "after_error_before_bury",
    "before_flush",
    "before_heartbeat",
    "scheduler_pass_locked",
)
FORMAT = "name:probability[,name:probability], e.g. after_effect_before_ack:1.0"


class FailpointConfigError(RivetConfigError):
    """RIVET_FAILPOINT or RIVET_FAILPOINT_SEED is malformed; the message names the variable."""


def parse(text: str) -> dict[str, float]:
    """``name:prob[,name:prob]`` as a dict; raises FailpointConfigError naming the variable."""
    armed: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, prob_text = item.partition(":")
        name = name.strip()
        if not sep or name not in POINTS:
            raise _bad(f"{item!r} does not name a known point ({', '.join(POINTS)})")
        try:
            prob = float(prob_text)
        except ValueError:
            prob = -1.0
        if not 0.0 <= prob <= 1.0:
            raise _bad(f"probability {prob_text.strip()!r} for {name} is not a number in [0, 1]")
        armed[name] = prob
    return armed


def _bad(detail: str) -> FailpointConfigError:
    return FailpointConfigError(f"{ENV_VAR} is malformed: {detail}; expected {FORMAT}")


def parse_seed(text: str | None) -> int | None:
    """The seed from RIVET_FAILPOINT_SEED: None when unset or empty, else an integer."""
    if text is None or not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise FailpointConfigError(
            f"{SEED_VAR} must be an integer, got {text!r}; unset it for an unseeded run"
        ) from None


def stop_self() -> None:
    """SIGSTOP this process; it goes on from here when something sends it SIGCONT.

    The signal is sent to the calling thread, not to the process: a process-directed SIGSTOP
    is taken by the main thread, and the thread that fired the point ran on meanwhile (on
    another CPU) long enough to send the very write it was to stop before (a heartbeat, a
    retry: measured, 17 stops in 60 on a busy 2-core machine). Taken by the calling thread, the
    stop holds before this function returns; the whole process stops with it."""
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


#: What a firing point does, by RIVET_FAILPOINT_ACTION (default abort).
ACTIONS: dict[str, Callable[[], Any]] = {"abort": os.abort, "stop": stop_self}


def parse_action(text: str | None) -> Callable[[], Any]:
    """The action RIVET_FAILPOINT_ACTION names (unset or empty: abort)."""
    name = (text or "abort").strip() or "abort"
    if name not in ACTIONS:
        raise FailpointConfigError(
            f"{ACTION_VAR} must be one of {', '.join(ACTIONS)}, got {text!r}; unset it to abort"
        )
    return ACTIONS[name]


class Failpoints:
    """A set of armed points and the seeded random source that decides when they fire."""

    def __init__(
        self,
        armed: Mapping[str, float] | None = None,
        *,
        seed: int | None = None,
        abort: Callable[[], Any] = os.abort,
    ) -> None:
        self.armed = dict(armed or {})
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._abort = abort

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Failpoints:
        """Points armed by RIVET_FAILPOINT, seeded by RIVET_FAILPOINT_SEED."""
        return cls(
            parse(environ.get(ENV_VAR, "")),
            seed=parse_seed(environ.get(SEED_VAR)),
            abort=parse_action(environ.get(ACTION_VAR)),
        )

    def should_fire(self, name: str) -> bool:
        prob = self.armed.get(name, 0.0)
        if prob <= 0.0:
            return False
        with self._lock:
            return self._random.random() < prob

    def fire(self, name: str, **fields: Any) -> None:
        """Abort the process at ``name`` if the point is armed and the draw says so.

        ``fields`` go into the ``failpoint_fired`` log line (e.g. the task the point fired for).
        """
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(POINTS)}")
        if self.should_fire(name):
            stopping = self._abort is stop_self
            if stopping:  # a pause happens once: continued, the process goes on unarmed
                self.armed.pop(name, None)
            then = "SIGSTOP" if stopping else "SIGABRT"
            logs.event("failpoint_fired", logging.CRITICAL, point=name, then=then, **fields)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            self._abort()


def enabled() -> bool:
    """Whether this project lets failpoints fire: ``RIVET["FAILPOINTS"]`` is True."""
    return rivet_settings.FAILPOINTS is True


def from_settings(environ: Mapping[str, str] = os.environ) -> Failpoints:
    """The points a worker honours: RIVET_FAILPOINT's when enabled, else none.

    Raises FailpointConfigError when RIVET_FAILPOINT is set in a project that does not enable
    failpoints: the variable would otherwise be silently ignored.
    """
    if enabled():
        return Failpoints.from_env(environ)
    if environ.get(ENV_VAR, "").strip():
        raise FailpointConfigError(
            f"{ENV_VAR} is set but failpoints are off in this project; unset it, or set "
            "RIVET['FAILPOINTS'] = True in the settings of a test or chaos project (never in "
            "production)"
        )
    return Failpoints()


_active: Failpoints | None = None
_active_lock = threading.Lock()


def install(points: Failpoints) -> Failpoints:
    """Make ``points`` the process-wide set that ``failpoint(name)`` consults."""
    global _active
    with _active_lock:
        _active = points
    return points


def active() -> Failpoints:
    """The process-wide set, read from the environment on first use (when enabled)."""
    global _active
    with _active_lock:
        if _active is None:
            _active = Failpoints.from_env() if enabled() else Failpoints()
        return _active


def failpoint(name: str) -> None:
    """Abort here (SIGABRT) with the probability RIVET_FAILPOINT gives ``name``."""
    active().fire(name)


def fires(*names: str) -> Callable[[Any], Any]:
    """Mark a handler that fires these points itself, so the worker does not fire them too.

    Put it below ``@rivet.job`` (it must reach the function the job registers)::

        @rivet.job("effect")
        @fires("before_effect")
        def effect(context): ...
    """
    unknown = sorted(set(names) - set(POINTS))
    if unknown:
        raise ValueError(f"unknown failpoints {', '.join(unknown)}; known: {', '.join(POINTS)}")

    def mark(handler: Any) -> Any:
        target = getattr(handler, "handle", handler)
        func = getattr(target, "__func__", target)
        func.__rivet_failpoints__ = frozenset(names) | getattr(func, "__rivet_failpoints__", set())
        return handler

    return mark


def fired_by(handler: Any) -> frozenset[str]:
    """The points a handler fires itself (see ``fires``)."""
    return frozenset(getattr(handler, "__rivet_failpoints__", ()))
