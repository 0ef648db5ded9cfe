"""SqlStore: the Store semantics written once for every SQL dialect rivet runs on.

Row mapping, finding the task a key already names, the claim-and-bury loop, settling
decisions, cancelling and driver-error translation live here (decisions and outcomes as rows
in ``rivet.stores.sqlrows``). A dialect (``rivet.stores.sqlite``, ``rivet.stores.postgres``)
keeps what differs: its connection and transaction handling (``_reading``/``_writing``), its
named queries (a ``.sql`` file), how a batch of decisions reaches the database
(``_settle_rows``), and how it passes lists and times.
The memory store mirrors this module operation by operation; ``rivet.conformance`` is the proof.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from django.db import Error as DjangoDatabaseError
from django.db import IntegrityError, InterfaceError, OperationalError

from rivet.conf import aging_step, rivet_settings
from rivet.errors import StoreError, StoreUnavailable
from rivet.stores.base import ClaimFailed, Store
from rivet.stores.claim import ClaimPlan, ClaimStatement, PartlyCommitted, walk_claim
from rivet.stores.jsontext import json_text, json_value
from rivet.stores.sqlrows import (
    burial_rows,
    outcomes,
    rows_of,
    same_work,
    settle_row,
)
from rivet.values import (
    CANCELLED_SUFFIX,
    DONE_COUNT_LIMIT,
    Bury,
    CancelOutcome,
    ClaimBatch,
    Claimed,
    Decision,
    EnqueueResult,
    Flushed,
    Held,
    Lease,
    Pruned,
    QueueStats,
    Settled,
    TaskRecord,
    TaskSpec,
    ending,
    frozen_instance,
)

#: How often an enqueue re-inserts after its conflicting row vanished (acked or purged).
INSERT_TRIES = 3
TIME_COLUMNS = ("visible_at", "created_at", "updated_at")


class SqlStore(Store):
    """The shared half of a SQL store; subclasses supply the dialect half."""

    joins_django_transaction = True
    queries: dict[str, str] = {}
    #: Exceptions of the dialect's driver, translated into StoreError at the boundary.
    driver_errors: tuple[type[Exception], ...] = ()
    #: Driver errors that mean "unreachable, or the connection dropped": StoreUnavailable.
    transient_errors: tuple[type[Exception], ...] = ()
    using: str
    #: A queue's done tasks counted before the overview may take the database's estimate.
    done_count_limit = DONE_COUNT_LIMIT

    # -- the dialect half --------------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Any]:
        """A cursor for reads, in the caller's transaction if there is one."""

    @abstractmethod
    def _writing(self) -> AbstractContextManager[Any]:
        """A cursor in a write transaction (a savepoint inside the caller's atomic block)."""

    def _one_statement(self) -> AbstractContextManager[Any]:
        """A cursor for a write that is one statement (a dialect may skip the transaction)."""
        return self._writing()

    @abstractmethod
    def _settle_rows(self, cursor: Any, rows: list[dict[str, Any]]) -> dict[int, bool]:
        """Apply settle rows, fencing stale ones; {position: cancelled} of the rows applied."""

    @abstractmethod
    def _claim_rows(self, cursor: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Lease the next runnable tasks of a queue; rows in claim order, doomed ones flagged
        (``doomed``, with ``lease_epoch``, ``last_error`` and ``cancel_requested``: not leased,
        for the caller to bury)."""

    def _ids(self, ids: Sequence[int]) -> Any:
        """A list of ids as the dialect's queries take it."""
        return self._list(ids)

    def _list(self, values: Sequence[Any]) -> Any:
        """A list (of ids, of names) as the dialect's queries take it."""
        return list(values)

    def _at(self, moment: datetime | None) -> Any:
        """An explicit time (run_at) as the dialect's queries take it."""
        return moment

    def _time(self, value: Any) -> datetime:
        """A stored timestamp as an aware datetime."""
        return value

    def _claim_params(self, cursor: Any, owner: str, lease_ttl: float) -> dict[str, Any]:
        return {"owner": owner, "ttl": float(lease_ttl)}

    def _oldest_ready_age(self, row: dict[str, Any]) -> float | None:
        """Take the oldest ready age (seconds) out of a queue_overview row."""
        age = row.pop("oldest_ready_age_secs")
        return None if age is None else float(age)

    def _error_message(self, exc: Exception) -> str:
        return str(exc)

    def _after_error(self) -> None:
        """Called after a driver error, e.g. to let Django reconnect next time."""

    # -- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _translated(self, op: str) -> Iterator[None]:
        try:
            yield
        except (DjangoDatabaseError, *self.driver_errors) as exc:  # type: ignore[misc]
            raise self._store_error(op, exc) from exc

    def _store_error(self, op: str, exc: Exception) -> StoreError:
        """A driver error as the StoreError the job API and the worker see."""
        self._after_error()
        unreachable = isinstance(exc, (OperationalError, InterfaceError, *self.transient_errors))
        error = (StoreUnavailable if unreachable else StoreError)(
            f"{self.name} store on database alias {self.using!r} failed in {op}: "
            f"{self._error_message(exc)}"
        )
        error.__cause__ = exc
        return error

    #: A dialect's own parameters every query may use, as (parameter, RIVET setting).
    DIALECT_SETTINGS: tuple[tuple[str, str], ...] = ()

    def _common_params(self) -> dict[str, Any]:
        """Parameters every query may use: how many errors a task keeps, the seconds of waiting
        worth one priority point (claim_rank), and the dialect's own; the settings read at once
        (every statement sends them)."""
        errors_kept, aging, *own = rivet_settings.values(
            "MAX_ERRORS_KEPT",
            "PRIORITY_AGING_SECS",
            *[setting for _, setting in self.DIALECT_SETTINGS],
        )
        params = {"errors_kept": errors_kept, "aging_secs": aging_step(aging)}
        for (param, _), value in zip(self.DIALECT_SETTINGS, own, strict=True):
            params[param] = value
        return params

    def _rows(self, cursor: Any, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        cursor.execute(self.queries[query], {**self._common_params(), **params})
        return rows_of(cursor)

    def _record(self, row: dict[str, Any]) -> TaskRecord:
        fields = {**row, "payload": json_value(row["payload"]), "result": json_value(row["result"])}
        fields.update({column: self._time(row[column]) for column in TIME_COLUMNS})
        fields["cancel_requested"] = bool(row["cancel_requested"])
        fields["errors"] = json_value(row["errors"]) or []
        fields["trace_context"] = json_value(row["trace_context"])
        return TaskRecord(**fields)

    # -- enqueue -----------------------------------------------------------------------------

    def _spec_params(self, spec: TaskSpec) -> dict[str, Any]:
        return {
            "queue": spec.queue,
            "kind": spec.kind,
            "payload": spec.payload_param,
            "idem_key": spec.idem_key,
            "unique_key": spec.unique_key,
            "max_attempts": spec.max_attempts,
            "run_at": self._at(spec.run_at),
            "delay": float(spec.delay_secs),
            "priority": spec.priority,
            "trace_context": json_text(spec.trace_context),
        }

    def task_enqueue(self, spec: TaskSpec) -> EnqueueResult:
        with self._translated("task_enqueue"), self._writing() as cursor:
            return self._enqueue_one(cursor, spec)

    def task_enqueue_many(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        if not specs:
            return []
        with self._translated("task_enqueue_many"), self._writing() as cursor:
            return [self._enqueue_one(cursor, spec) for spec in specs]

    def _enqueue_one(self, cursor: Any, spec: TaskSpec) -> EnqueueResult:
        params = self._spec_params(spec)
        for _ in range(INSERT_TRIES):
            task_id = self._insert_one(cursor, params)
            if task_id is not None:  # frozen_instance: the dataclass's __init__, quicker
                return frozen_instance(EnqueueResult, task_id=task_id, duplicate=False)
            existing = self._find_existing(cursor, spec)
            if existing is not None:
                return existing
        raise StoreError(
            f"enqueue of {spec.kind!r} on {spec.queue!r} conflicted {INSERT_TRIES} times with "
            "a task that then disappeared; retry the enqueue"
        )

    def _insert_one(self, cursor: Any, params: dict[str, Any]) -> int | None:
        """Insert one task (``enqueue``); its id, or None when a key already had the task."""
        inserted = self._rows(cursor, "enqueue", params)
        return inserted[0]["id"] if inserted else None

    def _find_existing(self, cursor: Any, spec: TaskSpec) -> EnqueueResult | None:
        """The task a key already names (idem_key first, then the pending unique job)."""
        if spec.idem_key is not None:
            for row in self._rows(cursor, "find_by_idem_key", {"idem_key": spec.idem_key}):
                return same_work(spec, row)
        if spec.unique_key is not None:
            params = {"kind": spec.kind, "unique_key": spec.unique_key}
            for row in self._rows(cursor, "find_unique_pending", params):
                return EnqueueResult(task_id=row["id"], duplicate=True)
        return None

    # -- claim and leases --------------------------------------------------------------------

    def task_claim(
        self, *, queues: Sequence[str], owner: str, limit: int, lease_ttl: float
    ) -> ClaimBatch:
        flushed = self.task_settle_and_claim(
            [], queues=queues, owner=owner, limit=limit, lease_ttl=lease_ttl
        )
        return flushed.batch

    def task_settle_and_claim(
        self,
        decisions: Sequence[Decision],
        *,
        queues: Sequence[str],
        owner: str,
        limit: int,
        lease_ttl: float,
    ) -> Flushed:
        rows = [settle_row(decision) for decision in decisions]
        plan = ClaimPlan(
            queues=tuple(queues) if limit > 0 else (),
            limit=limit,
            owner=owner,
            exclude=tuple(decision.lease.task_id for decision in decisions),
        )
        if not rows and not plan.queues:
            return Flushed()
        try:
            with self._translated("task_settle_and_claim"):
                applied, batch = self._settle_claim(rows, plan, float(lease_ttl))
        except PartlyCommitted as exc:
            settled = outcomes(decisions, exc.applied)
            raise ClaimFailed(str(exc.error), settled=settled) from exc.error.__cause__
        return Flushed(settled=outcomes(decisions, applied), batch=batch)

    def _settle_claim(
        self, rows: list[dict[str, Any]], plan: ClaimPlan, ttl: float
    ) -> tuple[dict[int, bool], ClaimBatch]:
        """Apply settle rows and claim in one transaction: ({position: cancelled}, batch)."""
        with self._writing() as cursor:
            applied = self._settle_rows(cursor, rows) if rows else {}
            claimed: list[Claimed] = []
            doomed: list[dict[str, Any]] = []
            if plan.queues:
                params = self._claim_params(cursor, plan.owner, ttl)
                claimed, doomed = walk_claim(plan, self._claim_statement(cursor, params))
            buried = self._bury_doomed(cursor, doomed) if doomed else 0
        return applied, ClaimBatch(claimed=claimed, buried=buried)

    def _claim_statement(self, cursor: Any, params: dict[str, Any]) -> ClaimStatement:
        """One claim statement on ``cursor``, for ``walk_claim``."""

        def statement(pick: dict[str, Any]) -> list[dict[str, Any]]:
            return self._claim_rows(cursor, {**params, **pick, "seen": self._ids(pick["seen"])})

        return statement

    def _bury_doomed(self, cursor: Any, rows: list[dict[str, Any]]) -> int:
        """Bury rows no claim may run (attempts used up, or cancelled); how many it buried."""
        return len(self._settle_rows(cursor, burial_rows(rows)))

    def lease_extend(self, leases: Sequence[Lease], lease_ttl: float) -> Held:
        if not leases:
            return Held()
        params = {
            "task_ids": self._ids([lease.task_id for lease in leases]),
            "epochs": self._ids([lease.epoch for lease in leases]),
            "owners": [lease.owner for lease in leases],
            "ttl": float(lease_ttl),
        }
        with self._translated("lease_extend"), self._one_statement() as cursor:
            rows = self._rows(cursor, "lease_extend", params)
            extended = {row["id"] for row in rows}
            self._record_refused_heartbeats(
                cursor, [lease for lease in leases if lease.task_id not in extended]
            )
        return Held(extended, (row["id"] for row in rows if row["cancel_requested"]))

    def _record_refused_heartbeats(self, cursor: Any, refused: list[Lease]) -> None:
        """Record the refused heartbeats another claim caused (op ``beat``), unless the
        dialect's lease_extend statement did it already (PostgreSQL's does)."""

    # -- settle and cancel -------------------------------------------------------------------

    def task_settle(self, decisions: Sequence[Decision]) -> list[Settled]:
        if not decisions:
            return []
        flushed = self.task_settle_and_claim(decisions, queues=(), owner="", limit=0, lease_ttl=0)
        return flushed.settled

    def task_cancel(self, task_id: int) -> CancelOutcome:
        with self._translated("task_cancel"), self._writing() as cursor:
            rows = self._rows(cursor, "cancel_pick", {"task_id": task_id})
            if not rows:
                return CancelOutcome.NOT_FOUND
            row = rows[0]
            if row["state"] != "pending":
                return CancelOutcome.FINISHED
            if row["leased"]:
                self._rows(cursor, "cancel_mark", {"task_id": task_id})
                return CancelOutcome.MARKED
            lease = Lease(task_id=task_id, epoch=row["lease_epoch"])
            burial = Bury(lease=lease, error=ending(row["last_error"], CANCELLED_SUFFIX))
            self._settle_rows(cursor, [settle_row(burial)])
            return CancelOutcome.CANCELLED

    # -- reads -------------------------------------------------------------------------------

    def task_get(self, task_id: int) -> TaskRecord | None:
        with self._translated("task_get"), self._reading() as cursor:
            rows = self._rows(cursor, "task_get", {"task_id": task_id})
        return self._record(rows[0]) if rows else None

    def task_list(
        self, *, queue: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        params = {"queue": queue, "state": state, "limit": max(limit, 0)}
        with self._translated("task_list"), self._reading() as cursor:
            rows = self._rows(cursor, "task_list", params)
        return [self._record(row) for row in rows]

    def queue_overview(self, queues: Sequence[str] | None = None) -> list[QueueStats]:
        names = None if queues is None else self._list(queues)
        params = {"queues": names, "done_cap": self.done_count_limit + 1}
        with self._translated("queue_overview"), self._overview_reading() as cursor:
            rows = self._rows(cursor, "queue_overview", params)
            return [self._queue_stats(cursor, row) for row in rows]

    def _overview_reading(self) -> AbstractContextManager[Any]:
        """A cursor for the overview's statements."""
        return self._reading()

    def _queue_stats(self, cursor: Any, row: dict[str, Any]) -> QueueStats:
        """One queue_overview row as QueueStats (a dialect may estimate a capped done)."""
        age = self._oldest_ready_age(row)
        return QueueStats(oldest_ready_age_secs=age, **row)

    def fenced_count(self, queue: str | None = None, op: str | None = None) -> int:
        with self._translated("fenced_count"), self._reading() as cursor:
            return self._rows(cursor, "fenced_count", {"queue": queue, "op": op})[0]["fenced"]

    # -- dead letters ------------------------------------------------------------------------

    def dead_requeue(self, queue: str, task_id: int) -> bool:
        params = {"queue": queue, "task_id": task_id}
        with self._translated("dead_requeue"):
            try:
                with self._writing() as cursor:
                    return bool(self._rows(cursor, "dead_requeue", params))
            except IntegrityError:
                # A unique job's pending task was enqueued between our check and our write.
                return False

    def dead_sweep(self, queue: str) -> int:
        with self._translated("dead_sweep"), self._writing() as cursor:
            rows = self._rows(cursor, "sweep_pick", {"queue": queue})
            return self._bury_doomed(cursor, rows) if rows else 0

    def _purge_dead(self, queue: str, older_than: float | None, ids: list[int] | None) -> int:
        ids = None if ids is None else self._ids(ids)
        params = {"queue": queue, "older_than": older_than, "task_ids": ids}
        with self._translated("dead_purge"), self._writing() as cursor:
            cursor.execute(self.queries["dead_purge"], {**self._common_params(), **params})
            return cursor.rowcount

    # -- retention ---------------------------------------------------------------------------

    def _prune(self, op: str, older_than_secs: float, limit: int, queue: str | None) -> int:
        params = {"older_than": float(older_than_secs), "limit": int(limit), "queue": queue}
        with self._translated(op), self._one_statement() as cursor:
            cursor.execute(self.queries[op], {**self._common_params(), **params})
            return cursor.rowcount

    def task_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        return self._prune("task_prune", older_than_secs, limit, queue)

    def fenced_prune(self, older_than_secs: float, limit: int, queue: str | None = None) -> int:
        return self._prune("fenced_prune", older_than_secs, limit, queue)

    def prunable(self, older_than_secs: float, queue: str | None = None) -> Pruned:
        params = {"older_than": float(older_than_secs), "queue": queue}
        with self._translated("prunable"), self._reading() as cursor:
            row = self._rows(cursor, "prunable", params)[0]
        return Pruned(tasks=row["tasks"], fenced=row["fenced"])
