"""The mutation matrix: each mutant removes one guard from one statement of a SQL store.

A mutant is the store's own query text with one guard edited out, swapped into the store's
query dict (``rivet.stores.postgres.QUERIES`` or ``rivet.stores.sqlite.QUERIES``) by a test
build only: in-process by ``applied`` (the conformance rows), or in a whole Django process by
``tests.mutation.settings``, whose app applies the mutant named by ``RIVET_TEST_MUTATION`` when
Django starts (the chaos rows: the harness forks its workers, so they run the mutant too).
Production code has no switch for any of this.

Every mutant checks that its guard is in the query exactly once before editing it, so a change
to the SQL that moves a guard breaks the matrix loudly instead of leaving a mutant that
mutates nothing. Run the matrix with ``make mutation`` (docs/chaos.md, "The mutation matrix").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ENV = "RIVET_TEST_MUTATION"


@dataclass(frozen=True, kw_only=True)
class Mutation:
    name: str
    store: str
    """"postgres" or "sqlite": whose query dict is edited."""
    query: str
    guard: str
    """Text in the query, exactly once."""
    replacement: str
    what: str
    """The guard removed, as the docs' table says it."""


PG_SETTLE_WHERE = (
    "WHERE t.id = d.task_id AND t.lease_epoch = d.epoch AND (t.state = 'pending') IS TRUE"
)
SQLITE_SETTLE_WHERE = "WHERE id = :task_id AND lease_epoch = :epoch AND state = 'pending'"


def _pg_settle(name: str, unguarded: str, what: str) -> Mutation:
    return Mutation(
        name=name,
        store="postgres",
        query="settle_claim",
        guard=PG_SETTLE_WHERE,
        replacement=PG_SETTLE_WHERE.replace(
            "t.lease_epoch = d.epoch", f"(t.lease_epoch = d.epoch OR {unguarded})"
        ),
        what=what,
    )


def _sqlite_settle(name: str, unguarded: str, what: str) -> Mutation:
    return Mutation(
        name=name,
        store="sqlite",
        query="settle",
        guard=SQLITE_SETTLE_WHERE,
        replacement=SQLITE_SETTLE_WHERE.replace(
            "lease_epoch = :epoch", f"(lease_epoch = :epoch OR {unguarded})"
        ),
        what=what,
    )


MUTATIONS: dict[str, Mutation] = {
    m.name: m
    for m in [
        _pg_settle("postgres-ack", "d.state = 'done'", "settle_claim: an ack's epoch guard"),
        _pg_settle("postgres-retry", "d.state = 'pending'", "settle_claim: a retry's epoch guard"),
        _pg_settle("postgres-bury", "d.state = 'dead'", "settle_claim: a burial's epoch guard"),
        _pg_settle(
            "postgres-batch",
            "cardinality(%(task_ids)s::bigint[]) > 1",
            "settle_claim: every epoch guard, in a batch of two or more decisions",
        ),
        Mutation(
            name="postgres-settle-finished",
            store="postgres",
            query="settle_claim",
            guard=PG_SETTLE_WHERE,
            replacement=PG_SETTLE_WHERE.replace(" AND (t.state = 'pending') IS TRUE", ""),
            what="settle_claim: the state guard (a decision applied to a finished task)",
        ),
        Mutation(
            name="postgres-fence-record",
            store="postgres",
            query="settle_claim",
            guard="WHERE d.position NOT IN (SELECT position FROM applied)",
            replacement="WHERE false AND d.position NOT IN (SELECT position FROM applied)",
            what="settle_claim: the record of a refused write (rivet_fenced_write)",
        ),
        Mutation(
            name="postgres-cancel",
            store="postgres",
            query="settle_claim",
            guard="state = CASE WHEN t.cancel_requested THEN 'dead' ELSE d.state END,",
            replacement="state = d.state,",
            what="settle_claim: a cancelled task is buried whatever was decided",
        ),
        Mutation(
            name="postgres-heartbeat",
            store="postgres",
            query="lease_extend",
            guard=" AND t.lease_epoch = held.epoch",
            replacement="",
            what="lease_extend: the heartbeat's epoch guard",
        ),
        Mutation(
            name="postgres-claim-epoch",
            store="postgres",
            query="settle_claim",
            guard="lease_epoch = t.lease_epoch + 1,",
            replacement="lease_epoch = t.lease_epoch,",
            what="settle_claim: the claim's epoch increment",
        ),
        _sqlite_settle("sqlite-ack", ":state = 'done'", "settle: an ack's epoch guard"),
        _sqlite_settle("sqlite-retry", ":state = 'pending'", "settle: a retry's epoch guard"),
        _sqlite_settle("sqlite-bury", ":state = 'dead'", "settle: a burial's epoch guard"),
        Mutation(
            name="sqlite-settle-finished",
            store="sqlite",
            query="settle",
            guard=SQLITE_SETTLE_WHERE,
            replacement=SQLITE_SETTLE_WHERE.replace(" AND state = 'pending'", ""),
            what="settle: the state guard (a decision applied to a finished task)",
        ),
        Mutation(
            name="sqlite-fence-record",
            store="sqlite",
            query="fence",
            guard="INSERT INTO rivet_fenced_write (task_id, queue, op, owner, epoch, created_at)"
            "\nVALUES (",
            replacement="SELECT * FROM (SELECT",  # the same values, selected, not inserted
            what="fence: the record of a refused write (rivet_fenced_write)",
        ),
        Mutation(
            name="sqlite-cancel",
            store="sqlite",
            query="settle",
            guard="state = CASE WHEN cancel_requested THEN 'dead' ELSE :state END,",
            replacement="state = :state,",
            what="settle: a cancelled task is buried whatever was decided",
        ),
        Mutation(
            name="sqlite-heartbeat",
            store="sqlite",
            query="lease_extend",
            guard="AND (id, lease_epoch) IN (\nSELECT a.value, b.value FROM",
            replacement="AND id IN (\nSELECT a.value FROM",
            what="lease_extend: the heartbeat's epoch guard",
        ),
        Mutation(
            name="sqlite-claim-epoch",
            store="sqlite",
            query="claim_lease",
            guard="lease_epoch = lease_epoch + 1,",
            replacement="lease_epoch = lease_epoch,",
            what="claim_lease: the claim's epoch increment",
        ),
    ]
}


def _queries(store: str) -> dict[str, str]:
    if store == "postgres":
        from rivet.stores import postgres

        return postgres.QUERIES
    from rivet.stores import sqlite

    return sqlite.QUERIES


def mutated_text(mutation: Mutation) -> str:
    """The mutant's query text; refuses a guard that is not in the query exactly once."""
    text = _queries(mutation.store)[mutation.query]
    found = text.count(mutation.guard)
    if found != 1:
        raise LookupError(
            f"mutant {mutation.name}: its guard {mutation.guard!r} is in the {mutation.store} "
            f"query {mutation.query!r} {found} times, not once; update tests/mutation"
        )
    return text.replace(mutation.guard, mutation.replacement)


def _forget_prepared_texts(store: str) -> None:
    if store == "postgres":
        from rivet.stores import postgres

        postgres.settle_claim_text.cache_clear()


@contextmanager
def applied(name: str) -> Iterator[Mutation]:
    """The mutant ``name`` in this process for the duration, then the real query again."""
    mutation = MUTATIONS[name]
    queries = _queries(mutation.store)
    original = queries[mutation.query]
    queries[mutation.query] = mutated_text(mutation)
    _forget_prepared_texts(mutation.store)
    try:
        yield mutation
    finally:
        queries[mutation.query] = original
        _forget_prepared_texts(mutation.store)


def apply_from_environment() -> Mutation:
    """Apply the mutant ``RIVET_TEST_MUTATION`` names for the rest of this process."""
    name = os.environ.get(ENV, "")
    if name not in MUTATIONS:
        raise LookupError(f"{ENV}={name!r} names no mutant; one of: {', '.join(MUTATIONS)}")
    mutation = MUTATIONS[name]
    _queries(mutation.store)[mutation.query] = mutated_text(mutation)
    _forget_prepared_texts(mutation.store)
    return mutation
