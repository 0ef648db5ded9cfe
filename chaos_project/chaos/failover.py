"""A primary failover as a chaos fault (``--faults failover`` or ``failover-async``).

The run's queue database lives on a pair of throwaway clusters of the harness's own
(``pgcluster``): a primary and a streaming standby copied from it with ``pg_basebackup -R``. The
harness, its workers and its producer reach it through one libpq multi-host connection string,
``host=127.0.0.1,127.0.0.1 port=P1,P2 target_session_attrs=read-write``: libpq tries the hosts in
turn and keeps the first that takes writes. Once, at a seeded time of the chaos, the primary's
postmaster and every server process it started are SIGKILLed (a host that dies: no shutdown,
nothing flushed or sent after it) and the standby is promoted (``pg_ctl promote``). Nobody is
told: every connection finds the new primary on its own.

Just before the promotion, once the standby has replayed all it received, the harness reads the
queue from it: that is the state the new primary starts from. Against it, it counts what the
failover lost that someone had been told was written:

- **enqueues lost**: tasks the harness's producer enqueued (its commit returned) before the kill
  that are not on the standby;
- **acks rolled back**: tasks a worker logged ``acked`` (its commit returned) before the promotion
  that are not done on the standby: they run again, and the effect key makes that a replay;
- **claims rolled back**: tasks a worker logged ``claimed`` at an epoch the standby never saw:
  the next claim on the new primary hands out that epoch again, so two workers can hold one
  task under one epoch, which the fence cannot tell apart.
- **ids reused**: task ids a worker logged ``claimed`` before the promotion, that the standby
  lacks (their enqueue was lost), and that name a task on the new primary after the run: its id
  sequence restarted from the standby's, behind the old primary's, so it handed those ids out
  again, to other tasks. A lower bound: ids the old primary gave to tasks no worker claimed
  before the kill are not known. Reported in both modes; the lost enqueue it follows from is
  what a synchronous run is judged by.

With a synchronous standby (``synchronous_standby_names`` names it, ``synchronous_commit = on``)
a commit returns only once the standby has flushed it, so each of these must be 0: the run fails
L1 otherwise. With an asynchronous one they are what the mode loses, and are reported.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from django.core.management import call_command
from django.db import connections

from chaos_project.chaos.pgcluster import Cluster, ClusterError
from chaos_project.chaos.queuecluster import CLUSTER_PREFIX, create_database, wait_until_answers
from chaos_project.chaos.report import line
from rivet.errors import RivetError

FAILOVER = "failover"
FAILOVER_ASYNC = "failover-async"
MODES = {FAILOVER: "synchronous", FAILOVER_ASYNC: "asynchronous"}
STANDBY_NAME = "rivet_standby"
#: The kill falls in this share of the chaos: workers are busy then, and the rest of the chaos
#: runs on the promoted standby.
WINDOW = (0.3, 0.6)
REPLICATION_TIMEOUT_SECS = 30.0
REPLAY_TIMEOUT_SECS = 10.0
#: Server options of both clusters beside pgcluster's: a commit returns once its WAL is flushed
#: (on the primary, and with a synchronous standby on the standby too), so what a client was told
#: is what the failover is judged by; the WAL is streamed through a replication slot.
PAIR_OPTIONS = "-c synchronous_commit=on -c wal_level=replica -c max_wal_senders=4"


class FailoverError(RivetError):
    """The pair could not be built or failed over; the message says why (the run stops as one
    that could not be carried out, not as a failed invariant)."""


def multi_host_url(ports: Iterable[int], dbname: str, host: str = "127.0.0.1") -> str:
    """The libpq URL of every node, writes going to whichever is primary."""
    hosts = ",".join(f"{host}:{port}" for port in ports)
    return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"


def kill_time(seed: int, duration: float) -> float:
    """Seconds into the chaos when the primary is killed (seeded, in WINDOW)."""
    rng = random.Random(f"{seed}/{FAILOVER}")
    start, end = (duration * share for share in WINDOW)
    return round(start + (end - start) * rng.random(), 3)


@dataclass
class Pair:
    primary: Cluster
    standby: Cluster
    synchronous: bool
    dbname: str

    def url(self, dbname: str | None = None) -> str:
        return multi_host_url([self.primary.port, self.standby.port], dbname or self.dbname)


@contextmanager
def queue_on_pair(say: Callable[[str], None], *, synchronous: bool) -> Iterator[Pair]:
    """Point the harness's queue database (and so the workers') at a primary and a standby.

    The database keeps its name; it is created on the primary, copied to the standby with
    ``pg_basebackup -R``, and migrated through the multi-host URL. Afterwards the harness's
    connection settings are put back and both clusters are stopped and deleted.
    """
    connection = connections["default"]
    db = connection.settings_dict
    saved = {key: db.get(key) for key in ("HOST", "PORT", "USER", "PASSWORD")}
    saved_options = dict(db.get("OPTIONS") or {})
    with ExitStack() as stack:
        primary = Cluster.create(prefix=CLUSTER_PREFIX, say=say, options=PAIR_OPTIONS)
        stack.callback(primary.remove)
        create_database(primary, db["NAME"])
        standby = Cluster.standby_of(
            primary, prefix=CLUSTER_PREFIX, name=STANDBY_NAME, say=say, options=PAIR_OPTIONS
        )
        stack.callback(standby.remove)
        pair = Pair(primary, standby, synchronous, db["NAME"])
        if synchronous:
            # Set only now: with it set, the CREATE DATABASE above would have waited for a
            # standby that did not exist yet. ALTER SYSTEM writes the primary's own
            # postgresql.auto.conf, after the copy: the standby, once promoted, has no
            # synchronous standby to wait for.
            _on(primary, f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            _on(primary, "SELECT pg_reload_conf()")
        state = wait_streaming(primary, "sync" if synchronous else "async")
        stack.callback(_restore, connection, db, saved, saved_options)
        connection.close()
        db.update(
            HOST="127.0.0.1,127.0.0.1",
            PORT=f"{primary.port},{standby.port}",
            USER="postgres",
            PASSWORD="",
        )
        db["OPTIONS"] = {**saved_options, "target_session_attrs": "read-write"}
        call_command("migrate", database="default", verbosity=0, interactive=False)
        say(
            f"failover: the queue database {db['NAME']!r} runs on a primary (127.0.0.1:"
            f"{primary.port}) and a {MODES[FAILOVER if synchronous else FAILOVER_ASYNC]} "
            f"streaming standby (127.0.0.1:{standby.port}, {state}), both throwaway clusters of "
            f"the harness's own; everyone connects with {pair.url()}"
        )
        yield pair


def _restore(connection: Any, db: dict, saved: dict, saved_options: dict) -> None:
    connection.close()
    db.update(saved)
    db["OPTIONS"] = saved_options


def _on(cluster: Cluster, statement: str, dbname: str = "postgres") -> list[tuple]:
    with psycopg.connect(cluster.url(dbname), autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def wait_streaming(primary: Cluster, sync_state: str) -> str:
    """Until the primary streams to the standby in ``sync_state`` (``sync`` or ``async``)."""
    deadline = time.monotonic() + REPLICATION_TIMEOUT_SECS
    rows: list[tuple] = []
    while time.monotonic() < deadline:
        rows = _on(
            primary,
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = "
            f"'{STANDBY_NAME}'",
        )
        if rows and rows[0] == ("streaming", sync_state):
            return f"streaming, {sync_state}"
        time.sleep(0.1)
    raise FailoverError(
        f"the standby did not stream as {sync_state} within {REPLICATION_TIMEOUT_SECS:g} s "
        f"(pg_stat_replication: {rows or 'no row'})\n{primary.log_tail()}"
    )


@dataclass(frozen=True)
class Snapshot:
    """The queue as the standby holds it before the promotion: what the new primary starts
    from."""

    keys: frozenset[str]
    done: frozenset[int]
    epochs: dict[int, int]
    """Each task's ``lease_epoch``."""


#: WAL page size, and the smallest WAL record (its header): a record never starts where less
#: than that is left of a page, so the server skips what is left to the next page.
WAL_PAGE_BYTES = 8192
WAL_RECORD_HEADER_BYTES = 24


def lsn(text: str) -> int:
    """A WAL position (``"0/30A7FF0"``) as a byte count."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def replayed_all(received: str, replayed: str) -> bool:
    """Whether the standby replayed every record it received. The received position can end on
    a page boundary past the last record by the page's unused tail (seen: 0/30A7FF0 replayed of
    0/30A8000 received, 16 bytes no record fits in); once the primary is killed no record comes
    to close that gap."""
    got, done = lsn(received), lsn(replayed)
    if done >= got:
        return True
    return got % WAL_PAGE_BYTES == 0 and got - done < WAL_RECORD_HEADER_BYTES


def read_snapshot(standby: Cluster, dbname: str, queue: str) -> Snapshot:
    """Wait until the standby replayed all it received, then read the queue from it."""
    deadline = time.monotonic() + REPLAY_TIMEOUT_SECS
    with psycopg.connect(standby.url(dbname), autocommit=True, connect_timeout=10) as conn:
        while True:
            received, replayed = conn.execute(
                "SELECT pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()"
            ).fetchone()
            if received is None or replayed_all(str(received), str(replayed)):
                break
            if time.monotonic() > deadline:
                raise FailoverError(
                    f"the standby had not replayed what it received ({replayed} of {received}) "
                    f"after {REPLAY_TIMEOUT_SECS:g} s"
                )
            time.sleep(0.05)
        rows = conn.execute(
            "SELECT id, idem_key, state, lease_epoch FROM rivet_task WHERE queue = %s", (queue,)
        ).fetchall()
    return Snapshot(
        keys=frozenset(key for _, key, _, _ in rows if key),
        done=frozenset(task for task, _, state, _ in rows if state == "done"),
        epochs={task: epoch for task, _, _, epoch in rows},
    )


@dataclass
class Losses:
    """What the failover lost that a client had been told was written."""

    enqueues: list[str] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    claims: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)
    """Task ids the old primary handed out that the new primary handed out again (``reused_ids``):
    a consequence of lost enqueues, not a loss of its own, so not in ``total``."""

    def total(self) -> int:
        return len(self.enqueues) + len(self.acks) + len(self.claims)

    def record(self) -> dict[str, Any]:
        return {
            "enqueues_lost": len(self.enqueues),
            "acks_rolled_back": len(self.acks),
            "claims_rolled_back": len(self.claims),
            "ids_reused": len(self.reused),
            "samples": {
                "enqueues": self.enqueues[:5],
                "acks": self.acks[:5],
                "claims": self.claims[:5],
                "ids_reused": self.reused[:5],
            },
        }


def worker_writes(log_dir: Path, before: float) -> tuple[set[int], dict[int, int]]:
    """From the workers' JSON logs: the tasks acked, and the highest epoch each task was claimed
    at, in lines written before ``before`` (a Unix time). A line is written after its commit
    returned, so each is a write the worker was told had committed."""
    acked: set[int] = set()
    claimed: dict[int, int] = {}
    for path in sorted(log_dir.glob("chaos-w*.log")):
        for text in path.read_text(errors="replace").splitlines():
            if '"acked"' not in text and '"claimed"' not in text:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                continue  # a line cut by a SIGKILL
            when = _unix(record.get("ts"))
            if when is None or when >= before or "task" not in record:
                continue
            if record.get("event") == "acked":
                acked.add(record["task"])
            elif record.get("event") == "claimed":
                task = record["task"]
                claimed[task] = max(claimed.get(task, 0), record["epoch"])
    return acked, claimed


def losses(
    snapshot: Snapshot,
    *,
    enqueued: Iterable[str],
    acked: Iterable[int],
    claimed: dict[int, int],
) -> Losses:
    """What the snapshot lacks of the writes clients were told had committed."""
    return Losses(
        enqueues=sorted(key for key in set(enqueued) if key not in snapshot.keys),
        acks=sorted(task for task in set(acked) if task not in snapshot.done),
        claims=sorted(
            task for task, epoch in claimed.items() if snapshot.epochs.get(task, 0) < epoch
        ),
    )


def reused_ids(snapshot: Snapshot, claimed_before: Iterable[int], now: Iterable[int]) -> list[int]:
    """Ids a worker claimed on the old primary (``claimed_before``) that the standby never had
    and that name a task on the new primary (``now``, the ids found there after the run): the
    new primary's sequence handed them out again, to other tasks."""
    present = set(now)
    return sorted(
        task for task in set(claimed_before) if task not in snapshot.epochs and task in present
    )


def ids_present(url: str, ids: Iterable[int]) -> set[int]:
    """Which of ``ids`` name a task (in any queue) on the database at ``url``."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute("SELECT id FROM rivet_task WHERE id = ANY(%s)", (wanted,)).fetchall()
    return {row[0] for row in rows}


def _unix(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def ack_times(log_dir: Path) -> list[float]:
    """Every ``acked`` line's Unix time in the workers' logs, sorted."""
    times = []
    for path in sorted(log_dir.glob("chaos-w*.log")):
        for text in path.read_text(errors="replace").splitlines():
            if '"acked"' not in text:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                continue
            when = _unix(record.get("ts"))
            if when is not None and record.get("event") == "acked":
                times.append(when)
    return sorted(times)


def stall(times: list[float], killed: float, promoted: float) -> tuple[float, float] | None:
    """(seconds without an ack around the failover, seconds from the kill to the first ack on
    the new primary); None when no ack came after the promotion. An ack logged before the
    promotion was committed by the old primary (the standby took no write before it), even one
    logged just after the kill: its answer had left the server first."""
    after = [t for t in times if t >= promoted]
    if not after:
        return None
    before = [t for t in times if t < promoted]
    last = before[-1] if before else killed
    return after[0] - last, after[0] - killed


class Failover:
    """The fault: once, SIGKILL the primary and promote the standby; then count the losses."""

    name = FAILOVER

    def __init__(
        self,
        pair: Pair,
        *,
        at: float,
        queue: str,
        enqueued: Callable[[], Iterable[str]],
    ) -> None:
        self.pair = pair
        self.name = FAILOVER if pair.synchronous else FAILOVER_ASYNC
        self.at = at
        self.queue = queue
        self.enqueued = enqueued
        self.log: Any = None
        self.done = False
        self.record: dict[str, Any] = {}
        self.snapshot: Snapshot | None = None
        self.enqueued_before: list[str] = []
        self.killed_at = 0.0
        self.promoted_at = 0.0
        self.loss: Losses | None = None
        self.gap: tuple[float, float] | None = None
        self.waived: list[str] = []
        """F2 violations an asynchronous failover's rolled-back writes explain (not judged)."""

    def start(self, log: Any) -> None:
        self.log = log

    def tick(self, now: float) -> None:
        if self.done or now < self.at:
            return
        self.done = True
        self.record = self.fail_over(planned_at=self.at)
        self.log.add(self.name, **self.record)

    def fail_over(self, *, planned_at: float) -> dict[str, Any]:
        """Kill the primary, read the standby, promote it, wait until the URL takes writes."""
        pair = self.pair
        enqueued = list(self.enqueued())  # every enqueue whose commit returned before the kill
        connections["default"].close()
        killed_at = time.time()
        started = time.monotonic()
        try:
            killed = pair.primary.crash()
        except ClusterError as exc:
            raise FailoverError(f"failover: could not kill the primary: {exc}") from exc
        try:
            self.snapshot = read_snapshot(pair.standby, pair.dbname, self.queue)
            self.promoted_at = time.time()
            pair.standby.promote()
            promoted = time.monotonic()
            wait_until_answers(pair.url())
        except ClusterError as exc:
            raise FailoverError(f"failover: the standby did not take over: {exc}") from exc
        answered = time.monotonic()
        self.enqueued_before = enqueued
        self.killed_at = killed_at
        return {
            "planned_at": planned_at,
            "mode": MODES[self.name],
            "old_primary": killed["postmaster"],
            "processes_killed": killed["processes"],
            "new_primary_port": pair.standby.port,
            "promote_secs": round(promoted - started, 3),
            "writable_secs": round(answered - started, 3),
            "standby_tasks": len(self.snapshot.epochs),
        }

    def stop(self) -> None:
        """Nothing to stop: the one kill happened, or the chaos ended before it was due."""

    def count(self) -> int:
        return 1 if self.record else 0

    def detail(self) -> str:
        return MODES[self.name]

    def summary(self) -> dict[str, Any]:
        """The run's JSON part: the failover's record, its losses, the stall in acks."""
        out: dict[str, Any] = {"mode": MODES[self.name], "happened": bool(self.record)}
        out.update(self.record)
        if self.loss is not None:
            out.update(self.loss.record())
        if self.gap is not None:
            out["no_ack_secs"], out["first_ack_after_kill_secs"] = (round(g, 3) for g in self.gap)
        out["f2_not_judged"] = self.waived
        return out

    def report_lines(self) -> list[str]:
        """The report's lines on the failover (``report.line`` format)."""
        r = self.record
        if not r:
            return [line("failover", 0, f"({MODES[self.name]} standby: the kill did not happen)")]
        lines = [
            line(
                "failover",
                1,
                f"({MODES[self.name]} standby: primary SIGKILLed at {r['planned_at']:g} s of the "
                f"chaos, {r['processes_killed']} server processes; standby promoted after "
                f"{r['promote_secs']:g} s, taking writes after {r['writable_secs']:g} s)",
            )
        ]
        if self.gap is not None:
            gap, first = self.gap
            lines.append(
                line(
                    "no ack for",
                    f"{gap:.1f} s",
                    f"(the last ack on the old primary to the first on the new one, "
                    f"{first:.1f} s after the kill)",
                )
            )
        else:
            lines.append(
                line("no ack for", "-", "(no ack on the new primary in the workers' logs)")
            )
        if self.loss is not None:
            judged = "<- L1 " if self.name == FAILOVER else "(reported, not judged) "
            lines += [
                line(
                    "enqueues lost",
                    len(self.loss.enqueues),
                    f"{judged}acknowledged to the producer, absent after the promotion",
                ),
                line(
                    "acks rolled back",
                    len(self.loss.acks),
                    f"{judged}acked to a worker, not done after the promotion: run again",
                ),
                line(
                    "claims rolled back",
                    len(self.loss.claims),
                    f"{judged}claimed by a worker at an epoch the new primary hands out again",
                ),
                line(
                    "ids reused",
                    len(self.loss.reused),
                    "(reported) task ids the old primary handed out that the new primary gave "
                    "to other tasks (at least: only ids claimed before the kill are known)",
                ),
            ]
        for waived in self.waived:
            lines.append(f"not judged after an asynchronous failover that lost writes: {waived}")
        return lines

    def judge(self, log_dir: Path) -> None:
        """After the run: count the losses against the snapshot, and the stall in acks."""
        if self.snapshot is None:
            return
        acked, claimed = worker_writes(log_dir, before=self.promoted_at)
        self.loss = losses(
            self.snapshot, enqueued=self.enqueued_before, acked=acked, claimed=claimed
        )
        lacking = [task for task in claimed if task not in self.snapshot.epochs]
        self.loss.reused = reused_ids(self.snapshot, claimed, ids_present(self.pair.url(), lacking))
        self.gap = stall(ack_times(log_dir), self.killed_at, self.promoted_at)
