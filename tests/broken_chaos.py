"""``rivet_chaos`` with a deliberately broken worker: the harness's own tests, nothing else.

    python tests/broken_chaos.py BREAK [rivet_chaos options]

The break is applied in the harness process before the run; its workers are forked from it
and inherit the break. Nothing here is importable from rivet or the host project.

- ``keyless``: the effect goes out under a new key on every delivery, so the effect service
  cannot tell a redelivery from new work (the idempotency key is missing in effect). S1 must
  fail: the verifier knows each effect's task from its body, not from the key.
- ``fenceless``: the store ignores the lease epoch (heartbeats and settle writes, flushed
  alone or with a claim, carry whatever epoch the task has now), so a woken zombie's stale
  write goes through. F2 must fail: a zombie whose task was claimed again had no refused
  write recorded.
- ``tickless``: the scheduler enqueues each tick without its key (``rivet.tick:...``). Run with
  ``--schedules N``. A pass locks its schedules and moves their watermark in the same commit as
  the ticks, so even without the key two passes rarely enqueue one tick; T1 is what would see it.
- ``tickless-unlocked``: the same, and a pass reads its schedules without locking them
  (``FOR UPDATE SKIP LOCKED`` gone: the lock only saves work, the key is the guarantee), as a
  scheduler that assumes it runs alone (a Celery beat run twice). Every worker's scheduler
  wakes at the same tick, so passes overlap and enqueue one tick more than once: T1 must fail.
- ``tick-unlocked``: the lock gone, the key kept: T1 must hold (the key absorbs the repeats).
- ``unbounded``: the workers put no idle bound on the transactions they open, whatever their
  ``--idle-in-transaction-timeout-secs`` says. Run with ``--faults scheduler-stall``: the
  stalled pass keeps its schedules' rows until it is continued, so they do not fire again
  while it is stopped, and T2 must fail.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def break_key() -> None:
    import chaos_project.effect_kind as effect_kind

    effect_kind.effect_key = lambda context: f"keyless-{uuid.uuid4().hex}"


def break_fence() -> None:
    from django.db import connections

    from rivet.stores.postgres import PostgresStore

    def now_held(store: PostgresStore, lease):
        with connections[store.using].cursor() as cursor:
            cursor.execute("SELECT lease_epoch FROM rivet_task WHERE id = %s", [lease.task_id])
            row = cursor.fetchone()
        return dataclasses.replace(lease, epoch=row[0]) if row else lease

    from rivet.values import Fence

    def unfenced(store: PostgresStore, decisions):
        return [
            d if isinstance(d, Fence) else dataclasses.replace(d, lease=now_held(store, d.lease))
            for d in decisions
        ]

    extend, settle = PostgresStore.lease_extend, PostgresStore.task_settle
    flush = PostgresStore.task_settle_and_claim
    PostgresStore.lease_extend = lambda self, leases, ttl: extend(
        self, [now_held(self, lease) for lease in leases], ttl
    )
    PostgresStore.task_settle = lambda self, decisions: settle(self, unfenced(self, decisions))
    PostgresStore.task_settle_and_claim = lambda self, decisions, **claim: flush(
        self, unfenced(self, decisions), **claim
    )


def break_tick_key() -> None:
    from rivet.schedules import scheduler

    spec = scheduler._spec
    scheduler._spec = lambda row, tick: dataclasses.replace(spec(row, tick), idem_key=None)


def break_tick_lock() -> None:
    from django.db.models import QuerySet

    from rivet.schedules.models import Schedule

    lock = QuerySet.select_for_update

    def select_for_update(self, *args, **kwargs):
        return self if self.model is Schedule else lock(self, *args, **kwargs)

    QuerySet.select_for_update = select_for_update


def break_tick_key_and_lock() -> None:
    break_tick_key()
    break_tick_lock()


def break_idle_bound() -> None:
    from rivet.stores import idle

    idle.idle_timeout_secs = lambda: None


BREAKS = {
    "keyless": break_key,
    "fenceless": break_fence,
    "tickless": break_tick_key,
    "tick-unlocked": break_tick_lock,
    "tickless-unlocked": break_tick_key_and_lock,
    "unbounded": break_idle_bound,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in BREAKS:
        sys.exit(f"usage: broken_chaos.py {{{','.join(BREAKS)}}} [rivet_chaos options]")
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chaos_project.settings")
    import django

    django.setup()
    BREAKS[sys.argv[1]]()
    from django.core.management import execute_from_command_line

    execute_from_command_line([str(REPO / "manage.py"), "rivet_chaos", *sys.argv[2:]])


if __name__ == "__main__":
    main()
