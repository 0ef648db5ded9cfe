"""The scale study: throughput and latency against the number of worker processes, direct and
through PgBouncer, and the commit rate the server sustains (docs/scaling.md).

For each worker count N and each mode (``direct``: every worker connects to PostgreSQL;
``pgbouncer``: every worker goes through PgBouncer in transaction pooling, ``server_pool``
server connections shared by all), N real ``manage.py rivet_worker`` processes are started and,
once every one logged ``worker_started``:

1. latency: tasks offered at ``rate`` per second, one ``rivet.enqueue`` each, to the N idle
   workers; end to end (enqueue to ack) from the rows' own timestamps, and the CPU each
   offered task cost the server and the workers meanwhile;
2. drain: ``tasks`` noop tasks committed in one transaction (every worker is woken at once),
   drained; throughput = tasks / (first claim to last ack), from the rows. Around the drain:
   the CPU of the server's processes, the workers and PgBouncer (/proc), the WAL written
   (``pg_current_wal_lsn()``), the write transactions (the next transaction id), and the most
   server connections seen.

Then the single producer's ``rivet.enqueue`` rate with ``synchronous_commit`` on and off (set
on the producer's own session and reset after), beside ``pg_test_fsync``'s flushes per second.
Every point is measured ``runs`` times (each run goes over every point in turn), each with the
load average of the machine at its start.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from bench import cpu, fleet, scale_report
from bench.enqueue import commit_rate
from bench.pooler import Pooler, running_pooler
from chaos_project.kit import queries
from chaos_project.kit.pidfd import Child, require_pidfd
from chaos_project.kit.services import database_url, worker_env
from rivet.errors import RivetError
from rivet.producer import enqueue, enqueue_many

DIRECT, PGBOUNCER = "direct", "pgbouncer"
MODES = (DIRECT, PGBOUNCER)
COUNTS = (1, 2, 4, 8, 16, 32, 64)
READY_TIMEOUT_SECS = 180.0
STOP_TIMEOUT_SECS = 30.0
#: Offered load: tasks per worker slot drained and removed before the rate starts.
WARM_UP_PER_SLOT = 4
#: Server connections a direct worker held at most in the study (its pool and its LISTEN).
DIRECT_CONNECTIONS_PER_WORKER = 4

SERVER_STATE = """
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
"""
SERVER_CONNECTIONS = """
SELECT count(*), count(*) FILTER (
    -- a listening connection's last statement: its LISTEN, or, beside a transaction pooler, the
    -- waiter locks it takes right after (the wake-up gate, docs/scaling.md)
    WHERE query ILIKE 'LISTEN%%' OR query LIKE 'SELECT rivet_wait_hold(%%'
)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
    AND backend_type = 'client backend' AND NOT pid = ANY(%(besides)s)
"""
MAX_CONNECTIONS = "SELECT current_setting('max_connections')::int"
SYNCHRONOUS_COMMIT = "SELECT set_config('synchronous_commit', %s, false)"


class ScaleError(RivetError):
    """The scale study could not measure (a worker died, the queue never drained)."""


@dataclass(frozen=True, kw_only=True)
class ScaleOptions:
    counts: tuple[int, ...] = COUNTS
    modes: tuple[str, ...] = MODES
    tasks: int = 10000
    rate: float = 300.0
    rate_tasks: int = 1200
    concurrency: int = 4
    server_pool: int = 20
    runs: int = 2
    #: Single enqueues timed at each synchronous_commit setting; 0: not measured.
    enqueue: int = 2000
    fsync: bool = True
    #: VACUUM the task table between the latency part and the drain. It also makes the server
    #: plan the direct workers' prepared flushes again, on the full table: without it they keep
    #: the plans made on the near-empty table of the latency part (docs/scaling.md).
    vacuum_before_drain: bool = False
    lease_ttl: float = 30.0
    task_log_level: str = "info"
    queue: str = "scale"
    timeout: float = 120.0
    out: Path = field(default_factory=lambda: Path(settings.BASE_DIR) / "bench" / "scale.md")
    json_path: Path | None = None  # None: ``out`` with the suffix .json
    plot: Path | None = None  # None: docs/img/scaling.png
    no_plot: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not self.counts or min(self.counts) < 1:
            problems.append(f"--workers takes counts of 1 or more, got {self.counts}")
        unknown = sorted(set(self.modes) - set(MODES))
        if not self.modes or unknown:
            problems.append(f"--modes takes {', '.join(MODES)}; got {', '.join(self.modes)}")
        for name in ("tasks", "rate_tasks", "concurrency", "server_pool", "runs"):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be 1 or more")
        if not self.rate > 0:
            problems.append(f"--rate must be above 0, got {self.rate}")
        if problems:
            raise ScaleError("; ".join(problems))

    @property
    def json_out(self) -> Path:
        return self.json_path or self.out.with_suffix(".json")

    @property
    def plot_out(self) -> Path | None:
        default = Path(settings.BASE_DIR) / "docs" / "img" / "scaling.png"
        return None if self.no_plot else (self.plot or default)

    def worker_args(self) -> list[str]:
        return [
            *("--queue", self.queue, "--concurrency", str(self.concurrency)),
            *("--pool-size", str(self.concurrency + 2)),
            *("--lease-ttl-secs", f"{self.lease_ttl:g}", "--log-format", "json"),
            *("--task-log-level", self.task_log_level),
        ]

    def command(self) -> str:
        text = (
            f"python manage.py rivet_scale --workers {','.join(map(str, self.counts))} "
            f"--modes {','.join(self.modes)} --tasks {self.tasks} --rate {self.rate:g} "
            f"--rate-tasks {self.rate_tasks} --concurrency {self.concurrency} "
            f"--server-pool {self.server_pool} --runs {self.runs} --enqueue {self.enqueue}"
        )
        text += " --vacuum-before-drain" if self.vacuum_before_drain else ""
        return text + ("" if self.fsync else " --no-fsync")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def server_pids() -> list[int]:
    """The queue server's postmaster and its children, found from this session's backend (so
    another cluster on the machine is not counted); empty when the server is elsewhere."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    postmaster = _parent(backend)
    if postmaster is None:
        return []
    return [postmaster, *(pid for pid in cpu.postgres_pids() if _parent(pid) == postmaster)]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class Scale:
    """Runs the whole study and writes scale.md, scale.json and the plot."""

    def __init__(self, options: ScaleOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.log_dir = Path(".")
        self.direct_url = ""
        self.pooler: Pooler | None = None

    def run(self) -> dict[str, Any]:
        require_pidfd()
        if connections["default"].vendor != "postgresql":
            raise ScaleError("the scale study measures the PostgreSQL store; set DATABASE_URL")
        if self.options.plot_out is not None:
            from bench.plot import require_matplotlib

            require_matplotlib()
        self._migrate()
        self._check_connections()
        self.direct_url = database_url("default")
        setup = scale_report.setup_lines(self.options)
        for label, value in setup:
            self.say(f"{label}: {value}")
        self.log_dir = Path(tempfile.mkdtemp(prefix="rivet-scale-"))
        try:
            points, enqueue_rates = self._measure_all()
        except BaseException:
            self.say(f"worker logs kept in {self.log_dir}")
            raise
        self._empty()
        result = scale_report.result(setup, points, enqueue_rates, end_load=loadavg())
        scale_report.write(result, self.options, say=self.say)
        return result

    def _migrate(self) -> None:
        executor = MigrationExecutor(connections["default"])
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            self.say("the queue database lacks migrations: running migrate first")
            call_command("migrate", verbosity=0, interactive=False)

    def _check_connections(self) -> None:
        """Refuse before starting anything when the direct points cannot all connect."""
        if DIRECT not in self.options.modes:
            return
        with connections["default"].cursor() as cursor:
            cursor.execute(MAX_CONNECTIONS)
            (limit,) = cursor.fetchone()
            cursor.execute(
                SERVER_CONNECTIONS.replace("datname = current_database() AND ", ""),
                {"besides": []},
            )
            (used, _) = cursor.fetchone()
        needed = max(self.options.counts) * DIRECT_CONNECTIONS_PER_WORKER
        if needed > limit - used - 5:
            raise ScaleError(
                f"{max(self.options.counts)} direct workers may hold up to {needed} server "
                f"connections, and the server allows {limit} with {used} in use: raise "
                "max_connections (a server of your own), or lower --workers, or measure "
                "--modes pgbouncer only"
            )

    def _measure_all(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        o = self.options
        points: list[dict[str, Any]] = []
        with self._pooler():
            for run in range(1, o.runs + 1):
                for count in o.counts:
                    for mode in o.modes:
                        points.append(self._point(mode, count, run))
                        self.say(scale_report.point_line(points[-1]))
        enqueue_rates = self._enqueue_rates() if o.enqueue else None
        return points, enqueue_rates

    @contextlib.contextmanager
    def _pooler(self) -> Iterator[None]:
        """PgBouncer for the whole study (when a mode needs it), as ``self.pooler``."""
        if PGBOUNCER not in self.options.modes:
            yield
            return
        db = connections["default"].settings_dict
        server = {
            "host": str(db.get("HOST") or "127.0.0.1"),
            "port": str(db.get("PORT") or 5432),
            "user": str(db.get("USER") or "postgres"),
            "password": str(db.get("PASSWORD") or ""),
        }
        with running_pooler(server=server, server_pool=self.options.server_pool) as pooler:
            self.pooler = pooler
            try:
                yield
            finally:
                self.pooler = None

    # -- one point ----------------------------------------------------------------------------

    def _point(self, mode: str, count: int, run: int) -> dict[str, Any]:
        point: dict[str, Any] = {"mode": mode, "workers": count, "run": run, "load": loadavg()}
        self._empty(vacuum=True)
        workers = self._start(mode, count, run)
        try:
            self._wait_ready(workers)
            point["latency"] = self._latency(workers)
            if self.options.vacuum_before_drain:
                self._empty(vacuum=True)
            point["drain"] = self._drain(mode, workers)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.stop(STOP_TIMEOUT_SECS, terminated=True)
        point["load_end"] = loadavg()
        return point

    def _start(self, mode: str, count: int, run: int) -> list[Child]:
        if mode == PGBOUNCER:
            assert self.pooler is not None
            # through the pooler; the LISTEN bypasses it (docs/pgbouncer.md), else idle
            # workers would poll and the latency would be the poll interval's
            url = self.pooler.url(self.direct_url)
            env = worker_env(url, RIVET_LISTEN_DATABASE_URL=self.direct_url)
        else:
            env = worker_env(self.direct_url)
        name = f"scale-{mode}-{count}-run{run}"
        return fleet.start_workers(name, count, self.options.worker_args(), env, self.log_dir)

    def _wait_ready(self, workers: list[Child]) -> None:
        fleet.wait_ready(workers, READY_TIMEOUT_SECS, ScaleError, poll=0.2)

    def _latency(self, workers: list[Child]) -> dict[str, Any]:
        o = self.options
        warm = len(workers) * o.concurrency * WARM_UP_PER_SLOT
        enqueue_many(self._items(warm), using="default")
        self._wait_drained(workers)
        self._empty()
        groups = self._groups(workers)
        before = cpu.snapshot(groups)
        self._offer(self._items(o.rate_tasks), workers)
        self._wait_drained(workers)
        after = cpu.snapshot(groups)
        figures = self._figures()
        self._empty()
        return {
            "rate": o.rate,
            "tasks": figures["done"],
            "e2e_ms": figures["e2e_ms"],
            # every idle worker wakes on each enqueue's notification and claims: the CPU each
            # offered task costs grows with the workers waiting for it
            "cpu_ms": cpu.per_task_ms(before, after, figures["done"]) if figures["done"] else None,
        }

    def _drain(self, mode: str, workers: list[Child]) -> dict[str, Any]:
        o = self.options
        # the pooler's idle server connections are not a direct worker's
        besides = self.pooler.server_pids() if mode == DIRECT and self.pooler else []
        items = self._items(o.tasks)
        groups = self._groups(workers)
        lsn0, _ = self._server_state()
        inserting = cpu.snapshot(groups)
        enqueue_many(items, using="default")  # one transaction: every worker woken at once
        before = cpu.snapshot(groups)
        lsn1, xid1 = self._server_state()
        peak = self._wait_drained(workers, sample_connections=True, besides=besides)
        after = cpu.snapshot(groups)
        lsn2, xid2 = self._server_state()
        figures = self._figures()
        done = figures["done"]
        return {
            "tasks": done,
            "per_s": figures["per_s"],
            "service_ms": figures["service_ms"],
            "redelivered": figures["redelivered"],
            "cpu_ms": cpu.per_task_ms(before, after, done) if done else None,
            "cpu_ms_enqueue": cpu.per_task_ms(inserting, before, done) if done else None,
            "wal_bytes_enqueue": (lsn1 - lsn0) / done if done else None,
            "wal_bytes_drain": (lsn2 - lsn1) / done if done else None,
            "write_xacts_per_task": (xid2 - xid1) / done if done else None,
            "server_connections": peak[0],
            "listen_connections": peak[1],
            "other_connections": peak[2],
        }

    def _groups(self, workers: list[Child]) -> dict[str, list[int]]:
        groups = {"server": server_pids(), "workers": [w.pid for w in workers]}
        if self.pooler is not None:
            groups["pgbouncer"] = [self.pooler.pid]
        return groups

    # -- the queue ------------------------------------------------------------------------------

    def _items(self, tasks: int) -> list[dict]:
        return [
            {"kind": "noop", "payload": {"pad": "x" * 100}, "queue": self.options.queue}
        ] * tasks

    def _offer(self, items: list[dict], workers: list[Child]) -> None:
        """Item i falls due at i / rate seconds and is sent then, alone (as a web request
        would); the ones due together, when the producer fell behind, in one enqueue_many."""
        rate, started, sent = self.options.rate, time.monotonic(), 0
        while sent < len(items):
            wait = started + sent / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            due = min(len(items), int((time.monotonic() - started) * rate) + 1)
            if due == sent + 1:
                enqueue(**items[sent], using="default")
            else:
                enqueue_many(items[sent:due], using="default")
            sent = due
        self._check_alive(workers)

    def _wait_drained(
        self, workers: list[Child], *, sample_connections: bool = False, besides: Sequence[int] = ()
    ) -> tuple[int, int, int]:
        """Until nothing is pending (gives up after ``timeout`` seconds without progress);
        with ``sample_connections``, the most server connections seen (all, LISTENs, the
        others), but for the backends ``besides``."""
        peak, moved, last = (0, 0, 0), time.monotonic(), -1
        while pending := self._count(queries.PENDING_COUNT):
            self._check_alive(workers)
            if sample_connections:
                used, listening = self._connections(list(besides))
                now = (used, listening, used - listening)
                peak = (max(peak[0], now[0]), max(peak[1], now[1]), max(peak[2], now[2]))
            if pending != last:
                last, moved = pending, time.monotonic()
            elif time.monotonic() - moved > self.options.timeout:
                raise ScaleError(
                    f"{pending} task(s) still pending, none finished for {self.options.timeout:g} s"
                )
            time.sleep(0.1)
        return peak

    def _count(self, sql: str) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(sql, {"queue": self.options.queue})
            return cursor.fetchone()[0]

    def _connections(self, besides: list[int]) -> tuple[int, int]:
        with connections["default"].cursor() as cursor:
            cursor.execute(SERVER_CONNECTIONS, {"besides": besides})
            return cursor.fetchone()

    def _server_state(self) -> tuple[int, int]:
        with connections["default"].cursor() as cursor:
            cursor.execute(SERVER_STATE)
            lsn, xid = cursor.fetchone()
        return int(lsn), int(xid)

    def _figures(self) -> dict[str, Any]:
        params: dict[str, Any] = {"queue": self.options.queue, "ttl": self.options.lease_ttl}
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.BENCH_FIGURES, params)
            done, window, end_to_end, service, redelivered = cursor.fetchone()
        return {
            "done": done,
            "per_s": done / window if window else 0.0,
            "e2e_ms": [x * 1000 for x in end_to_end or (0.0, 0.0, 0.0)],
            "service_ms": [x * 1000 for x in service or (0.0, 0.0, 0.0)],
            "redelivered": redelivered,
        }

    def _empty(self, *, vacuum: bool = False) -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": self.options.queue})
            if vacuum:
                cursor.execute(queries.BENCH_VACUUM)

    def _check_alive(self, workers: list[Child]) -> None:
        fleet.check_alive(workers, ScaleError)

    # -- the commit rate ------------------------------------------------------------------------

    def _enqueue_rates(self) -> dict[str, Any]:
        """One producer, one ``rivet.enqueue`` at a time, with synchronous_commit on and off
        (this session's own setting, reset after), ``runs`` times each; and pg_test_fsync."""
        o = self.options
        rates: dict[str, list[float]] = {"on": [], "off": []}
        wal: dict[str, list[float]] = {"on": [], "off": []}
        server_ms: dict[str, list[float]] = {"on": [], "off": []}
        item = self._items(1)[0]
        groups = {"server": server_pids()}
        try:
            for _ in range(o.runs):
                for setting in ("on", "off"):
                    self._empty(vacuum=True)
                    with connections["default"].cursor() as cursor:
                        cursor.execute(SYNCHRONOUS_COMMIT, [setting])
                    lsn0, _ = self._server_state()
                    before = cpu.snapshot(groups)
                    started = time.perf_counter()
                    for _ in range(o.enqueue):
                        enqueue(**item, using="default")
                    rates[setting].append(o.enqueue / (time.perf_counter() - started))
                    after = cpu.snapshot(groups)
                    wal[setting].append((self._server_state()[0] - lsn0) / o.enqueue)
                    server_ms[setting].append(cpu.per_task_ms(before, after, o.enqueue)["server"])
                    self.say(f"enqueue, synchronous_commit {setting}: {rates[setting][-1]:,.0f}/s")
        finally:
            with connections["default"].cursor() as cursor:
                cursor.execute("RESET synchronous_commit")
        self._empty(vacuum=True)
        fsync = commit_rate() if o.fsync else None
        return {
            "tasks": o.enqueue,
            "per_s": rates,
            "wal_bytes": wal,
            "cpu_server_ms": server_ms,
            "fsync": fsync,
            "load": loadavg(),
        }
