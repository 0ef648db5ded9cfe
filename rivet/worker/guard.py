"""The guard beside the handlers: heartbeats, the local lease deadline and the job timeout.

The guard thread extends every held lease every ``lease_ttl / 3`` seconds. Each running task
has a local deadline on the worker's monotonic clock: the clock reading taken *before* the
claim (or the last successful heartbeat) plus ``lease_ttl``, so it never falls later than the
database's own ``visible_at``. The guard stops a handler (``Attempt.stop``) when:

- a heartbeat comes back without its lease: another claim bumped the epoch (``FENCED``);
- its local deadline passes with no successful heartbeat, e.g. the database is unreachable
  (``EXPIRED``) — a lapsed deadline is first re-checked with a heartbeat, so a worker that was
  only paused (SIGSTOP) learns whether it was really fenced;
- it overruns its job timeout (``TIMEOUT``);
- a heartbeat reports that an operator cancelled the task (``CANCELLED``).

The guard never writes an outcome itself: it marks the task stopped and tells the worker's loop
(``notify``), which settles it. No database time is ever computed from the local clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django.db import close_old_connections, connections

from rivet import logs
from rivet.dbwait import DbWaits, Slot
from rivet.failpoints import Failpoints
from rivet.stores.base import Store
from rivet.values import CANCELLED_SUFFIX, Lease
from rivet.worker.attempt import Attempt, StopKind


class Guard:
    """A daemon thread that heartbeats held leases and stops handlers that must stop."""

    def __init__(
        self,
        *,
        store: Store,
        lease_ttl: float,
        clock: Callable[[], float],
        notify: Callable[[Attempt], None],
        failpoints: Failpoints | None = None,
        db_waits: DbWaits | None = None,
    ) -> None:
        """``db_waits``: the worker's; a heartbeat that waits past the connect timeout is
        logged (``rivet.dbwait``)."""
        self.store = store
        self.db_waits = db_waits or DbWaits(None, 1.0)
        self.failpoints = failpoints or Failpoints()
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.notify = notify
        self.interval = lease_ttl / 3
        self.tick_secs = min(self.interval, 0.2)
        self._tracked: dict[Lease, Attempt] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._next_beat = 0.0
        self._thread: threading.Thread | None = None
        #: The heartbeat thread's slot (made on that thread; until then, one of no thread's).
        self._db = Slot(self.db_waits, lambda: None)

    def track(self, running: Attempt) -> None:
        with self._lock:
            self._tracked[running.lease] = running

    def untrack(self, running: Attempt) -> None:
        with self._lock:
            self._tracked.pop(running.lease, None)

    def tracked(self) -> list[Attempt]:
        with self._lock:
            return list(self._tracked.values())

    def start(self) -> None:
        self._next_beat = self.clock() + self.interval
        self._thread = threading.Thread(target=self._run, name="rivet-guard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.tick_secs * 2))

    def _run(self) -> None:
        self._db = self.db_waits.slot()  # this thread's connection: the heartbeat's
        try:
            while not self._closed.wait(self.tick_secs):
                try:
                    self.tick()
                except Exception:
                    logs.event("guard_error", logging.ERROR, exc_info=True)
        finally:
            connections.close_all()

    def tick(self) -> None:
        """One round: heartbeat when due (or when a deadline lapsed), then check deadlines."""
        now = self.clock()
        active = [r for r in self.tracked() if r.stop_kind is None]
        beaten: list[Attempt] = []
        if active and (now >= self._next_beat or any(now >= r.lease_deadline for r in active)):
            beaten = active
            self.heartbeat(active)
            if any(self.clock() >= r.lease_deadline for r in active if r.stop_kind is None):
                # The answer came back after the lease it extended had run out: the worker was
                # paused (SIGSTOP) mid-heartbeat, so it says nothing about now. Ask again, so
                # a lease another worker took meanwhile is reported fenced, not left to lapse.
                self.heartbeat(active)
            self._next_beat = now + self.interval
        # Only a lease this round's heartbeat covered may be judged expired: a task tracked
        # meanwhile (a claim answered after a pause, its deadline already past) is heartbeated
        # first, at the next round, and so learns whether another worker took it.
        self.check_deadlines(self.clock(), heartbeated=beaten)

    def heartbeat(self, running: Iterable[Attempt]) -> bool:
        """Extend these leases; stop the ones the store no longer holds. False on an error."""
        running = [r for r in running if r.stop_kind is None]
        if not running:
            return True
        if self.failpoints.armed:  # the task list is built only when a point may fire
            self.failpoints.fire("before_heartbeat", tasks=[r.lease.task_id for r in running])
        started = self.clock()
        db = self._db
        db.begin("heartbeat")
        try:
            held = self.store.lease_extend([r.lease for r in running], self.lease_ttl)
        except Exception as exc:
            logs.event("heartbeat_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            close_old_connections()
            return False
        finally:
            db.end()
        cancelled: frozenset[int] = getattr(held, "cancelled", frozenset())
        for r in running:
            if r.lease.task_id in cancelled:
                r.lease_deadline = started + self.lease_ttl
                if r.stop(StopKind.CANCELLED, CANCELLED_SUFFIX, self.clock()):
                    self.notify(r)
            elif r.lease.task_id in held:
                r.lease_deadline = started + self.lease_ttl
            elif r.stop(StopKind.FENCED, "lease lost (fenced)", self.clock()):
                self.notify(r)
        return True

    def check_deadlines(self, now: float, heartbeated: Iterable[Attempt] | None = None) -> None:
        """Stop handlers past their job timeout or their local lease deadline.

        heartbeated: when given, only these may be stopped as expired (see ``tick``).
        """
        may_expire = None if heartbeated is None else {id(r) for r in heartbeated}
        for r in self.tracked():
            if r.stop_kind is not None:
                continue
            if r.job_deadline is not None and now >= r.job_deadline:
                stopped = r.stop(StopKind.TIMEOUT, f"timed out after {r.timeout_secs:g}s", now)
            elif now >= r.lease_deadline and (may_expire is None or id(r) in may_expire):
                stopped = r.stop(StopKind.EXPIRED, "lease deadline passed, no heartbeat", now)
            else:
                continue
            if stopped:
                self.notify(r)
