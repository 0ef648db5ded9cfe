"""The mutation matrix: each mutant removes or breaks one rule of who may run what, and when.

A mutant is one edit of the code that decides it:

- ``postgres``, ``sqlite``: the store's own query text with one clause edited, swapped into the
  store's query dict (``rivet.stores.postgres.QUERIES`` or ``rivet.stores.sqlite.QUERIES``);
- ``memory``: the memory store's Python (``rivet.stores.memoryleases``, ``rivet.stores.memory``)
  with one rule edited, the changed function compiled from the edited source and swapped in;
- ``effect``: the effect service's write (``effect_project.effects.fastpath.WRITE_SQL``);
- ``handler``: the chaos handler's effect call (``chaos_project.effect_kind``), edited the same
  way as the memory store.

A test build applies it, never production code: in-process by ``applied`` (the conformance
rows), or in a whole Django process by ``tests.mutation.settings`` (the workers of a chaos run:
the harness forks them) or ``tests.mutation.effect_settings`` (the effect service), whose app
applies the mutant named by ``RIVET_TEST_MUTATION`` when Django starts.

Every mutant checks that its guard is in the query exactly once before editing it, so a change
to the SQL that moves a guard breaks the matrix loudly instead of leaving a mutant that
mutates nothing. Run the matrix with ``make mutation`` (docs/chaos.md, "The mutation matrix").
"""

from __future__ import annotations

import importlib
import inspect
import os
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ENV = "RIVET_TEST_MUTATION"


@dataclass(frozen=True, kw_only=True)
class Mutation:
    name: str
    store: str
    """"postgres" or "sqlite" (whose query dict is edited), "memory", "effect" or "handler"."""
    query: str
    """The query's name; for the Python mutants "module:Qualified.name" (a function, or a
    method, whose source is edited); for ``effect`` "module:ATTRIBUTE" (a text)."""
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


def _m(name: str, store: str, query: str, guard: str, replacement: str, what: str) -> Mutation:
    return Mutation(
        name=name, store=store, query=query, guard=guard, replacement=replacement, what=what
    )


_PG_READY = " AND visible_at <= now()\nAND (claim_rank, id)"
_SQLITE_PICK = "claim_pick"
FASTPATH = "effect_project.effects.fastpath:WRITE_SQL"
LEASES = "rivet.stores.memoryleases"

#: The clauses of claim, settle, retry, requeue, heartbeat and cancel beyond the epoch guards
#: above, the memory store's rules, the effect service's dedup and the handler's effect check.
EXTRA = [
    # -- PostgreSQL: the claim ------------------------------------------------------------
    # FOR UPDATE without SKIP LOCKED is not among them: a claim then waits for a row another
    # claim locked and, READ COMMITTED, checks its WHERE again on the row that claim wrote (no
    # longer runnable): slower, never wrong, so no invariant can fail it.
    _m("postgres-claim-skip-locked", "postgres", "settle_claim", "FOR UPDATE SKIP LOCKED\n),",
       "\n),", "settle_claim: the claim's FOR UPDATE SKIP LOCKED (two claims that read one "
       "runnable row both lease it)"),
    _m("postgres-claim-visible", "postgres", "settle_claim", _PG_READY,
       "\nAND (claim_rank, id)", "settle_claim: the claim's visible_at <= now() (a live "
       "lease, a delay, a backoff)"),
    _m("postgres-claim-state", "postgres", "settle_claim",
       "WHERE state = 'pending' AND queue = %(queue)s::text",
       "WHERE queue = %(queue)s::text", "settle_claim: the claim's state = 'pending'"),
    _m("postgres-claim-bound", "postgres", "settle_claim",
       "(attempts >= max_attempts OR cancel_requested) AS doomed",
       "(attempts > max_attempts OR cancel_requested) AS doomed",
       "settle_claim: the attempts bound (off by one: max_attempts + 1 runs)"),
    _m("postgres-claim-bound-early", "postgres", "settle_claim",
       "(attempts >= max_attempts OR cancel_requested) AS doomed",
       "(attempts >= max_attempts - 1 OR cancel_requested) AS doomed",
       "settle_claim: the attempts bound (off by one: buried an attempt early)"),
    _m("postgres-claim-cancelled", "postgres", "settle_claim",
       "(attempts >= max_attempts OR cancel_requested) AS doomed",
       "(attempts >= max_attempts) AS doomed",
       "settle_claim: a cancelled task is buried, not leased, by a claim"),
    _m("postgres-claim-epoch-attempts", "postgres", "settle_claim",
       "lease_epoch = t.lease_epoch + 1,", "lease_epoch = t.attempts + 1,",
       "settle_claim: the claim's epoch, derived from attempts"),
    _m("postgres-claim-ttl", "postgres", "settle_claim",
       "visible_at = now() + make_interval(secs => %(ttl)s::float8),\nupdated_at",
       "visible_at = now(),\nupdated_at",
       "settle_claim: the claim's lease deadline (now + ttl)"),
    # -- PostgreSQL: settle and retry ------------------------------------------------------
    _m("postgres-retry-delay", "postgres", "settle_claim",
       "WHEN d.state = 'pending' THEN now() + make_interval(secs => d.delay)\nELSE",
       "WHEN d.state = 'pending' THEN now()\nELSE",
       "settle_claim: a retry's backoff (visible_at = now + delay)"),
    _m("postgres-retry-owner", "postgres", "settle_claim",
       "lease_owner = CASE WHEN d.state = 'pending' THEN NULL ELSE t.lease_owner END,",
       "lease_owner = t.lease_owner,", "settle_claim: a retry gives up the lease's owner"),
    _m("postgres-settle-done-cancelled", "postgres", "settle_claim",
       "WHEN d.state = 'done' AND NOT t.cancel_requested THEN d.result::jsonb ELSE t.result",
       "WHEN d.state = 'done' THEN d.result::jsonb ELSE t.result",
       "settle_claim: a cancelled task's result is not kept"),
    # -- PostgreSQL: heartbeat, requeue, cancel, sweep -------------------------------------
    _m("postgres-heartbeat-state", "postgres", "lease_extend",
       "WHERE t.id = held.task_id AND t.lease_epoch = held.epoch AND (t.state = 'pending') IS "
       "TRUE", "WHERE t.id = held.task_id AND t.lease_epoch = held.epoch",
       "lease_extend: the heartbeat's state guard"),
    _m("postgres-heartbeat-ttl", "postgres", "lease_extend",
       "SET visible_at = now() + make_interval(secs => %(ttl)s), updated_at = now()",
       "SET updated_at = now()", "lease_extend: the heartbeat's extension (now + ttl)"),
    _m("postgres-requeue-state", "postgres", "dead_requeue",
       "AND t.state = 'dead'\n", "\n", "dead_requeue: only a dead task"),
    _m("postgres-requeue-attempts", "postgres", "dead_requeue",
       "state = 'pending', attempts = 0,", "state = 'pending',",
       "dead_requeue: fresh attempts"),
    _m("postgres-requeue-epoch", "postgres", "dead_requeue",
       "lease_epoch = t.lease_epoch + 1,\n", "",
       "dead_requeue: a new epoch for the new life"),
    # cancel_mark's state guard is not among them: task_cancel reads the row FOR UPDATE first
    # (cancel_pick) and marks only a pending one, so without the guard nothing changes.
    _m("postgres-sweep-visible", "postgres", "sweep_pick",
       "AND queue = %(queue)s AND visible_at <= now()", "AND queue = %(queue)s",
       "sweep_pick: only a lapsed lease is swept"),
    # -- SQLite -----------------------------------------------------------------------------
    _m("sqlite-claim-visible", "sqlite", _SQLITE_PICK, "AND visible_at <= :now", "",
       "claim_pick: visible_at <= now"),
    _m("sqlite-claim-bound", "sqlite", _SQLITE_PICK,
       "(attempts >= max_attempts OR cancel_requested) AS doomed",
       "(attempts > max_attempts OR cancel_requested) AS doomed",
       "claim_pick: the attempts bound (off by one)"),
    _m("sqlite-claim-state", "sqlite", _SQLITE_PICK,
       "AND state = 'pending' AND visible_at <= :now", "AND visible_at <= :now",
       "claim_pick: the claim's state = 'pending' (claim_lease's own guard stays)"),
    _m("sqlite-claim-epoch-attempts", "sqlite", "claim_lease",
       "lease_epoch = lease_epoch + 1,", "lease_epoch = attempts + 1,",
       "claim_lease: the claim's epoch, derived from attempts"),
    _m("sqlite-retry-delay", "sqlite", "settle", "printf('%+.6f seconds', :delay)",
       "printf('%+.6f seconds', 0)", "settle: a retry's backoff"),
    _m("sqlite-heartbeat-state", "sqlite", "lease_extend", "WHERE state = 'pending'\nAND",
       "WHERE", "lease_extend: the heartbeat's state guard"),
    _m("sqlite-requeue-state", "sqlite", "dead_requeue", "AND state = 'dead'", "",
       "dead_requeue: only a dead task"),
    _m("sqlite-requeue-attempts", "sqlite", "dead_requeue", "attempts = 0,\n", "",
       "dead_requeue: fresh attempts"),
    _m("sqlite-requeue-epoch", "sqlite", "dead_requeue",
       "lease_epoch = lease_epoch + 1,\n", "", "dead_requeue: a new epoch for the new life"),
    # -- the memory store -------------------------------------------------------------------
    _m("memory-claim-visible", "memory", f"{LEASES}:MemoryLeases._claim",
       "and t.visible_at <= now\n", "\n", "_claim: visible_at <= now"),
    _m("memory-claim-bound", "memory", f"{LEASES}:is_doomed",
       "task.attempts >= task.max_attempts", "task.attempts > task.max_attempts",
       "is_doomed: the attempts bound (off by one)"),
    _m("memory-claim-epoch", "memory", f"{LEASES}:MemoryLeases._lease",
       "lease_epoch=task.lease_epoch + 1,", "lease_epoch=task.attempts + 1,",
       "_lease: the claim's epoch, derived from attempts"),
    _m("memory-settle-epoch", "memory", f"{LEASES}:MemoryLeases._held",
       " or task.lease_epoch != lease.epoch", "", "_held: a decision's epoch guard"),
    _m("memory-settle-state", "memory", f"{LEASES}:MemoryLeases._held",
       " or task.state != \"pending\"", "", "_held: a decision's state guard"),
    _m("memory-retry-delay", "memory", f"{LEASES}:MemoryLeases._settle_one",
       "visible_at=now + timedelta(seconds=max(decision.delay, 0.0)),", "visible_at=now,",
       "_settle_one: a retry's backoff"),
    _m("memory-requeue-epoch", "memory", "rivet.stores.memory:MemoryStore.dead_requeue",
       "lease_epoch=task.lease_epoch + 1,", "", "dead_requeue: a new epoch for the new life"),
    # -- the effect service and the handler ---------------------------------------------------
    _m("effect-dedup-read-then-write", "effect", FASTPATH,
       "SELECT answer.id, %(key)s, %(body)s::jsonb, answer.at FROM answer, dedup\n"
       "RETURNING (SELECT response_body FROM dedup);",
       "SELECT answer.id, %(key)s, %(body)s::jsonb, answer.at FROM answer\n"
       "WHERE NOT EXISTS (SELECT 1 FROM rivet_idempotency_record AS r WHERE r.key = %(key)s)\n"
       "RETURNING (SELECT text FROM answer);",
       "WRITE_SQL: the effect only if its dedup row went in (here: if a read found none)"),
    _m("handler-unconfirmed", "handler", "chaos_project.chaos_kinds:send_effect",
       "    except EffectRejected as exc:\n",
       "    except Exception:\n"
       "        return EffectResponse(status=201, body={}, replay=False)\n"
       "    except EffectRejected as exc:\n",
       "send_effect: the effect confirmed before the handler returns (here: an error taken for "
       "a success)"),
]  # fmt: skip

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
        *EXTRA,
    ]
}


PYTHON_STORES = ("memory", "handler")
#: Which mutants each harness can run: conformance for the stores, chaos for PostgreSQL, the
#: effect service and the handler.
CONFORMANCE_STORES = ("postgres", "sqlite", "memory")
CHAOS_STORES = ("postgres", "effect", "handler")


def _queries(store: str) -> dict[str, str]:
    if store == "postgres":
        from rivet.stores import postgres

        return postgres.QUERIES
    from rivet.stores import sqlite

    return sqlite.QUERIES


def _original_text(mutation: Mutation) -> str:
    if mutation.store in PYTHON_STORES:
        return textwrap.dedent(inspect.getsource(_python_target(mutation)[2]))
    if mutation.store == "effect":
        module, attribute = mutation.query.split(":")
        return getattr(importlib.import_module(module), attribute)
    return _queries(mutation.store)[mutation.query]


def _python_target(mutation: Mutation) -> tuple[object, str, Callable]:
    """(the object holding the function, its attribute name, the function)."""
    module_name, qualified = mutation.query.split(":")
    holder: object = importlib.import_module(module_name)
    *path, attribute = qualified.split(".")
    for part in path:
        holder = getattr(holder, part)
    return holder, attribute, inspect.getattr_static(holder, attribute)


def _compiled(mutation: Mutation, text: str) -> Callable:
    """The function of the mutated source, with the globals of its own module."""
    holder, attribute, original = _python_target(mutation)
    namespace: dict = {}
    exec(compile(text, f"<mutant {mutation.name}>", "exec"), original.__globals__, namespace)  # noqa: S102
    return namespace[attribute]


def _swap(mutation: Mutation, text: str | None) -> Callable[[], None]:
    """Put the mutant (``text``) in place; returns what puts the original back."""
    if mutation.store in PYTHON_STORES:
        holder, attribute, original = _python_target(mutation)
        setattr(holder, attribute, _compiled(mutation, text or ""))
        return lambda: setattr(holder, attribute, original)
    if mutation.store == "effect":
        module_name, attribute = mutation.query.split(":")
        module = importlib.import_module(module_name)
        before = getattr(module, attribute)
        setattr(module, attribute, text)
        return lambda: setattr(module, attribute, before)
    queries = _queries(mutation.store)
    before = queries[mutation.query]
    queries[mutation.query] = text or ""
    _forget_prepared_texts(mutation.store)

    def undo() -> None:
        queries[mutation.query] = before
        _forget_prepared_texts(mutation.store)

    return undo


def mutated_text(mutation: Mutation) -> str:
    """The mutant's text; refuses a guard that is not in the original exactly once."""
    text = _original_text(mutation)
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
    undo = _swap(mutation, mutated_text(mutation))
    try:
        yield mutation
    finally:
        undo()


def apply_from_environment() -> Mutation:
    """Apply the mutant ``RIVET_TEST_MUTATION`` names for the rest of this process."""
    name = os.environ.get(ENV, "")
    if name not in MUTATIONS:
        raise LookupError(f"{ENV}={name!r} names no mutant; one of: {', '.join(MUTATIONS)}")
    mutation = MUTATIONS[name]
    _swap(mutation, mutated_text(mutation))
    return mutation
