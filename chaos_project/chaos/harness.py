"""One chaos run: empty both databases, fill a queue, break the workers, drain, verify.

See docs/chaos.md. The order matters: the effect service is found or started first (starting
it migrates the effect database), then both databases are emptied (unless --keep), since a
count of effects from an earlier run says nothing about this one.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from chaos_project.chaos import plan as chaos_plan
from chaos_project.chaos import queries
from chaos_project.chaos.faults import FaultSet
from chaos_project.chaos.fleet import EventLog, Fleet
from chaos_project.chaos.pidfd import require_pidfd
from chaos_project.chaos.plan import FAILPOINT, KILL, ZOMBIE, ChaosPlan, Planned
from chaos_project.chaos.report import report_lines, verdict_lines
from chaos_project.chaos.verifier import Verdict, effect_connection, verify
from chaos_project.services import EffectService, database_url, free_port, worker_env
from rivet.effect_client import EffectUnavailable, fetch_verify
from rivet.errors import RivetError
from rivet.producer import enqueue_many

TICK_SECS = 0.05
ZOMBIE_PATIENCE_SECS = 2.0  # how long a zombie event waits for a worker that holds leases
EFFECT_KIND = "chaos.effect"
EFFECT_MAX_ATTEMPTS = 10
POISON_KIND = "fail"
POISON_MAX_ATTEMPTS = 3
ENQUEUE_CHUNK = 1000


class ChaosError(RivetError):
    """The run could not be carried out (not: an invariant failed); the message says why."""


@dataclass(frozen=True, kw_only=True)
class ChaosOptions:
    effect_database_url: str
    tasks: int = 500
    workers: int = 4
    duration: float = 15.0
    seed: int | None = None
    keep: bool = False
    lease_ttl: float = 2.0
    queue: str = "chaos"
    concurrency: int = 4
    poison: int = 2
    effect_url: str | None = None
    own_effect_service: bool = False
    drain_timeout: float = 60.0
    keep_logs: bool = False
    faults: frozenset[str] = frozenset()  # chaos_project.chaos.faults.FAULTS

    def worker_args(self) -> list[str]:
        return [
            *("--queue", self.queue, "--lease-ttl-secs", str(self.lease_ttl)),
            *("--concurrency", str(self.concurrency), "--pool-size", str(self.concurrency + 2)),
            *("--poll-interval", "0.2", "--shutdown-timeout", "5", "--log-format", "json"),
            *("--retry-backoff-secs", "0.05", "--retry-backoff-cap-secs", "0.5"),
        ]


@dataclass(frozen=True)
class ChaosResult:
    verdict: Verdict
    chaos: dict[str, int]
    log_dir: Path
    lines: list[str]
    faults: dict[str, int] = field(default_factory=dict)


class ChaosRun:
    """Carries out one run; ``say`` receives every line of output as it happens."""

    def __init__(self, options: ChaosOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.seed = options.seed if options.seed is not None else chaos_plan.new_seed()
        # -- faults hook: the opt-in faults (--faults); with none, every hook does nothing --
        self.faults = FaultSet(
            options.faults, seed=self.seed, duration=options.duration, say=self.say
        )

    def run(self) -> ChaosResult:
        require_pidfd()
        self._require_postgres()
        if self.options.workers < 2:
            raise ChaosError(
                "the chaos run needs at least 2 workers: a stopped worker's tasks must be taken "
                "by another one, or the fence is never tested (F2)"
            )
        o = self.options
        self.faults.check(keep=o.keep, effect_url=o.effect_url)  # faults hook
        given = "given" if o.seed is not None else "random"
        self.say(f"seed {self.seed} ({given}; repeat this run with --seed {self.seed})")
        plan = chaos_plan.make_plan(
            self.seed, tasks=o.tasks, workers=o.workers, duration=o.duration, lease_ttl=o.lease_ttl
        )
        log_dir = Path(tempfile.mkdtemp(prefix=f"rivet-chaos-{self.seed}-"))
        self.say(f"logs: {log_dir}")
        with ExitStack() as stack:
            stack.enter_context(self.faults.setup())  # faults hook: db-restart's own cluster
            self._migrate()
            service_url = stack.enter_context(self._effect_service(log_dir))
            self._empty()
            self._check_effect_store(service_url)
            self._fill(plan)
            log = EventLog(log_dir / "events.jsonl")
            drain_note = self._run_fleet(plan, log, log_dir, service_url)
            verdict = verify(
                queue=o.queue, effect_database_url=o.effect_database_url, drain_note=drain_note
            )
            self._check_effect_store(service_url, expected=verdict.figures.effects_written)
        return self._finish(verdict, log, log_dir)

    # -- setting up --------------------------------------------------------------------------

    def _require_postgres(self) -> None:
        vendor = connections["default"].vendor
        if vendor != "postgresql":
            raise ChaosError(
                f"the chaos harness runs on PostgreSQL, but the queue database is {vendor}; "
                "set DATABASE_URL=postgres://USER@HOST:PORT/NAME"
            )

    def _migrate(self) -> None:
        connection = connections["default"]
        executor = MigrationExecutor(connection)
        unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if unapplied:
            self.say(
                f"warning: {len(unapplied)} migration(s) were not applied to the queue database "
                f"{connection.settings_dict['NAME']!r}; running migrate first"
            )
            call_command("migrate", verbosity=0, interactive=False)

    @contextmanager
    def _effect_service(self, log_dir: Path) -> Iterator[str]:
        o = self.options
        if o.effect_url:
            if not _answers(o.effect_url):
                raise ChaosError(f"no effect service answers at --effect-url {o.effect_url}")
            self.say(f"effect service: {o.effect_url} (--effect-url)")
            yield o.effect_url
            return
        if not o.own_effect_service and _answers(settings.EFFECT_SERVICE_URL):
            url = settings.EFFECT_SERVICE_URL
            self.say(f"effect service: {url} (already answering at settings.EFFECT_SERVICE_URL)")
            yield url
            return
        service = EffectService(
            database_url=o.effect_database_url,
            port=free_port(),
            workers=1,
            threads=8,
            log_path=log_dir / "effect-service.log",
        )
        try:
            service.start(timeout=60.0)
        except RuntimeError as exc:
            raise ChaosError(f"could not start the effect service: {exc}") from exc
        self.say(f"effect service: started its own at {service.url}; stopped after the run")
        self.faults.effect_service_started(service)  # faults hook: effect-restart's target
        try:
            yield service.url
        finally:
            service.stop()

    def _empty(self) -> None:
        if self.options.keep:
            self.say("--keep: both databases keep their rows; the figures include earlier runs")
            return
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.QUEUE_EMPTY)
        with effect_connection(self.options.effect_database_url) as effect_db:
            effect_db.execute(queries.EFFECT_EMPTY)
        self.say(
            "emptied both databases: queue (rivet_task, rivet_fenced_write) and effect "
            f"({', '.join(queries.EFFECT_TABLES)}); pass --keep to leave them"
        )

    def _check_effect_store(self, url: str, *, expected: int | None = None) -> None:
        """The service must write where the verifier reads: its count must match the DB's."""
        with effect_connection(self.options.effect_database_url) as effect_db:
            in_db = effect_db.execute(queries.EFFECT_FIGURES).fetchone()[0]
        reported = fetch_verify(url)["effects_written"]
        name = _db_name(self.options.effect_database_url)
        if reported != in_db or (expected is not None and in_db != expected):
            raise ChaosError(
                f"the effect service at {url} reports {reported} effect(s) but the effect "
                f"database the verifier reads ({name}) holds {in_db}: they are not the same "
                "database. Point EFFECT_DATABASE_URL at the service's database, or pass "
                "--own-effect-service"
            )
        if expected is not None:
            self.say(f"effect service /verify: {reported} effects, as the verifier read in {name}")

    def _fill(self, plan: ChaosPlan) -> None:
        o = self.options
        items = [
            {
                "kind": EFFECT_KIND,
                "payload": {"n": n, "work_ms": work},
                "queue": o.queue,
                "idem_key": f"chaos-{self.seed}-{n}",
                "delay": plan.release_at(n),
                "max_attempts": EFFECT_MAX_ATTEMPTS,
            }
            for n, work in enumerate(plan.work_ms)
        ]
        items += [
            {
                "kind": POISON_KIND,
                "payload": {"poison": n},
                "queue": o.queue,
                "idem_key": f"chaos-{self.seed}-poison-{n}",
                "max_attempts": POISON_MAX_ATTEMPTS,
            }
            for n in range(o.poison)
        ]
        self._refuse_taken_keys([item["idem_key"] for item in items])
        for start in range(0, len(items), ENQUEUE_CHUNK):
            enqueue_many(items[start : start + ENQUEUE_CHUNK], using="default")
        release = plan.release_at(len(plan.work_ms))
        self.say(
            f"enqueued {o.tasks} {EFFECT_KIND} tasks on queue {o.queue!r} (keys "
            f"chaos-{self.seed}-N, released evenly over {release:g} s) and {o.poison} poison "
            f"task(s) ({POISON_KIND}, always fails)"
        )

    def _refuse_taken_keys(self, keys: list[str]) -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.KEYS_TAKEN, {"keys": keys})
            taken = cursor.fetchone()[0]
        if taken:
            raise ChaosError(
                f"{taken} of this run's keys (chaos-{self.seed}-N) are in the queue database "
                "from an earlier run with this seed; drop --keep or pass another --seed"
            )

    # -- breaking and draining ---------------------------------------------------------------

    def _run_fleet(self, plan: ChaosPlan, log: EventLog, log_dir: Path, service_url: str) -> str:
        o = self.options
        worker_effect_url = self.faults.worker_effect_url(service_url)  # faults hook: proxy
        env = worker_env(database_url(), EFFECT_SERVICE_URL=worker_effect_url)
        fleet = Fleet(
            size=o.workers, worker_args=o.worker_args(), env=env, log_dir=log_dir, log=log
        )
        planned = plan.counts()
        self.say(
            f"chaos: {o.workers} workers (concurrency {o.concurrency}, lease {o.lease_ttl:g} s) "
            f"for {o.duration:g} s; planned kill {planned[KILL]} / failpoint "
            f"{planned[FAILPOINT]} / zombie {planned[ZOMBIE]}"
        )
        try:
            fleet.start_all()
            self.faults.start(log)  # faults hook
            self._break(fleet, plan)
            self.faults.stop()  # faults hook: the drain runs without faults
            elapsed = log.clock() - log.started
            self.say(f"chaos over at {elapsed:.1f} s; draining with clean workers")
            note = self._drain(fleet)
        finally:
            self.faults.stop()  # faults hook: no fault outlives the chaos (stop is idempotent)
            fleet.stop_all()
        return note

    def _break(self, fleet: Fleet, plan: ChaosPlan) -> None:
        started = time.monotonic()
        due = list(plan.events)
        waiting: list[Planned] = []
        while True:
            now = time.monotonic() - started
            fleet.reap()
            fleet.thaw_due()
            self.faults.tick(now)  # faults hook (a db-restart blocks until the server answers)
            while due and due[0].at <= now:
                waiting.append(due.pop(0))
            waiting = [e for e in waiting if not self._apply(fleet, e, now)]
            if now >= plan.duration and not due and not waiting and not fleet.frozen_count():
                return
            time.sleep(TICK_SECS)

    def _apply(self, fleet: Fleet, event: Planned, now: float) -> bool:
        """Carry out one event; False to try it again at the next tick (a zombie waiting)."""
        if event.kind == ZOMBIE:
            return self._zombie(fleet, event, now)
        if event.kind == KILL:
            slot = fleet.pick(event, lambda p: not p.frozen)
            done = slot is not None and fleet.kill(slot)
        else:
            slot = fleet.pick(event, lambda p: not p.frozen and not p.armed)
            done = slot is not None and fleet.arm(slot, event.failpoint_seed)
        if not done:
            fleet.log.add("skipped", kind=event.kind, planned_at=event.at, reason="no target")
        return True

    def _zombie(self, fleet: Fleet, event: Planned, now: float) -> bool:
        """Stop a worker that holds leases (only a lease in flight can be fenced).

        At most half the workers are stopped at once: the others must take the stopped
        workers' tasks while they sleep, or the zombies wake up still holding valid leases.
        """
        reason = "half the workers were stopped already"
        if fleet.frozen_count() < max(1, fleet.size // 2):
            leases = self._leases()
            slot = fleet.pick(event, lambda p: not p.frozen and p.owner in leases)
            if slot is not None:
                owner = fleet.slots[slot].owner
                if fleet.freeze(slot, event.stop_secs, holding=leases[owner]):
                    return True
            reason = "no running worker held a lease"
        if now - event.at < ZOMBIE_PATIENCE_SECS:
            return False
        fleet.log.add("skipped", kind=ZOMBIE, planned_at=event.at, reason=reason)
        return True

    def _leases(self) -> dict[str, list[int]]:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.LEASES_BY_OWNER, {"queue": self.options.queue})
            return dict(cursor.fetchall())

    def _pending(self) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.PENDING_COUNT, {"queue": self.options.queue})
            return cursor.fetchone()[0]

    def _drain(self, fleet: Fleet) -> str:
        """Wait until nothing is pending; the note says why not when the bound is reached."""
        fleet.disarm()
        started = time.monotonic()
        while time.monotonic() - started < self.options.drain_timeout:
            fleet.reap()
            if self._pending() == 0:
                self.say(f"drained in {time.monotonic() - started:.1f} s")
                return ""
            time.sleep(0.2)
        return f"the drain gave up after {self.options.drain_timeout:g} s; see the worker logs"

    # -- the end -----------------------------------------------------------------------------

    def _finish(self, verdict: Verdict, log: EventLog, log_dir: Path) -> ChaosResult:
        unexpected = log.unexpected_exits()
        for record in unexpected:
            self.say(
                f"note: worker {record['owner']} ended with {record['status']}, not by the "
                f"harness's hand (log: {log_dir / (record['owner'] + '.log')})"
            )
        chaos = log.chaos_counts()
        lines = report_lines(verdict, chaos) + self.faults.report_lines(log.records)  # faults
        self.say("")
        for text in [*lines, "", *verdict_lines(verdict)]:
            self.say(text)
        if verdict.ok and not unexpected and not self.options.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            self.say(f"logs kept in {log_dir} (events.jsonl, one log per worker)")
        return ChaosResult(
            verdict=verdict,
            chaos=chaos,
            log_dir=log_dir,
            lines=lines,
            faults=self.faults.counts(),  # faults hook
        )


def _answers(url: str) -> bool:
    try:
        fetch_verify(url, timeout=2.0)
    except EffectUnavailable:
        return False
    return True


def _db_name(url: str) -> str:
    return url.rsplit("/", 1)[-1].split("?", 1)[0]
