"""The benchmark: throughput and latency of noop tasks, measured from the task rows only.

For each worker count: empty the benchmark queue, then either insert the whole workload and
start the workers (a full backlog: measures throughput), or start the workers and offer the
workload at ``rate`` tasks per second (measures latency below capacity). Every figure comes
from timestamps the database server wrote (see docs/benchmarking.md):

- end to end = updated_at - created_at (enqueue to ack);
- service time = updated_at - visible_at + lease_ttl (claim to ack: a claim sets
  visible_at = now() + lease_ttl and the ack leaves it; exact while no heartbeat fell inside
  the attempt, which a noop's milliseconds under a 30 s lease never meet);
- throughput = done tasks / (last ack - first claim).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connections

from chaos_project.chaos import queries
from chaos_project.chaos.benchreport import Row, describe_setup, render_section, write_results
from chaos_project.chaos.pidfd import Child, require_pidfd
from chaos_project.services import MANAGE_PY, database_url, worker_env
from rivet.errors import RivetError
from rivet.producer import enqueue_many

READY_TIMEOUT_SECS = 120.0
STOP_TIMEOUT_SECS = 30.0


class BenchError(RivetError):
    """The benchmark could not measure (a worker died, the queue never drained)."""


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    workers: tuple[int, ...] = (1, 4, 16)
    tasks: int = 3000
    rate: float | None = None
    concurrency: int = 4
    payload_bytes: int = 100
    lease_ttl: float = 30.0
    pool_size: int = 6
    out: Path = field(default_factory=lambda: Path(settings.BASE_DIR) / "bench" / "results.md")
    queue: str = "bench"
    timeout: float = 600.0

    def worker_args(self) -> list[str]:
        return [
            *("--queue", self.queue, "--concurrency", str(self.concurrency)),
            *("--pool-size", str(self.pool_size), "--lease-ttl-secs", f"{self.lease_ttl:g}"),
            *("--log-format", "json"),
        ]

    def command(self) -> str:
        text = (
            f"python manage.py rivet_chaos bench --workers {','.join(map(str, self.workers))} "
            f"--tasks {self.tasks} --concurrency {self.concurrency} "
            f"--payload-bytes {self.payload_bytes} --lease-ttl-secs {self.lease_ttl:g} "
            f"--pool-size {self.pool_size}"
        )
        return text + (f" --rate {self.rate:g}" if self.rate else "")


class Bench:
    """Runs every worker count of one benchmark and writes the results file."""

    def __init__(self, options: BenchOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say

    def run(self) -> str:
        require_pidfd()
        if connections["default"].vendor != "postgresql":
            raise BenchError("the benchmark measures the PostgreSQL store; set DATABASE_URL")
        setup = describe_setup(self.options)
        log_dir = Path(tempfile.mkdtemp(prefix="rivet-bench-"))
        rows = []
        try:
            for count in self.options.workers:
                rows.append(self._measure(count, log_dir))
                self.say(f"measured {count} worker(s): {rows[-1].throughput:.0f} task/s")
        except BaseException:
            self.say(f"worker logs kept in {log_dir}")
            raise
        shutil.rmtree(log_dir, ignore_errors=True)
        self._empty()
        section = render_section(self.options, setup, rows)
        write_results(self.options.out, section)
        self.say(section)
        self.say(f"written to {self.options.out}")
        return section

    def _measure(self, count: int, log_dir: Path) -> Row:
        self._empty()
        items = self._workload()
        if self.options.rate is None:
            enqueue_many(items, using="default")
            workers = self._start(count, log_dir)
        else:
            workers = self._start(count, log_dir)
            self._wait_ready(workers)
            self._offer(items, self.options.rate, workers)
        try:
            self._wait_drained(workers)
        finally:
            for worker in workers:
                worker.stop(STOP_TIMEOUT_SECS)
        return self._figures(count)

    def _workload(self) -> list[dict]:
        pad = "x" * self.options.payload_bytes
        return [
            {"kind": "noop", "payload": {"pad": pad}, "queue": self.options.queue}
            for _ in range(self.options.tasks)
        ]

    def _empty(self) -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": self.options.queue})

    def _start(self, count: int, log_dir: Path) -> list[Child]:
        env = worker_env(database_url())
        argv = [sys.executable, str(MANAGE_PY), "rivet_worker", *self.options.worker_args()]
        return [
            Child(
                [*argv, "--owner", f"bench-{count}-{n}"],
                env=env,
                log_path=log_dir / f"bench-{count}-{n}.log",
            )
            for n in range(count)
        ]

    def _wait_ready(self, workers: list[Child]) -> None:
        """Until every worker logged worker_started (offered load must not wait for start-up)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while not all('"worker_started"' in w.log_tail(1_000_000) for w in workers):
            self._check_alive(workers)
            if time.monotonic() > deadline:
                raise BenchError(f"the workers did not start within {READY_TIMEOUT_SECS:g} s")
            time.sleep(0.1)

    def _offer(self, items: list[dict], rate: float, workers: list[Child]) -> None:
        """Enqueue on a schedule: item i at i / rate seconds, in small batches as they fall due."""
        started = time.monotonic()
        sent = 0
        while sent < len(items):
            due = min(len(items), int((time.monotonic() - started) * rate) + 1)
            if due > sent:
                enqueue_many(items[sent:due], using="default")
                sent = due
            else:
                time.sleep(min(0.005, 1 / rate))
        self._check_alive(workers)

    def _wait_drained(self, workers: list[Child]) -> None:
        deadline = time.monotonic() + self.options.timeout
        while self._pending():
            self._check_alive(workers)
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{self._pending()} task(s) still pending after {self.options.timeout:g} s"
                )
            time.sleep(0.1)

    def _pending(self) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.PENDING_COUNT, {"queue": self.options.queue})
            return cursor.fetchone()[0]

    def _check_alive(self, workers: list[Child]) -> None:
        for worker in workers:
            if worker.poll() is not None:
                raise BenchError(
                    f"a benchmark worker exited ({worker.returncode}):\n{worker.log_tail()}"
                )

    def _figures(self, count: int) -> Row:
        params = {"queue": self.options.queue, "ttl": self.options.lease_ttl}
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.BENCH_FIGURES, params)
            done, window, end_to_end, service, redelivered = cursor.fetchone()
        return Row(
            workers=count,
            tasks=done,
            throughput=done / window if window else 0.0,
            end_to_end=tuple(end_to_end or (0.0, 0.0, 0.0)),
            service=tuple(service or (0.0, 0.0, 0.0)),
            redelivered=redelivered,
        )
