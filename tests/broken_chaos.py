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


BREAKS = {"keyless": break_key, "fenceless": break_fence}


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
