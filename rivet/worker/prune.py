"""Retention: delete done tasks and fenced-write records older than a retention, in small batches.

``prune`` is what ``manage.py rivet_prune`` runs once; ``Pruner`` is the thread a worker with a
retention (``--retention`` / ``RIVET['RETENTION']``) runs beside its loop, pruning once at start
and then every ``PRUNE_EVERY_SECS``. Each batch is one short statement, its own transaction,
deleting at most ``batch_size`` rows and skipping rows another transaction holds, so a prune
never holds many locks for long and never waits on a worker.

Caveat: a done task's row is what makes a repeated enqueue with its idempotency key a
duplicate. Once pruned, the same key enqueues a new task (as after a DLQ purge). Keep the
retention longer than any producer may retry an enqueue.
"""

from __future__ import annotations

from collections.abc import Callable

from rivet import logs
from rivet.background import Periodic
from rivet.stores.base import Store
from rivet.values import Pruned

KEY_CAVEAT = (
    "Pruning a done task releases its idempotency key: an enqueue with the same key afterwards "
    "creates a new task (as after a DLQ purge). Keep the retention longer than any producer "
    "may retry an enqueue."
)


def prune(
    store: Store,
    *,
    older_than: float,
    batch_size: int = 1000,
    queue: str | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Pruned:
    """Delete done tasks, then fenced-write records, older than ``older_than`` seconds.

    Batch after batch of at most ``batch_size`` rows, until a batch comes back short or
    ``stopping()`` says to stop. Returns how many rows of each went.
    """
    tasks = _batches(store.task_prune, older_than, batch_size, queue, stopping)
    fenced = _batches(store.fenced_prune, older_than, batch_size, queue, stopping)
    return Pruned(tasks=tasks, fenced=fenced)


def _batches(
    verb: Callable[[float, int, str | None], int],
    older_than: float,
    batch_size: int,
    queue: str | None,
    stopping: Callable[[], bool],
) -> int:
    total = 0
    while not stopping():
        deleted = verb(older_than, batch_size, queue)
        total += deleted
        if deleted < batch_size:
            break
    return total


class Pruner(Periodic):
    """A daemon thread that prunes at start and then every ``every`` seconds until closed."""

    thread_name = "rivet-prune"
    doing = "retention pass"

    def __init__(
        self, *, store: Store, older_than: float, every: float, batch_size: int, owner: str = ""
    ) -> None:
        super().__init__()
        self.store = store
        self.older_than = older_than
        self.every = every
        self.batch_size = batch_size
        self.owner = owner

    def _step(self) -> float:
        self.prune_once()
        return self.every

    def prune_once(self) -> Pruned | None:
        """One prune round on this thread's connection; a failure is logged, never raised."""
        pruned = self._guarded(
            "prune_failed",
            lambda: prune(
                self.store,
                older_than=self.older_than,
                batch_size=self.batch_size,
                stopping=self._done.is_set,
            ),
        )
        if pruned is None:
            return None
        if pruned.tasks or pruned.fenced:
            logs.event("pruned", owner=self.owner, tasks=pruned.tasks, fenced=pruned.fenced)
        return pruned
