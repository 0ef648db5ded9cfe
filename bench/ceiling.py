"""The ceiling: the store's own claim and settle statement in a bare loop, with no worker.

Each of ``connections`` forked processes loops on the worker's own store call,
``task_settle_and_claim``: it acks every task the previous call claimed and claims up to
``batch`` more in the same call (one statement on PostgreSQL), until a call claims nothing and
has nothing left to ack. It calls the Store's methods (``resolve_store()``), so the ceiling
follows whatever statements the store uses: a faster settle makes both the worker and its
ceiling faster. No handler, no threads, no heartbeat, no logging: what is left is the round
trips and the statements, the most a worker claiming ``batch`` at a time on that many
connections could drain.
"""

from __future__ import annotations

import os
from pathlib import Path

from chaos_project.kit.pidfd import Child
from rivet.stores import resolve_store
from rivet.values import Ack, Lease, Settled


def drain(*, queue: str, batch: int, owner: str, lease_ttl: float) -> int:
    """Ack what the last call claimed and claim up to ``batch`` more, in one store call, until
    the queue has none; how many acked."""
    store = resolve_store()
    acked = 0
    acks: list[Ack] = []
    while True:
        flushed = store.task_settle_and_claim(
            acks, queues=[queue], owner=owner, limit=batch, lease_ttl=lease_ttl
        )
        acked += sum(1 for settled in flushed.settled if settled is Settled.ACKED)
        claimed = flushed.batch.claimed
        if not claimed:
            return acked
        acks = [Ack(lease=Lease(task_id=c.task_id, epoch=c.epoch, owner=c.owner)) for c in claimed]


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
