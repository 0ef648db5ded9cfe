"""The benchmark: throughput, its ceiling, latency, a soak and enqueue speed, in one run.

What one run measures (each part can be turned off; see docs/benchmarking.md):

1. enqueue: one ``rivet.enqueue`` call at a time, then ``enqueue_many`` in batches;
2. full backlog, for every kind x worker count x concurrency: real ``manage.py rivet_worker``
   processes started, listening and warmed up on the empty queue, then the whole workload
   inserted in one commit, which they drain; right after each noop
   configuration, its **ceiling**: the same store's claim and settle in a bare loop (no
   worker) with batch = concurrency + prefetch (the most one worker claims at once) and
   connections = workers (bench/ceiling.py);
3. offered load: workers started first, then tasks offered at ``rate`` per second;
4. soak: one backlog of ``soak`` tasks, its first and last tenth compared;
5. the scheduler: ``schedules`` one-second schedules on idle workers, every tick's lateness
   and the workers' CPU beside the same workers with no schedule (bench/schedules.py);
6. the claim at ``big_claim_rows`` pending rows: its plan and cost (bench/bigclaim.py);
7. a backlog of ``stale_stats_rows`` drained on the statistics of an empty table, beside the
   same after an ANALYZE (bench/stale.py).

Every throughput and latency comes from timestamps the database server wrote on the task rows:

- end to end = updated_at - created_at (enqueue to ack);
- service time = updated_at - visible_at + lease_ttl (claim to ack: a claim sets
  visible_at = now() + lease_ttl and the ack leaves it; exact while no heartbeat fell inside
  the attempt, which a noop's milliseconds under a 30 s lease never meet);
- throughput = done tasks / (last ack - first claim).

Peak RSS is each worker process's ``VmHWM`` (/proc/PID/status) read just before it is stopped.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from django.db.migrations.executor import MigrationExecutor

from bench import ceiling, cpu, fleet
from bench.bigclaim import measure_big_claim
from bench.enqueue import PRODUCERS, measure_enqueue, settle_server
from bench.report import (
    BACKLOG,
    RATE,
    SOAK,
    Row,
    Window,
    busy_load,
    describe_setup,
    load,
    machine,
    median_row,
    render,
    to_json,
    with_ceiling,
    write_results,
)
from bench.schedules import measure_scheduler
from bench.stale import RELTUPLES, stale_result
from chaos_project.kit import queries
from chaos_project.kit.pidfd import Child, require_pidfd
from chaos_project.kit.progress import progress
from chaos_project.kit.services import (
    EffectService,
    database_url,
    effect_connection,
    free_port,
    worker_env,
)
from rivet.errors import RivetError
from rivet.producer import enqueue, enqueue_many
from rivet.stores.postgres import PostgresStore
from rivet.worker.prefetch import AUTO, Prefetch

READY_TIMEOUT_SECS = 120.0
STOP_TIMEOUT_SECS = 30.0
#: Rows per enqueue_many while a backlog is inserted.
INSERT_BATCH = 10000
#: Rounds of the enqueue measurements, each row their median: one round's figure moves between
#: runs of the same code by more than the rows' goals allow, and a median of three is not moved
#: by one disturbed round (docs/decisions/0017-bench-medians.md).
ENQUEUE_ROUNDS = 3
#: Seconds between progress lines while a long drain runs.
DRAIN_REPORT_SECS = 10.0
#: After this long, a drain asks PostgreSQL how many tasks are pending every 0.5 s, not 0.1 s.
LONG_DRAIN_SECS = 5.0
#: Offered load: tasks per slot drained and removed before the schedule starts.
WARM_UP_PER_SLOT = 4
KINDS = ("noop", "effect")
SOAK_DEFAULT = 500000


class BenchError(RivetError):
    """The benchmark could not measure (a worker died, the queue never drained)."""


def _base_dir() -> Path:
    return Path(settings.BASE_DIR) / "bench"


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    workers: tuple[int, ...] = (1, 2, 4)
    concurrency: tuple[int, ...] = (1, 4, 16)
    kinds: tuple[str, ...] = KINDS
    tasks: int = 5000
    effect_tasks: int = 2000
    runs: int = 2
    rate: float | None = 300.0
    rate_tasks: int = 3000
    rate_workers: int = 1
    rate_concurrency: int = 4
    #: Runs of the offered-load row: its latencies are the median of these, so one run that
    #: something beside it disturbed cannot decide its p99 (with two, their mean could).
    rate_runs: int = 3
    soak: int | None = None
    soak_workers: int = 1
    soak_concurrency: int | None = None  # None: the largest of ``concurrency``
    #: During the soak, VACUUM rivet_task every this many seconds; None or 0: never (only the
    #: server's autovacuum, if on, reclaims dead rows: the worker's claim floor keeps the
    #: drain from walking them, rivet.stores.floor).
    soak_vacuum_secs: float | None = None
    enqueue_single: int = 5000
    enqueue_bulk: int = 200000
    #: The single enqueues again, shared among this many producer processes at once; 0: not.
    enqueue_producers: int = PRODUCERS
    #: Measure the server disk's commit rate (pg_test_fsync), the one-producer row's ceiling.
    enqueue_fsync: bool = True
    #: The scheduler's part (bench/schedules.py): this many one-second schedules on
    #: ``schedule_workers`` idle workers for ``schedule_secs``; 0: not measured.
    schedules: int = 1000
    schedule_workers: int = 4
    schedule_secs: float = 30.0
    #: The claim at this many pending rows (bench/bigclaim.py): its plan and cost; 0: none.
    big_claim_rows: int = 1_000_000
    #: A backlog of this many tasks drained on the statistics of an empty table, then on fresh
    #: ones (bench/stale.py); 0: not measured.
    stale_stats_rows: int = 200_000
    ceiling: bool = True
    payload_bytes: int = 100
    lease_ttl: float = 30.0
    pool_size: int | None = None  # None: concurrency + 2 for each row
    #: Each worker's --prefetch; "auto" (the worker's default) passes no flag at all.
    prefetch: int | str = AUTO
    task_log_level: str = "info"
    out: Path = field(default_factory=lambda: _base_dir() / "results.md")
    json_path: Path | None = None  # None: results.json beside ``out``
    plot: Path | None = None  # None: throughput.png beside ``out``
    no_plot: bool = False
    effect_database_url: str = ""
    queue: str = "bench"
    timeout: float = 120.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown:
            raise BenchError(f"--kind takes {', '.join(KINDS)}; got {', '.join(unknown)}")

    @property
    def json_out(self) -> Path:
        return self.json_path or self.out.with_name("results.json")

    @property
    def plot_out(self) -> Path | None:
        return None if self.no_plot else (self.plot or self.out.with_name("throughput.png"))

    @property
    def soak_at(self) -> int:
        return self.soak_concurrency or max(self.concurrency)

    def tasks_of(self, kind: str) -> int:
        return self.effect_tasks if kind == "effect" else self.tasks

    def pool_for(self, concurrency: int) -> int:
        return max(self.pool_size or 0, concurrency + 2)

    def batch_for(self, concurrency: int) -> int:
        """The most tasks one worker claims at once: the ceiling's batch."""
        if self.prefetch == AUTO:
            return concurrency + Prefetch(AUTO, concurrency).cap
        return concurrency + int(self.prefetch)

    def worker_args(self, concurrency: int) -> list[str]:
        prefetch = () if self.prefetch == AUTO else ("--prefetch", str(self.prefetch))
        return [
            *("--queue", self.queue, "--concurrency", str(concurrency)),
            *prefetch,
            *("--pool-size", str(self.pool_for(concurrency))),
            *("--lease-ttl-secs", f"{self.lease_ttl:g}", "--log-format", "json"),
            *("--task-log-level", self.task_log_level),
        ]

    def describe(self) -> str:
        parts = [
            f"kinds {', '.join(self.kinds)}; workers {_csv(self.workers)} x concurrency "
            f"{_csv(self.concurrency)}, {self.tasks} noop / {self.effect_tasks} effect tasks "
            f"each, median of {self.runs} run(s)",
            "ceiling beside each noop row" if self.ceiling else "no ceiling",
            f"offered load {self.rate:g}/s x {self.rate_tasks} tasks at {self.rate_workers} "
            f"worker(s), concurrency {self.rate_concurrency}, median of {self.rate_runs} run(s)"
            if self.rate
            else "no offered load",
            f"soak {self.soak} tasks at {self.soak_workers} worker(s), concurrency {self.soak_at}"
            if self.soak
            else "no soak",
            f"enqueue {self.enqueue_single} single"
            + (
                f" (also from {self.enqueue_producers} producers at once)"
                if self.enqueue_producers
                else ""
            )
            + f", {self.enqueue_bulk} bulk, median of {ENQUEUE_ROUNDS} rounds"
            + ("" if self.enqueue_fsync else ", no pg_test_fsync"),
            f"scheduler {self.schedules} one-second schedules on {self.schedule_workers} "
            f"worker(s) for {self.schedule_secs:g} s"
            if self.schedules
            else "no scheduler",
            f"claim at {self.big_claim_rows} pending rows"
            if self.big_claim_rows
            else "no big-table claim",
            f"{self.stale_stats_rows} tasks on stale statistics at one worker, concurrency "
            f"{max(self.concurrency)}"
            if self.stale_stats_rows
            else "no stale-statistics backlog",
            f"payload {self.payload_bytes} bytes, lease {self.lease_ttl:g} s, pool "
            + (f"{self.pool_size}" if self.pool_size else "concurrency + 2"),
            (
                "prefetch auto (the worker's default, no flag)"
                if self.prefetch == AUTO
                else f"prefetch {self.prefetch}"
            )
            + f", per-task log lines at {self.task_log_level}",
        ]
        return "; ".join(parts)

    def command(self) -> str:
        text = (
            f"python manage.py rivet_chaos bench --workers {_csv(self.workers)} "
            f"--concurrency {_csv(self.concurrency)} --kind {','.join(self.kinds)} "
            f"--tasks {self.tasks} --effect-tasks {self.effect_tasks} --runs {self.runs} "
            f"--rate {self.rate or 0:g} --rate-tasks {self.rate_tasks} "
            f"--rate-workers {self.rate_workers} --rate-concurrency {self.rate_concurrency} "
            f"--rate-runs {self.rate_runs} "
            f"--enqueue-single {self.enqueue_single} --enqueue-bulk {self.enqueue_bulk} "
            f"--enqueue-producers {self.enqueue_producers} "
            f"--payload-bytes {self.payload_bytes} --lease-ttl-secs {self.lease_ttl:g}"
        )
        if self.soak:
            text += f" --soak {self.soak} --soak-workers {self.soak_workers}"
            text += f" --soak-concurrency {self.soak_at}"
            if self.soak_vacuum_secs is not None:
                text += f" --soak-vacuum-secs {self.soak_vacuum_secs:g}"
        text += f" --schedules {self.schedules} --big-claim-rows {self.big_claim_rows}"
        text += f" --stale-stats-rows {self.stale_stats_rows}"
        if self.schedules:
            text += f" --schedule-workers {self.schedule_workers}"
            text += f" --schedule-secs {self.schedule_secs:g}"
        if self.pool_size:
            text += f" --pool-size {self.pool_size}"
        if self.prefetch != AUTO:
            text += f" --prefetch {self.prefetch}"
        if self.task_log_level != "info":
            text += f" --task-log-level {self.task_log_level}"
        text += "" if self.enqueue_fsync else " --no-fsync"
        return text + ("" if self.ceiling else " --no-ceiling")


def _csv(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def _or_none(rate: float | None) -> str:
    """A rate for the progress lines, or "not measured"."""
    return "not measured" if not rate else f"{rate:,.0f}/s"


def _settle_note(checkpointed: bool) -> str:
    """What the bench does to the server before each drain and each enqueue measurement."""
    if checkpointed:
        return (
            "the bench queue emptied, `VACUUM (ANALYZE) rivet_task`, then `CHECKPOINT` (no "
            "measurement shares the disk with the checkpoint of the ones before it)"
        )
    return (
        "the bench queue emptied and `VACUUM (ANALYZE) rivet_task`; no `CHECKPOINT`: this role "
        "may not ask for one (a superuser or a member of pg_checkpoint may), so a measurement "
        "may share the disk with the checkpoint of the ones before it"
    )


@dataclass
class _Progress:
    total: int
    say: Callable[[str], None]
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def step(self, note: str) -> None:
        self.done += 1
        self.say(progress(self.done, self.total, note, self.started))


class Bench:
    """Runs every part of one benchmark and writes results.md, results.json and the plot."""

    def __init__(self, options: BenchOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.log_dir = Path(".")
        self.effect_url = ""
        self.effect_pid = 0
        self.busy: float | None = None
        self.soak_vacuum = 0.0
        self.soak_vacuums = 0
        self.scheduler: dict[str, Any] | None = None
        self.big_claim: dict[str, Any] | None = None
        self.stale: dict[str, Any] | None = None
        self.progress = _Progress(total=self._steps(), say=say)

    def _steps(self) -> int:
        o = self.options
        grid = len(o.workers) * len(o.concurrency) * o.runs
        steps = grid * len(o.kinds) + (grid if o.ceiling and "noop" in o.kinds else 0)
        steps += o.rate_runs if o.rate else 0
        steps += 1 if o.soak else 0
        steps += 1 if o.enqueue_single or o.enqueue_bulk else 0
        steps += 1 if o.schedules else 0
        steps += 1 if o.big_claim_rows else 0
        steps += 2 if o.stale_stats_rows else 0
        return steps

    def run(self) -> str:
        require_pidfd()
        if connections["default"].vendor != "postgresql":
            raise BenchError("the benchmark measures the PostgreSQL store; set DATABASE_URL")
        if "effect" in self.options.kinds and not self.options.effect_database_url.startswith(
            ("postgres://", "postgresql://")
        ):
            raise BenchError(
                "--kind effect runs the effect service on EFFECT_DATABASE_URL, which must be a "
                "PostgreSQL URL (postgres://USER@HOST:PORT/NAME); or leave effect out of --kind"
            )
        if self.options.plot_out is not None:
            from bench.plot import require_matplotlib

            require_matplotlib()
        self._migrate()
        setup = describe_setup(self.options)
        if self.options.soak:
            self.soak_vacuum = self._soak_vacuum_every()
            setup.append(("soak vacuum", self._soak_vacuum_note()))
        with connections["default"].cursor() as cursor:
            checkpointed = settle_server(cursor)
        setup.append(("before each measurement", _settle_note(checkpointed)))
        self.busy = busy_load()
        for label, value in setup:
            self.say(f"{label}: {value}")
        self.log_dir = Path(tempfile.mkdtemp(prefix="rivet-bench-"))
        try:
            enqueue, rows = self._measure_all()
        except BaseException:
            self.say(f"worker logs kept in {self.log_dir}")
            raise
        shutil.rmtree(self.log_dir, ignore_errors=True)
        self._empty()
        return self._write(setup, rows, enqueue)

    def _migrate(self) -> None:
        executor = MigrationExecutor(connections["default"])
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            self.say("the queue database lacks migrations: running migrate first")
            call_command("migrate", verbosity=0, interactive=False)

    def _measure_all(self) -> tuple[dict[str, Any] | None, list[Row]]:
        o = self.options
        enqueue = None
        if o.enqueue_single or o.enqueue_bulk:
            enqueue = measure_enqueue(
                single=o.enqueue_single,
                bulk=o.enqueue_bulk,
                batch=INSERT_BATCH,
                queue=o.queue,
                producers=o.enqueue_producers,
                fsync=o.enqueue_fsync,
                runs=ENQUEUE_ROUNDS,
            )
            self.progress.step(
                f"enqueue: {enqueue['single_per_s']:,.0f}/s single, "
                f"{enqueue['producers_per_s']:,.0f}/s from {enqueue['producers']} producers "
                f"(their statement from pgbench: {_or_none(enqueue['producers_ceiling_per_s'])}), "
                f"{enqueue['bulk_per_s']:,.0f}/s bulk"
            )
        rows: list[Row] = []
        ceilings: dict[tuple[int, int], list[float]] = {}
        with self._effect_service():
            # noop first: its ceilings are shown beside the effect rows of the same configuration
            for kind in sorted(o.kinds, key=KINDS.index):
                for workers in o.workers:
                    for concurrency in o.concurrency:
                        rows.append(self._configuration(kind, workers, concurrency, ceilings))
        if o.rate:
            runs = []
            for n in range(o.rate_runs):
                runs.append(
                    self._measure(
                        RATE, "noop", o.rate_workers, o.rate_concurrency, o.rate_tasks, o.rate
                    )
                )
                self.progress.step(
                    f"offered {o.rate:g}/s, run {n + 1}: end to end p50 "
                    f"{runs[-1].end_to_end[0] * 1000:.1f} ms, p99 "
                    f"{runs[-1].end_to_end[2] * 1000:.1f} ms"
                )
            rows.append(median_row(runs))
        if o.soak:
            soak = self._measure(SOAK, "noop", o.soak_workers, o.soak_at, o.soak)
            soak = with_ceiling(soak, ceilings.get((o.soak_workers, o.soak_at), []))
            rows.append(soak)
            self.progress.step(
                f"soak of {o.soak}: {soak.throughput:,.0f}/s, last tenth "
                f"{soak.soak_ratio or 0:.0%} of the first, {self.soak_vacuums} VACUUM(s) by the "
                "bench meanwhile"
            )
        if o.schedules:
            self.scheduler = self._measure_scheduler()
        if o.big_claim_rows:
            self._empty(vacuum=True)
            self.big_claim = measure_big_claim(o.big_claim_rows)
            verdict = "; ".join(self.big_claim["problems"]) or "index scan in rank order"
            self.progress.step(
                f"claim at {o.big_claim_rows:,} pending rows: {verdict}, "
                f"{self.big_claim['per_flush_ms']:.2f} ms per flush"
            )
        if o.stale_stats_rows:
            self.stale = self._measure_stale()
        return enqueue, rows

    def _measure_stale(self) -> dict[str, Any]:
        """A backlog drained on the statistics of an empty table, then on fresh statistics.

        Each drain starts from the bench queue emptied and ``VACUUM (ANALYZE)`` (statistics
        of an empty table); the stale one inserts its backlog with no ANALYZE after, the other
        ANALYZEs it (as the soak does). One worker at the largest concurrency.
        """
        o = self.options
        rows, concurrency = o.stale_stats_rows, max(o.concurrency)
        drains: dict[str, dict[str, Any]] = {}
        for key, analyze in (("stale", False), ("analyzed", True)):
            self._empty(vacuum=True)
            self._insert(self._workload("noop", rows), analyze=analyze)
            with connections["default"].cursor() as cursor:
                cursor.execute(RELTUPLES)
                (reltuples,) = cursor.fetchone()
            workers = self._start("noop", 1, concurrency)
            try:
                self._wait_drained(workers, rows, f"{key} statistics 1x{concurrency}")
            finally:
                for worker in workers:
                    worker.stop(STOP_TIMEOUT_SECS)
            row = self._figures(BACKLOG, "noop", 1, concurrency, None, None)
            drains[key] = {
                "reltuples": reltuples,
                "tasks": row.tasks,
                "per_s": row.throughput,
                "service_p50_ms": row.service[0] * 1000,
                "service_p99_ms": row.service[2] * 1000,
            }
            self.progress.step(
                f"{rows:,} tasks on {key} statistics (reltuples {reltuples:,}): "
                f"{row.throughput:,.0f}/s"
            )
        self._empty(vacuum=True)
        return stale_result(rows, concurrency, drains["stale"], drains["analyzed"])

    def _measure_scheduler(self) -> dict[str, Any]:
        o = self.options
        self._empty(vacuum=True)
        workers = self._start("noop", o.schedule_workers, 1)
        try:
            self._wait_ready(workers)
            result = measure_scheduler(
                schedules=o.schedules,
                workers=workers,
                secs=o.schedule_secs,
                check=lambda: self._check_alive(workers),
            )
        finally:
            for worker in workers:
                worker.stop(STOP_TIMEOUT_SECS)
        p99 = result["lateness_p99_s"]
        self.progress.step(
            f"scheduler, {o.schedules} schedules on {o.schedule_workers} workers: "
            f"{result['enqueued_twice']} twice, {result['missing']} missing, lateness p99 "
            + ("-" if p99 is None else f"{p99:.3f} s")
            + f", {max(result['cpu_secs_per_1000_ticks'], 0.0):.3f} CPU s per 1 000 ticks"
        )
        return result

    def _configuration(
        self,
        kind: str,
        workers: int,
        concurrency: int,
        ceilings: dict[tuple[int, int], list[float]],
    ) -> Row:
        o = self.options
        key = (workers, concurrency)
        runs = []
        for n in range(o.runs):
            runs.append(self._measure(BACKLOG, kind, workers, concurrency, o.tasks_of(kind)))
            self.progress.step(
                f"{kind}, {workers} worker(s) x c={concurrency}, run {n + 1}: "
                f"{runs[-1].throughput:,.0f}/s, peak RSS {runs[-1].rss_mb or 0:.0f} MB"
            )
            if o.ceiling and kind == "noop":
                ceilings.setdefault(key, []).append(self._ceiling(workers, concurrency))
                batch = o.batch_for(concurrency)
                self.progress.step(
                    f"ceiling, {workers} connection(s) x batch {batch}, run {n + 1}: "
                    f"{ceilings[key][-1]:,.0f}/s"
                )
        return with_ceiling(median_row(runs), ceilings.get(key, []))

    # -- one measurement ----------------------------------------------------------------------

    def _measure(
        self,
        mode: str,
        kind: str,
        count: int,
        concurrency: int,
        tasks: int,
        rate: float | None = None,
    ) -> Row:
        self._empty(vacuum=True)
        if kind == "effect":
            self._empty_effects()
        items = self._workload(kind, tasks)
        window = None
        if rate is None and mode == SOAK:
            # a soak's insert takes seconds: its one worker starts once the backlog is in
            self._insert(items)
            workers = self._start(kind, count, concurrency)
        elif rate is None:
            workers = self._start_gated(kind, count, concurrency)
            self._insert(items, analyze=False, at_once=True)
            if kind == "effect":
                window = cpu.SteadyWindow(tasks, lambda: self._cpu_snapshot(workers))
        else:
            workers = self._start(kind, count, concurrency)
            self._wait_ready(workers)
            self._warm_up(kind, count * concurrency * WARM_UP_PER_SLOT, workers)
            self._offer(items, rate, workers)
        try:
            self._wait_drained(
                workers,
                tasks,
                f"{mode} {kind} {count}x{concurrency}",
                vacuum_every=self.soak_vacuum if mode == SOAK else 0.0,
                on_look=window.look if window is not None else None,
            )
            rss = max((peak_rss_mb(w.pid) or 0.0) for w in workers) or None
        finally:
            for worker in workers:
                worker.stop(STOP_TIMEOUT_SECS)
        row = self._figures(mode, kind, count, concurrency, rss, rate)
        if window is not None and window.per_task_ms() is not None:
            row = replace(row, cpu_ms=window.per_task_ms())
        if mode == SOAK:
            row = self._soak_windows(row)
        return row

    def _cpu_snapshot(self, workers: list[Child]) -> cpu.Snapshot:
        return cpu.snapshot(
            {
                "service": [self.effect_pid],
                "workers": [w.pid for w in workers],
                "postgres": cpu.postgres_pids(),
            }
        )

    def _soak_vacuum_every(self) -> float:
        """Seconds between the soak's VACUUMs (0: none): --soak-vacuum-secs, or none."""
        return self.options.soak_vacuum_secs or 0.0

    def _soak_vacuum_note(self) -> str:
        autovacuum = self._autovacuum()
        if not self.soak_vacuum:
            return (
                f"none by the bench; the server's autovacuum is {autovacuum} (the worker's "
                "claim floor keeps its claims from walking the dead index entries the drain "
                "leaves)"
            )
        return (
            f"`VACUUM rivet_task` every {self.soak_vacuum:g} s while the soak drains, by the "
            f"bench (--soak-vacuum-secs); the server's autovacuum is {autovacuum}"
        )

    def _autovacuum(self) -> str:
        warnings = PostgresStore(using="default").server_warnings()  # what a worker would log
        return "off" if any(name == "autovacuum_off" for name, _ in warnings) else "on"

    def _ceiling(self, connections_: int, concurrency: int) -> float:
        o = self.options
        batch = o.batch_for(concurrency)
        self._empty(vacuum=True)
        self._insert(self._workload("noop", o.tasks))
        children = ceiling.start(
            connections=connections_,
            queue=o.queue,
            batch=batch,
            lease_ttl=o.lease_ttl,
            log_dir=self.log_dir,
        )
        started = time.monotonic()
        try:
            while any(child.poll() is None for child in children):
                if time.monotonic() - started > o.timeout + o.tasks / 100:
                    raise BenchError(
                        f"the ceiling loops did not drain {o.tasks} tasks within "
                        f"{o.timeout + o.tasks / 100:g} s"
                    )
                time.sleep(0.05)
        finally:
            for child in children:
                child.stop(STOP_TIMEOUT_SECS)
        failed = [c for c in children if c.returncode != 0]
        if failed:
            raise BenchError(
                f"a ceiling loop failed ({failed[0].returncode}):\n{failed[0].log_tail()}"
            )
        if self._pending():
            raise BenchError(f"the ceiling loops left {self._pending()} task(s) pending")
        return self._figures(BACKLOG, "noop", connections_, concurrency, None, None).throughput

    def _workload(self, kind: str, tasks: int) -> list[dict]:
        pad = "x" * self.options.payload_bytes
        return [{"kind": kind, "payload": {"pad": pad}, "queue": self.options.queue}] * tasks

    def _insert(self, items: list[dict], *, analyze: bool = True, at_once: bool = False) -> None:
        """Enqueue ``items`` in batches; ``at_once``: in one transaction, so workers already
        running find the whole backlog at its commit."""
        with transaction.atomic(using="default") if at_once else contextlib.nullcontext():
            for first in range(0, len(items), INSERT_BATCH):
                enqueue_many(items[first : first + INSERT_BATCH], using="default")
        # Statistics for the table as the workers will find it: what a measurement of rivet at
        # its steady state assumes (a server's autovacuum analyzes a table that grew). The
        # worker's plans no longer depend on it (the stale-statistics part drains without).
        if analyze:
            with connections["default"].cursor() as cursor:
                cursor.execute(queries.BENCH_ANALYZE)

    def _empty(self, *, vacuum: bool = False) -> None:
        """Delete the queue's tasks; with ``vacuum``, also reclaim them (and every earlier
        run's) and checkpoint (``settle_server``), so a measurement does not depend on the dead
        rows or the dirty pages the runs before it left."""
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": self.options.queue})
            if vacuum:
                settle_server(cursor)

    def _empty_effects(self) -> None:

        with effect_connection(self.options.effect_database_url) as conn:
            conn.execute(queries.EFFECT_EMPTY)

    @contextlib.contextmanager
    def _effect_service(self) -> Iterator[None]:
        if "effect" not in self.options.kinds:
            yield
            return
        service = EffectService(
            database_url=self.options.effect_database_url,
            port=free_port(),
            threads=16,
            log_path=self.log_dir / "effect-service.log",
        )
        try:
            service.start(timeout=60.0)
        except RuntimeError as exc:
            raise BenchError(f"could not start the effect service: {exc}") from exc
        self.effect_url, self.effect_pid = service.url, service.pid or 0
        try:
            yield
        finally:
            service.stop()
            self.effect_url, self.effect_pid = "", 0

    def _start(self, kind: str, count: int, concurrency: int) -> list[Child]:
        extra = {"EFFECT_SERVICE_URL": self.effect_url} if kind == "effect" else {}
        env = worker_env(database_url(), **extra)
        name = f"bench-{kind}-{count}x{concurrency}"
        return fleet.start_workers(
            name, count, self.options.worker_args(concurrency), env, self.log_dir
        )

    def _start_gated(self, kind: str, count: int, concurrency: int) -> list[Child]:
        """Workers started, listening and warmed up on an empty queue, for a backlog inserted
        next in one commit: every worker starts draining at that commit. Inserting first and
        then starting the processes would measure their start-up instead: a ``manage.py
        rivet_worker`` takes longer to start than a noop row takes to drain, and the first worker
        up would drain while the others were still importing Django
        (docs/decisions/0015-bench-workers-start-first.md)."""
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.SERVER_NOW)
            (since,) = cursor.fetchone()
        workers = self._start(kind, count, concurrency)
        self._wait_ready(workers)
        self._wait_listening(workers, since)
        self._warm_up(kind, count * concurrency * WARM_UP_PER_SLOT, workers)
        return workers

    def _wait_listening(self, workers: list[Child], since: Any) -> None:
        """Until as many sessions connected since ``since`` (the server's clock) as workers sit
        idle after a LISTEN: each worker's wake-up listener (it listens once its loop's first
        claim came back empty), asleep until an enqueue notifies it."""
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            with connections["default"].cursor() as cursor:
                cursor.execute(queries.BENCH_LISTENING, {"since": since})
                (listening,) = cursor.fetchone()
            if listening >= len(workers):
                return
            self._check_alive(workers)
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{listening} of {len(workers)} workers listen for wake-ups after "
                    f"{READY_TIMEOUT_SECS:g} s"
                )
            time.sleep(0.05)

    def _wait_ready(self, workers: list[Child]) -> None:
        """Until every worker logged worker_started (offered load must not wait for start-up)."""
        fleet.wait_ready(workers, READY_TIMEOUT_SECS, BenchError, "a benchmark worker")

    def _warm_up(self, kind: str, tasks: int, workers: list[Child]) -> None:
        """Drain a few tasks, then delete them: the first claims (connections opened, the wake-up
        listener running) must not land inside the latency measured at the offered rate."""
        self._insert(self._workload(kind, tasks))
        self._wait_drained(workers, tasks, "warm-up")
        self._empty()

    def _offer(self, items: list[dict], rate: float, workers: list[Child]) -> None:
        """Enqueue on a schedule: item i at i / rate seconds. Each is sent when it falls due, one
        at a time with ``enqueue`` (as a web request would); the ones due together, if the
        producer fell behind, with one ``enqueue_many``."""
        started = time.monotonic()
        sent = 0
        while sent < len(items):
            wait = started + sent / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # until the next item is due, not a fixed tick
            due = min(len(items), int((time.monotonic() - started) * rate) + 1)
            if due == sent + 1:
                enqueue(**items[sent], using="default")
            else:
                enqueue_many(items[sent:due], using="default")
            sent = due
        self._check_alive(workers)

    def _wait_drained(
        self,
        workers: list[Child],
        tasks: int,
        note: str,
        vacuum_every: float = 0.0,
        on_look: Callable[[int], None] | None = None,
    ) -> None:
        """Until nothing is pending; gives up when nothing finished for ``timeout`` seconds.

        With ``vacuum_every``, runs ``VACUUM rivet_task`` that often meanwhile (autovacuum's
        work, on a server where it is off); ``on_look`` is told the tasks done at each look."""
        started = reported = moved = vacuumed = time.monotonic()
        last = None
        while pending := self._pending():
            if on_look is not None:
                on_look(tasks - pending)
            self._check_alive(workers)
            now = time.monotonic()
            if vacuum_every and now - vacuumed >= vacuum_every:
                with connections["default"].cursor() as cursor:
                    cursor.execute(queries.SOAK_VACUUM)
                vacuumed = now = time.monotonic()
                self.soak_vacuums += 1
            if pending != last:
                last, moved = pending, now
            elif now - moved > self.options.timeout:
                raise BenchError(
                    f"{pending} task(s) still pending, none finished for {self.options.timeout:g} s"
                )
            if now - reported >= DRAIN_REPORT_SECS:
                self.say("  " + progress(tasks - pending, tasks, note, started))
                reported = now
            # the count is not free on a big backlog: a long drain is asked less often (its
            # figures come from the rows' timestamps, not from when the drain was noticed)
            time.sleep(0.1 if now - started < LONG_DRAIN_SECS else 0.5)

    def _pending(self) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.PENDING_COUNT, {"queue": self.options.queue})
            return cursor.fetchone()[0]

    def _check_alive(self, workers: list[Child]) -> None:
        fleet.check_alive(workers, BenchError, "a benchmark worker")

    # -- figures -------------------------------------------------------------------------------

    def _figures(
        self,
        mode: str,
        kind: str,
        count: int,
        concurrency: int,
        rss: float | None,
        rate: float | None,
    ) -> Row:
        params: dict[str, Any] = {"queue": self.options.queue, "ttl": self.options.lease_ttl}
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.BENCH_FIGURES, params)
            done, window, end_to_end, service, redelivered = cursor.fetchone()
            latencies: tuple[float, ...] = ()
            if mode == RATE:
                cursor.execute(queries.BENCH_END_TO_END, params)
                latencies = tuple(value for (value,) in cursor.fetchall())
        return Row(
            mode=mode,
            kind=kind,
            workers=count,
            concurrency=concurrency,
            tasks=done,
            throughput=done / window if window else 0.0,
            end_to_end=tuple(end_to_end or (0.0, 0.0, 0.0)),
            service=tuple(service or (0.0, 0.0, 0.0)),
            redelivered=redelivered,
            rss_mb=rss,
            rate=rate,
            latencies=latencies,
        )

    def _soak_windows(self, row: Row) -> Row:
        params: dict[str, Any] = {"queue": self.options.queue, "ttl": self.options.lease_ttl}
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.BENCH_SOAK_TENTHS, params)
            tenths = {
                tenth: Window(
                    tasks=count,
                    throughput=count / secs if secs else 0.0,
                    service=tuple(service or (0.0, 0.0, 0.0)),
                )
                for tenth, count, secs, service in cursor.fetchall()
            }
        return replace(row, first=tenths.get(1), last=tenths.get(10))

    # -- output --------------------------------------------------------------------------------

    def _write(self, setup: list[tuple[str, str]], rows: list[Row], enqueue: dict | None) -> str:
        o = self.options
        plot = o.plot_out
        if plot is not None:
            from bench.plot import write_plot

            stamp = dict(setup)["date"]
            title = f"rivet bench, {stamp}: {machine()}, load at the end {load()}"
            if self.busy is not None:
                title += (
                    f"\nNOT A RESULT: load average {self.busy:.2f} at the start, above the cores"
                )
            write_plot(plot, rows, title=title)
        text = render(
            setup=setup,
            rows=rows,
            enqueue=enqueue,
            plot=plot,
            out=o.out,
            end_load=load(),
            busy=self.busy,
            scheduler=self.scheduler,
            big_claim=self.big_claim,
            stale=self.stale,
        )
        write_results(o.out, text)
        o.json_out.parent.mkdir(parents=True, exist_ok=True)
        o.json_out.write_text(
            json.dumps(
                to_json(
                    setup=setup,
                    rows=rows,
                    enqueue=enqueue,
                    busy=self.busy,
                    scheduler=self.scheduler,
                    big_claim=self.big_claim,
                    stale=self.stale,
                ),
                indent=1,
            )
            + "\n"
        )
        self.say("")
        self.say(text)
        written = [o.out, o.json_out, *([plot] if plot else [])]
        self.say("written: " + ", ".join(map(str, written)))
        return text


def peak_rss_mb(pid: int) -> float | None:
    """The peak resident set of a live process (VmHWM in /proc/PID/status), in MiB."""
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            if text.startswith("VmHWM:"):
                return int(text.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
