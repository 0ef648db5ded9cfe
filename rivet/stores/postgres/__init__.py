"""The PostgreSQL store, in three parts beside its statements (``postgres.sql``, read by
``queries``):

- ``store``: ``PostgresStore``, what the store does: a flush as one statement that settles and
  claims, the enqueue inside or outside the caller's transaction, the LISTEN wake-up and its
  gate, the counts;
- ``wire``: how its statements travel fast (array literals, server-side binding and prepared
  statements, the direct libpq enqueue), each with a plain twin of the same meaning
  (``PostgresStore(fast_paths=False)``, ``RIVET_POSTGRES_PLAIN=1``);
- ``session``: the state it keeps in a server session (the worker's planner settings, the
  waiter locks), giving it back, and finding a transaction pooler that would leak it.

The names below are the ones other modules use; each part's own are in it.
"""

from rivet.stores.postgres.queries import QUERIES
from rivet.stores.postgres.session import (
    _PROBED,
    POOLER_NOTE,
    end_worker_session,
    keeps_session,
    transaction_pooler_between,
    unsorted,
)
from rivet.stores.postgres.store import NO_CLAIM, FlushRows, PostgresStore, claim_order
from rivet.stores.postgres.wire import (
    DIRECT_ENQUEUE,
    SETTLE_COLUMNS,
    array_text,
    settle_claim_text,
)

__all__ = [
    "DIRECT_ENQUEUE",
    "NO_CLAIM",
    "POOLER_NOTE",
    "QUERIES",
    "SETTLE_COLUMNS",
    "_PROBED",
    "FlushRows",
    "PostgresStore",
    "array_text",
    "claim_order",
    "end_worker_session",
    "keeps_session",
    "settle_claim_text",
    "transaction_pooler_between",
    "unsorted",
]
