"""The PostgreSQL store's bulk enqueue: a batch in chunks, each inserted by one statement.

A small chunk goes as one INSERT over arrays. A large one of plain tasks (no key, runnable at
once at priority 0: nothing can refuse them, every other column is the table's default) is
streamed straight into rivet_task (COPY), its ids taken from the sequence first. Any other
large chunk is streamed into the session's staging table and inserted from there (ON CONFLICT,
the delays and ranks computed by the server); behind a transaction pooler the staging table is
the transaction's own (``ON COMMIT DROP``), so no table stays on a pooled server connection.
Rows a key already had (an idempotency key used before, a unique job pending) are skipped by
the insert and resolved after it, a chunk at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Any

from rivet.stores.jsontext import json_text
from rivet.stores.sql import SqlStore
from rivet.stores.sqlrows import same_work
from rivet.values import EnqueueResult, TaskSpec

#: Rows per chunk of a bulk enqueue (a chunk: one COPY, then one INSERT from the stage).
BULK_CHUNK = 10_000
#: Smaller chunks go as one INSERT over arrays: no temporary table for the session to create
#: (a web request on a fresh connection enqueueing three tasks), one round trip.
COPY_MIN_ROWS = 200


def _plain(spec: TaskSpec) -> bool:
    """A task the direct COPY may write: no key to check, and its times and rank are the
    table's defaults (runnable at once, priority 0)."""
    return (
        spec.idem_key is None
        and spec.unique_key is None
        and spec.run_at is None
        and not spec.delay_secs
        and not spec.priority
    )


def stage_open(text: str, *, pooled: bool) -> str:
    """The staging table's statement: the session's (rows gone at commit), or behind a
    transaction pooler the transaction's own (the table dropped at commit)."""
    if not pooled:
        return text
    local = text.replace("ON COMMIT DELETE ROWS", "ON COMMIT DROP")
    if local == text:
        raise RuntimeError("postgres.sql's stage_open lost its ON COMMIT DELETE ROWS clause")
    return local


class BulkEnqueue(SqlStore):
    """``task_enqueue_many`` on PostgreSQL's queries (``enqueue_arrays``, ``stage_*``)."""

    @property
    def pooled(self) -> bool:
        """True when a transaction pooler sits between (``PostgresStore.pooled``)."""
        return False

    #: Reads the batch as it writes (``Store.streams_bulk``): see ``_copy_chunk``.
    streams_bulk = True

    def task_enqueue_many(self, specs: Sequence[TaskSpec]) -> list[EnqueueResult]:
        results: list[EnqueueResult] = []
        total = len(specs)
        stream = iter(specs)
        with self._translated("task_enqueue_many"), self._writing() as cursor:
            for start in range(0, total, BULK_CHUNK):
                count = min(BULK_CHUNK, total - start)
                results += self._enqueue_chunk(cursor, islice(stream, count), count)
        return results

    def _enqueue_chunk(
        self, cursor: Any, stream: Iterator[TaskSpec], count: int
    ) -> list[EnqueueResult]:
        """Write the chunk's next ``count`` tasks: a small chunk as one INSERT over arrays, a
        large one by COPY (``_copy_chunk``)."""
        if count >= COPY_MIN_ROWS:
            return self._copy_chunk(cursor, stream, count)
        specs = list(stream)
        return self._resolved(
            cursor, specs, self._rows(cursor, "enqueue_arrays", self._arrays(specs))[0]
        )

    def _copy_chunk(
        self, cursor: Any, stream: Iterator[TaskSpec], count: int
    ) -> list[EnqueueResult]:
        """COPY a chunk, reading its tasks as the rows go out.

        Plain tasks go straight into rivet_task; from the first task that is not plain, the
        rest of the chunk goes through the staging table. The rows stream while the batch is
        read, so the server inserts the first rows while the producer validates the next
        (``SpecBatch``); a task that fails validation ends the COPY with its error and the
        transaction rolls back.
        """
        ids = self._chunk_ids(cursor, count)
        written, rest = self._copy_direct(cursor, ids, stream)
        results = [EnqueueResult(task_id=task_id) for task_id in ids[:written]]
        if rest is None:
            return results
        staged: list[TaskSpec] = []
        row = self._insert_staged(cursor, ids[written:], chain((rest,), stream), staged)
        return results + self._resolved(cursor, staged, row)

    def _copy_direct(
        self, cursor: Any, ids: list[int], stream: Iterator[TaskSpec]
    ) -> tuple[int, TaskSpec | None]:
        """COPY plain tasks from ``stream`` straight into rivet_task under ``ids``, up to the
        first that is not plain; the number written and that task (None: none was)."""
        queues: set[str] = set()
        written = 0
        rest = None
        with cursor.copy(self.queries["direct_copy"]) as copy:
            for task_id, spec in zip(ids, stream, strict=True):
                if not _plain(spec):
                    rest = spec
                    break
                queues.add(spec.queue)
                copy.write_row(
                    (
                        task_id,
                        spec.queue,
                        spec.kind,
                        spec.payload_param,
                        spec.max_attempts,
                        json_text(spec.trace_context),
                    )
                )
                written += 1
        if queues:
            self._rows(cursor, "wake_queues", {"queues": sorted(queues)})
        return written, rest

    def _resolved(
        self, cursor: Any, specs: list[TaskSpec], row: dict[str, Any]
    ) -> list[EnqueueResult]:
        """The results of an insert that skipped ``row['skipped']``: the rows a key already
        had, each resolved to the task it names."""
        results = [EnqueueResult(task_id=task_id) for task_id in row["ids"]]
        skipped = [specs[position] for position in row["skipped"]]
        for position, result in zip(row["skipped"], self._existing(cursor, skipped), strict=True):
            results[position] = result
        return results

    def _arrays(self, specs: Sequence[TaskSpec]) -> dict[str, list[Any]]:
        return {
            "queues": [spec.queue for spec in specs],
            "kinds": [spec.kind for spec in specs],
            "payloads": [spec.payload_param for spec in specs],
            "idem_keys": [spec.idem_key for spec in specs],
            "unique_keys": [spec.unique_key for spec in specs],
            "max_attempts": [spec.max_attempts for spec in specs],
            "run_ats": [spec.run_at for spec in specs],
            "delays": [float(spec.delay_secs) for spec in specs],
            "priorities": [spec.priority for spec in specs],
            "trace_contexts": [json_text(spec.trace_context) for spec in specs],
        }

    def _chunk_ids(self, cursor: Any, count: int) -> list[int]:
        """``count`` task ids from the sequence, in order."""
        return self._rows(cursor, "chunk_ids", {"count": count})[0]["ids"]

    def _insert_staged(
        self, cursor: Any, ids: list[int], stream: Iterable[TaskSpec], staged: list[TaskSpec]
    ) -> dict[str, Any]:
        """COPY tasks into the session's staging table under ``ids``, then insert them in one
        statement; each task read from ``stream`` is kept in ``staged``, in order."""
        # Behind a transaction pooler the table lives for the transaction only (``pooled``).
        cursor.execute(stage_open(self.queries["stage_open"], pooled=self.pooled))
        with cursor.copy(self.queries["stage_copy"]) as copy:
            for position, (task_id, spec) in enumerate(zip(ids, stream, strict=True)):
                staged.append(spec)
                copy.write_row(
                    (
                        position,
                        task_id,
                        spec.queue,
                        spec.kind,
                        spec.payload_param,
                        spec.idem_key,
                        spec.unique_key,
                        spec.max_attempts,
                        spec.run_at,
                        float(spec.delay_secs),
                        spec.priority,
                        json_text(spec.trace_context),
                    )
                )
        return self._rows(cursor, "stage_insert", {})[0]

    def _existing(self, cursor: Any, specs: list[TaskSpec]) -> list[EnqueueResult]:
        """The tasks keys already name, for specs a bulk insert skipped; one read per key kind.

        The same rules as ``_find_existing`` (idempotency key first, then the pending unique
        job), for a whole chunk at once; a spec whose row vanished is enqueued again alone.
        """
        if not specs:
            return []
        keys = [spec.idem_key for spec in specs if spec.idem_key is not None]
        by_key = {}
        if keys:
            rows = self._rows(cursor, "find_by_idem_keys", {"idem_keys": keys})
            by_key = {row["idem_key"]: row for row in rows}
        uniques = [s for s in specs if s.idem_key not in by_key and s.unique_key is not None]
        by_unique = {}
        if uniques:
            params = {
                "kinds": [spec.kind for spec in uniques],
                "unique_keys": [spec.unique_key for spec in uniques],
            }
            rows = self._rows(cursor, "find_unique_pending_many", params)
            by_unique = {(row["kind"], row["unique_key"]): row["id"] for row in rows}
        return [self._resolve(cursor, spec, by_key, by_unique) for spec in specs]

    def _resolve(
        self,
        cursor: Any,
        spec: TaskSpec,
        by_key: dict[str, dict[str, Any]],
        by_unique: dict[tuple[str, str], int],
    ) -> EnqueueResult:
        if spec.idem_key is not None and spec.idem_key in by_key:
            return same_work(spec, by_key[spec.idem_key])
        if spec.unique_key is not None and (spec.kind, spec.unique_key) in by_unique:
            return EnqueueResult(task_id=by_unique[(spec.kind, spec.unique_key)], duplicate=True)
        return self._enqueue_one(cursor, spec)
