"""The scheduler every worker runs: enqueue each due tick once, with no leader.

A pass, in one transaction on the queue's database: lock up to ``batch_size`` enabled schedules
whose ``next_tick_at`` has come (``FOR UPDATE SKIP LOCKED``: two workers never hold one row, and
neither waits for the other), work out each one's due ticks from its watermark by its missed-tick
policy, enqueue one task per tick, and move the watermark. Every tick's task carries the
idempotency key ``rivet.tick:<schedule>:<UTC instant>`` (``rivet.schedules.cron.tick_key``), so
a tick that two passes both find due is one task: the second enqueue is a duplicate. That is
what makes a tick fire once on every store, whatever the locking does; the lock only saves the
work. On PostgreSQL and SQLite the enqueue and the watermark commit together, so a worker that
dies mid-pass leaves the ticks due for the next pass, and none is lost (a tick whose queue lives
on another database commits there first; its key makes the next pass's enqueue a
duplicate). ``now`` is the
database's clock, as for every other decision in rivet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Min
from django.db.models.functions import Now
from django.utils import timezone

from rivet import failpoints, logs
from rivet.background import Periodic
from rivet.conf import rivet_settings
from rivet.errors import IdempotencyMismatch, InvalidInput
from rivet.jobs import task_spec
from rivet.routing import alias_for_queue
from rivet.schedules.cron import check_cron, check_timezone, due_ticks, next_tick, tick_key
from rivet.schedules.models import Schedule
from rivet.schedules.values import SCHEDULED_AT, Missed, Source
from rivet.stores import store_for_alias
from rivet.stores.base import Store
from rivet.stores.idle import bounded_atomic
from rivet.values import EnqueueResult, TaskSpec

__all__ = ["Pass", "Scheduler", "run_due", "sync_code_schedules"]

#: Fields a worker copies from a code declaration onto its row.
DEFINITION_FIELDS = ("kind", "cron", "timezone", "queue", "priority", "payload", "missed")
#: A pass never follows another sooner: a worker clock ahead of the database's would spin.
MIN_PAUSE_SECS = 0.02
#: Most ticks one pass enqueues (but all of one schedule's): a catch-up after a long stop is
#: many short transactions, and a worker told to stop waits for one of them at most.
MAX_TICKS_PER_PASS = 5_000
#: How soon a pass looks again at due schedules another pass held: long enough not to spin on a
#: stalled pass's rows, short enough that the usual holder (a pass that commits within
#: milliseconds) costs the next tick nothing, and every worker races for it alike.
HELD_RETRY_SECS = 0.25
#: The failpoint a pass reaches once it holds its schedules' rows (rivet.failpoints).
SCHEDULER_POINT = "scheduler_pass_locked"


@dataclass(frozen=True, kw_only=True)
class Pass:
    """What one scheduler pass did."""

    schedules: int = 0  # due schedules it locked
    enqueued: int = 0  # ticks enqueued as new tasks
    duplicates: int = 0  # ticks whose task already existed (another pass enqueued them)
    skipped: int = 0  # ticks the missed-tick policy skipped
    failed: int = 0  # schedules whose ticks could not be enqueued (last_error says why)
    full: bool = False  # more schedules may be due now: pass again at once
    held_elsewhere: bool = False  # due schedules exist, all locked by other passes


def run_due(store: Store, *, alias: str, batch_size: int = 500) -> Pass:
    """One pass: enqueue the due ticks of up to ``batch_size`` schedules; see the module doc.

    The ticks of every schedule of the pass go in one enqueue of many tasks, and schedules
    left in the same state (every one-second schedule, say) are saved by one UPDATE.
    """
    with bounded_atomic(alias):
        rows = list(
            Schedule.objects.using(alias)
            .select_for_update(skip_locked=True)
            .filter(enabled=True, next_tick_at__lte=Now())
            .annotate(db_now=Now())
            .order_by("next_tick_at")[:batch_size]
        )
        if not rows:  # none due, or every due one held by another pass
            held = Schedule.objects.using(alias).filter(enabled=True, next_tick_at__lte=Now())
            return Pass(held_elsewhere=held.exists())
        # The rows are locked until the commit: a process stopped from here on holds them, for
        # the idle bound at most (rivet.stores.idle). The chaos harness stops one here.
        failpoints.active().fire(SCHEDULER_POINT, schedules=[row.name for row in rows])
        plans = _plans(rows)
        specs = [spec for plan in plans for spec in plan.specs]
        results = iter(_enqueue(store, alias, specs))
        counts = {"enqueued": 0, "duplicates": 0, "skipped": 0, "failed": 0}
        for plan in plans:
            counts["failed"] += plan.error is not None
            counts["skipped"] += plan.state["skipped"]
            for _ in plan.specs:
                result = next(results)
                if result is not None:
                    counts["duplicates" if result.duplicate else "enqueued"] += 1
        _save(alias, plans)
    full = len(plans) < len(rows) or len(rows) >= batch_size
    return Pass(
        schedules=len(plans),
        enqueued=counts["enqueued"],
        duplicates=counts["duplicates"],
        skipped=counts["skipped"],
        failed=counts["failed"],
        full=full,
    )


def _plans(rows: list[Any]) -> list[Plan]:
    """The plans of the rows, in order, until their ticks reach MAX_TICKS_PER_PASS.

    The rows left out stay due (the commit releases their locks): the next pass takes them,
    so one transaction never grows with a long catch-up.
    """
    plans: list[Plan] = []
    ticks = 0
    for row in rows:
        if plans and ticks >= MAX_TICKS_PER_PASS:
            break
        plans.append(_plan(row))
        ticks += len(plans[-1].specs)
    return plans


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a pass does for one schedule: the tasks to enqueue and the state to save."""

    pk: int
    specs: list[TaskSpec]
    #: last_tick_at, next_tick_at, skipped (to add) and last_error after the pass.
    state: dict[str, Any]
    error: str | None = None


def _plan(row: Any) -> Plan:
    """The due ticks of one schedule, by its policy, as task specs; or why there are none."""
    watermark = max(row.since, row.last_tick_at or row.since)
    keep = 1 if row.missed == Missed.LATEST else row.max_missed
    try:
        zone = check_timezone(row.timezone)
        due = due_ticks(check_cron(row.cron), zone, after=watermark, now=row.db_now, keep=keep)
        specs = [_spec(row, tick) for tick in due.ticks]
    except InvalidInput as exc:  # the schedule's fault (unknown kind, a bad expression)
        # The watermark stays, so the ticks stay owed: looked at again at the next tick, or
        # (a bad expression or zone) when an edit fixes it. A database error is not caught:
        # the pass rolls back whole, as after a crash.
        error = f"{type(exc).__name__}: {exc}"
        logs.event("schedule_failed", logging.WARNING, schedule=row.name, error=error)
        state = {"last_tick_at": row.last_tick_at, "next_tick_at": _after(row, row.db_now)}
        return Plan(
            pk=row.pk, specs=[], state={**state, "skipped": 0, "last_error": error}, error=error
        )
    state = {"last_tick_at": due.last or row.last_tick_at, "next_tick_at": due.next}
    return Plan(pk=row.pk, specs=specs, state={**state, "skipped": due.skipped, "last_error": ""})


def _save(alias: str, plans: list[Plan]) -> None:
    """One UPDATE per distinct new state (one in all for schedules that tick together)."""
    groups: dict[tuple, list[int]] = {}
    for plan in plans:
        groups.setdefault(tuple(plan.state.items()), []).append(plan.pk)
    for items, pks in groups.items():
        state = dict(items)
        skipped = state.pop("skipped")
        Schedule.objects.using(alias).filter(pk__in=pks).update(
            **state, skipped_ticks=F("skipped_ticks") + skipped, updated_at=Now()
        )


def _after(row: Any, instant: datetime) -> datetime | None:
    """The first tick after ``instant``; None for an expression or zone that is not valid."""
    try:
        return next_tick(check_cron(row.cron), check_timezone(row.timezone), instant)
    except InvalidInput:
        return None


def _spec(row: Any, tick: datetime) -> TaskSpec:
    return task_spec(
        row.kind,
        {**row.payload, SCHEDULED_AT: tick.isoformat()},
        queue=row.queue or None,
        priority=row.priority,
        idem_key=tick_key(row.name, tick),
    )


def _enqueue(store: Store, alias: str, specs: list[TaskSpec]) -> list[EnqueueResult | None]:
    """What each enqueue did, in order; None for a tick whose key names other work.

    With the schedules on RIVET['DATABASE_ALIAS'], a tick whose queue lives on another database
    (``rivet.routing``) is enqueued there, and commits there before the watermark does: a pass
    that dies between the two finds the tick a duplicate (its key) next time, so it still fires
    once. Schedules kept on another alias enqueue their ticks on it.
    """
    routed = store.using == alias == rivet_settings.DATABASE_ALIAS
    targets: dict[str, list[int]] = {}
    for index, spec in enumerate(specs):
        target = alias_for_queue(spec.queue) if routed else alias
        targets.setdefault(target, []).append(index)
    results: list[EnqueueResult | None] = [None] * len(specs)
    for target, indexes in targets.items():
        there = store if target == alias else store_for_alias(target)
        done = _enqueue_on(there, target, [specs[index] for index in indexes])
        for index, result in zip(indexes, done, strict=True):
            results[index] = result
    return results


def _enqueue_on(store: Store, alias: str, specs: list[TaskSpec]) -> list[EnqueueResult | None]:
    """The ticks' enqueues on one database, all in one statement when none names other work.

    A key that names other work means the tick was enqueued before the schedule was edited:
    it fired, so it is not enqueued again.
    """
    try:
        with bounded_atomic(alias):
            return list(store.task_enqueue_many(specs))
    except IdempotencyMismatch:
        pass
    results: list[EnqueueResult | None] = []
    for spec in specs:
        try:
            with bounded_atomic(alias):
                results.append(store.task_enqueue(spec))
        except IdempotencyMismatch:
            results.append(None)
    return results


def sync_code_schedules(definitions: list[dict[str, Any]], *, alias: str) -> int:
    """Write the schedules declared in code to the table; returns how many rows changed.

    A new one starts owing ticks from now. An existing one takes the code's definition; a
    changed expression or zone restarts it from now. Pause state is the operator's: kept.
    A database schedule of the same name is left alone (logged).
    """
    names = [d["name"] for d in definitions]
    rows = {s.name: s for s in Schedule.objects.using(alias).filter(name__in=names)}
    new = [Schedule(source=Source.CODE, **_fields(d)) for d in definitions if d["name"] not in rows]
    Schedule.objects.using(alias).bulk_create(new, ignore_conflicts=True)
    changed = len(new)
    for definition in definitions:
        row = rows.get(definition["name"])
        if row is not None and _update_from_code(row, definition, alias):
            changed += 1
    return changed


def _fields(definition: dict[str, Any]) -> dict[str, Any]:
    fields = {name: definition[name] for name in (*DEFINITION_FIELDS, "name", "max_missed")}
    fields["queue"] = fields["queue"] or ""
    return fields


def _update_from_code(row: Schedule, definition: dict[str, Any], alias: str) -> bool:
    if row.source != Source.CODE:
        logs.event(
            "schedule_name_taken",
            logging.WARNING,
            schedule=row.name,
            note="a database schedule has this name; the code's schedule is not used",
        )
        return False
    wanted = _fields(definition)
    diff = {k: v for k, v in wanted.items() if getattr(row, k) != v}
    if not diff:
        return False
    updates: dict[str, Any] = {**diff, "updated_at": Now()}
    if ("cron" in diff or "timezone" in diff) and row.enabled:
        updates.update(since=Now(), next_tick_at=Now())
    Schedule.objects.using(alias).filter(pk=row.pk, source=Source.CODE).update(**updates)
    return True


class Scheduler(Periodic):
    """A daemon thread beside a worker's loop: passes until closed.

    Sleeps until the earliest next tick (at most ``every`` seconds, so new and edited
    schedules are seen), and passes again at once while passes come back full.
    """

    thread_name = "rivet-schedule"
    doing = "schedule pass"

    def __init__(
        self,
        *,
        store: Store,
        alias: str,
        definitions: Callable[[], list[dict[str, Any]]],
        every: float = 1.0,
        batch_size: int = 500,
        owner: str = "",
    ) -> None:
        super().__init__()
        self.store = store
        self.alias = alias
        self.definitions = definitions
        self.every = every
        self.batch_size = batch_size
        self.owner = owner
        self._synced = False

    def _step(self) -> float | None:
        done, pause = self.pass_once()
        return pause if done is None or not done.full else None

    def pass_once(self) -> tuple[Pass | None, float]:
        """Sync the code's schedules (once), pass, and say how long to sleep before the next.

        A failure is logged, never raised (the pass is None). The thread's connection goes
        back to the pool before it sleeps: it holds one only while it works.
        """
        result = self._guarded("schedule_pass_failed", self._pass)
        if result is None:
            return None, self.every
        done, pause = result
        if done.enqueued or done.skipped:
            logs.event(
                "schedule_ticks",
                logging.DEBUG,
                owner=self.owner,
                enqueued=done.enqueued,
                skipped=done.skipped,
                duplicates=done.duplicates,
            )
        return done, pause

    def _pass(self) -> tuple[Pass, float]:
        if not self._synced:
            sync_code_schedules(self.definitions(), alias=self.alias)
            self._synced = True
        done = run_due(self.store, alias=self.alias, batch_size=self.batch_size)
        return done, self._pause(held_elsewhere=done.held_elsewhere)

    def _pause(self, *, held_elsewhere: bool = False) -> float:
        """Seconds until the earliest next tick, within [MIN_PAUSE_SECS, every].

        Due schedules that another pass holds (``held_elsewhere``), possibly a stalled one, are
        looked at again after HELD_RETRY_SECS, not at once and over and over until that pass
        ends.
        """
        soonest = (
            Schedule.objects.using(self.alias)
            .filter(enabled=True)
            .aggregate(soonest=Min("next_tick_at"))["soonest"]
        )
        if soonest is None:
            return self.every
        wait = (soonest - timezone.now()).total_seconds()
        if held_elsewhere:
            return min(HELD_RETRY_SECS, self.every)
        return min(max(wait, MIN_PAUSE_SECS), self.every)
