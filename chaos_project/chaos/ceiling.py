"""The ceiling: the store's own claim and settle statements in a bare loop, with no worker.

Each of ``connections`` forked processes loops: ``task_claim(limit=batch)`` then
``task_settle([Ack(...) for each claimed task])``, until a claim comes back empty. It calls the
Store's methods (``resolve_store()``), so the ceiling follows whatever statements the store
uses: a faster settle makes both the worker and its ceiling faster. No handler, no threads, no
heartbeat, no logging: what is left is the round trips and the statements, the most a worker
with that batch size and that many connections could drain.
"""

from __future__ import annotations

import os
from pathlib import Path

from chaos_project.chaos.pidfd import Child
from rivet.stores import resolve_store
from rivet.values import Ack, Lease


def drain(*, queue: str, batch: int, owner: str, lease_ttl: float) -> int:
    """Claim up to ``batch`` tasks and ack them all, until the queue has none; how many acked."""
    store = resolve_store()
    acked = 0
    while True:
        claimed = store.task_claim(
            queues=[queue], owner=owner, limit=batch, lease_ttl=lease_ttl
        ).claimed
        if not claimed:
            return acked
        settled = store.task_settle(
            [Ack(lease=Lease(task_id=c.task_id, epoch=c.epoch, owner=c.owner)) for c in claimed]
        )
        acked += len(settled)


def start(
    *, connections: int, queue: str, batch: int, lease_ttl: float, log_dir: Path
) -> list[Child]:
    """Fork ``connections`` processes, each draining the queue with its own connection."""

    def one(n: int) -> Child:
        def main() -> int:
            acked = drain(queue=queue, batch=batch, owner=f"ceiling-{n}", lease_ttl=lease_ttl)
            print(f"ceiling-{n}: acked {acked}", flush=True)
            return 0

        return Child(
            env=dict(os.environ),
            log_path=log_dir / f"ceiling-{connections}x{batch}-{n}.log",
            main=main,
        )

    return [one(n) for n in range(connections)]
