"""One chaos run: empty both databases, fill a queue, break the workers, drain, verify.

See docs/chaos.md. The order matters: the effect service is found or started first (starting
it migrates the effect database); then the harness checks that the service writes to the
database the verifier reads (one probe effect, looked up and removed again); only then are both
databases emptied (unless --keep), since a count of effects from an earlier run says nothing
about this one.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from chaos_project.chaos import history as run_history
from chaos_project.chaos import plan as chaos_plan
from chaos_project.chaos.faults import FaultSet
from chaos_project.chaos.fleet import EventLog, Fleet
from chaos_project.chaos.loop import ChaosLoop, LoopOutcome
from chaos_project.chaos.pacing import Pacer
from chaos_project.chaos.plan import (
    FAILPOINT,
    KILL,
    ZOMBIE,
    ChaosPlan,
    designed_fields,
    release_delay,
)
from chaos_project.chaos.proxy import FaultyProxy, NetFaultRates
from chaos_project.chaos.report import report_lines, run_summary, summary_lines, verdict_lines
from chaos_project.chaos.ticks import ChaosSchedules
from chaos_project.chaos.timeline import Timeline, read_timeline
from chaos_project.chaos.verifier import Verdict, verify
from chaos_project.kit import queries
from chaos_project.kit.pidfd import require_pidfd
from chaos_project.kit.services import (
    MANAGE_PY,
    EffectService,
    database_url,
    effect_connection,
    free_port,
    worker_env,
)
from effect_project.client import (
    EffectError,
    EffectUnavailable,
    fetch_health,
    fetch_verify,
    post_effect,
)
from rivet.errors import RivetError
from rivet.producer import enqueue_many

EFFECT_KIND = "chaos.effect"
EFFECT_MAX_ATTEMPTS = 10
POISON_KIND = "fail"
POISON_MAX_ATTEMPTS = 3
ENQUEUE_CHUNK = 1000
#: The retry backoff the workers get: long enough that a claim ignoring it is seen (H2), short
#: enough that a flaky task's retries fit in a quick run.
RETRY_BACKOFF_SECS = 0.4
RETRY_BACKOFF_CAP_SECS = 1.5
#: The effect fault of every run: the workers reach the effect service through the harness's
#: recording proxy (chaos_project.chaos.proxy), which during the chaos drops a request, resets
#: the connection after the effect, answers 503 without forwarding, or sends a request twice at
#: once, now and then. Cheap: a dropped or reset request costs the client a resend, a refused
#: one the task a retry, a duplicated one a replay.
EFFECT_FAULT_RATES = NetFaultRates(delay=0.0, drop=0.01, reset=0.015, dup=0.04, refuse=0.03)


class ChaosError(RivetError):
    """The run could not be carried out (not: an invariant failed); the message says why."""


@dataclass(frozen=True, kw_only=True)
class ChaosOptions:
    effect_database_url: str
    tasks: int = 5000
    workers: int = 4
    duration: float = 60.0
    seed: int | None = None
    keep: bool = False
    lease_ttl: float = 2.0
    queue: str = "chaos"
    concurrency: int = 4
    prefetch: int | str | None = None
    """Each worker's --prefetch; None: the worker's own default."""
    poison: int = 2
    effect_url: str | None = None
    own_effect_service: bool = False
    drain_timeout: float = 60.0
    keep_logs: bool = False
    backlog_tasks: int | None = None
    faults: tuple[str, ...] = ()
    exec_workers: bool = False
    """Start each worker as a new ``manage.py rivet_worker`` process instead of forking it."""
    schedules: int = 0
    """One-second schedules fired during the chaos (T1, T2: chaos_project.chaos.ticks)."""
    handlers: str = "sync"
    """``chaos.effect`` as a def (sync) or an ``async def`` (async: chaos_project.chaos_kinds)."""

    def backlog(self) -> int:
        """Tasks ready (unclaimed) at most: by default one per handler slot of the fleet."""
        return self.backlog_tasks or self.workers * self.concurrency

    def worker_args(self) -> list[str]:
        return [
            *("--queue", self.queue, "--lease-ttl-secs", str(self.lease_ttl)),
            *("--concurrency", str(self.concurrency), "--pool-size", str(self.concurrency + 2)),
            *(("--prefetch", str(self.prefetch)) if self.prefetch is not None else ()),
            *("--poll-interval", "0.2", "--shutdown-timeout", "5", "--log-format", "json"),
            *("--retry-backoff-secs", str(RETRY_BACKOFF_SECS)),
            *("--retry-backoff-cap-secs", str(RETRY_BACKOFF_CAP_SECS)),
            *(("--async-concurrency", str(self.concurrency)) if self.handlers == "async" else ()),
        ]


@dataclass(frozen=True)
class ChaosResult:
    verdict: Verdict
    chaos: dict[str, int]
    log_dir: Path
    lines: list[str]
    summary: dict
    """What the campaign table and --json show (see report.run_summary)."""
    faults: dict[str, int] = field(default_factory=dict)
    """Faults injected, by name (--faults)."""
    timeline: Timeline | None = None
    """The run on one clock, for its plot (chaos.timeline)."""


class ChaosRun:
    """Carries out one run; ``say`` receives every line of output as it happens."""

    def __init__(self, options: ChaosOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.seed = options.seed if options.seed is not None else chaos_plan.new_seed()
        self.planned: dict[str, int] = {}
        self.enqueued: list[str] = []
        """Keys of the tasks enqueued so far, each once its enqueue returned (the producer's
        side: what a failover must not lose)."""
        # -- faults hook: the opt-in faults (--faults); with none, every hook does nothing --
        self.faults = FaultSet(
            options.faults,
            seed=self.seed,
            duration=options.duration,
            say=self.say,
            queue=options.queue,
            enqueued=lambda: tuple(self.enqueued),
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
        self.faults.check(keep=o.keep, effect_url=o.effect_url, schedules=o.schedules)
        if o.schedules and o.keep:
            raise ChaosError(
                "--schedules judges every tick task of the queue (T1, T2), so it needs the "
                "queue emptied first; drop --keep or --schedules"
            )
        given = "given" if o.seed is not None else "random"
        self.say(f"seed {self.seed} ({given}; repeat this run with --seed {self.seed})")
        plan = chaos_plan.make_plan(
            self.seed, tasks=o.tasks, workers=o.workers, duration=o.duration
        )
        log_dir = Path(tempfile.mkdtemp(prefix=f"rivet-chaos-{self.seed}-"))
        self.say(f"logs: {log_dir}")
        started = time.monotonic()
        with ExitStack() as stack:
            stack.enter_context(self.faults.setup())  # faults hook: db-restart's own cluster
            self._migrate()
            service_url = stack.enter_context(self._effect_service(log_dir))
            self._check_same_effect_database(service_url)
            self._empty()
            self._check_effect_store(service_url)
            run_history.install(o.queue)
            stack.callback(run_history.remove)
            self.say(
                f"history: every change of the queue's tasks is recorded in "
                f"{run_history.HISTORY_TABLE} (a trigger, dropped after the run), every effect "
                f"request in {run_history.EFFECT_TABLE}"
            )
            self._fill(plan)
            log = EventLog(log_dir / "events.jsonl")
            schedules = ChaosSchedules(
                count=o.schedules,
                queue=o.queue,
                seed=self.seed,
                catch_up_limit=o.drain_timeout,
                say=self.say,
                log=log.add,
            )
            outcome = self._run_fleet(plan, log, log_dir, service_url, schedules)
            self.faults.after_run(log_dir)  # faults hook: the failover's losses
            unfenced = outcome.zombie_counts()["unfenced"]
            verdict = verify(
                queue=o.queue,
                effect_database_url=o.effect_database_url,
                drain_note=outcome.drain_note,
                unfenced_zombies=unfenced,
                ticks_until=schedules.until,
                log_dir=log_dir,
                lease_ttl=o.lease_ttl,
            )
            verdict = self.faults.judge(verdict)  # faults hook: the failover's part of L1, F2
            self._check_effect_store(service_url, expected=verdict.figures.effects_written)
            timeline = read_timeline(log, queue=o.queue, duration=o.duration)
        self.planned = plan.counts()
        result = self._finish(verdict, log, log_dir, outcome, time.monotonic() - started)
        return replace(result, timeline=timeline)

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
            threads=16,
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

    def _check_same_effect_database(self, url: str) -> None:
        """Before anything is emptied: one probe effect through the service must appear in
        the database the verifier reads (it is removed again at once)."""
        key = f"chaos-db-check-{uuid.uuid4().hex}"
        name = _db_name(self.options.effect_database_url)
        try:
            post_effect(url, key, {"check": "the effect service writes where the verifier reads"})
        except EffectError as exc:
            raise ChaosError(f"the effect service at {url} refused a probe effect: {exc}") from exc
        with effect_connection(self.options.effect_database_url) as effect_db:
            found = effect_db.execute(queries.EFFECT_COUNT_KEY, {"key": key}).fetchone()[0]
            effect_db.execute(queries.EFFECT_DELETE_KEY, {"key": key})
        if not found:
            raise ChaosError(
                f"the effect service at {url} does not write to the effect database the "
                f"verifier reads ({name}): a probe effect it accepted is not there. Nothing was "
                "emptied. Point EFFECT_DATABASE_URL at the service's database, or pass "
                "--own-effect-service"
            )
        self.say(f"effect service writes to {name}, the database the verifier reads")

    def _empty(self) -> None:
        if self.options.keep:
            self.say("--keep: both databases keep their rows; the figures include earlier runs")
            return
        with connections["default"].cursor() as cursor:
            cursor.execute(queries.QUEUE_EMPTY)
        ChaosSchedules.remove_earlier()
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
        """Check every key of the run is free, and enqueue the poison tasks."""
        o = self.options
        keys = [self._key(n) for n in range(o.tasks)]
        keys += [f"chaos-{self.seed}-poison-{n}" for n in range(o.poison)]
        self._refuse_taken_keys(keys)
        poison = [
            {
                "kind": POISON_KIND,
                "payload": {"poison": n},
                "queue": o.queue,
                "idem_key": f"chaos-{self.seed}-poison-{n}",
                "max_attempts": POISON_MAX_ATTEMPTS,
            }
            for n in range(o.poison)
        ]
        if poison:
            enqueue_many(poison, using="default")
            self.enqueued += [item["idem_key"] for item in poison]
        self.say(
            f"enqueued {o.poison} poison task(s) ({POISON_KIND}, always fails); {o.tasks} "
            f"{EFFECT_KIND} tasks on queue {o.queue!r} (keys chaos-{self.seed}-N) follow as "
            "the workers finish earlier ones"
        )

    def _key(self, n: int) -> str:
        return f"chaos-{self.seed}-{n}"

    def _release(self, plan: ChaosPlan, indexes: range) -> None:
        """Enqueue the effect tasks ``indexes`` (their body names the task: see verifier)."""
        items = []
        for n in indexes:
            fields, max_attempts = designed_fields(n, EFFECT_MAX_ATTEMPTS)
            payload = {"chaos_task": self._key(n), "n": n, "work_ms": plan.work_ms[n], **fields}
            item = {
                "kind": EFFECT_KIND,
                "payload": payload,
                "queue": self.options.queue,
                "idem_key": self._key(n),
                "max_attempts": max_attempts,
            }
            delay = release_delay(n)
            if delay:
                item["delay"] = delay
            items.append(item)
        for start in range(0, len(items), ENQUEUE_CHUNK):
            chunk = items[start : start + ENQUEUE_CHUNK]
            enqueue_many(chunk, using="default")
            self.enqueued += [item["idem_key"] for item in chunk]

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

    def _run_fleet(
        self,
        plan: ChaosPlan,
        log: EventLog,
        log_dir: Path,
        service_url: str,
        schedules: ChaosSchedules,
    ):
        o = self.options
        worker_effect_url = self.faults.worker_effect_url(service_url)  # faults hook: proxy
        recorder = FaultyProxy(_host_port(worker_effect_url), seed=f"{self.seed}/effects")
        recorder.rates = EFFECT_FAULT_RATES
        recorder.start()
        r = EFFECT_FAULT_RATES
        self.say(
            f"effect requests: through the recording proxy {recorder.url}; during the chaos "
            f"per request drop {r.drop:.1%} / reset after the effect {r.reset:.1%} / 503 "
            f"{r.refuse:.1%} / sent twice at once {r.dup:.1%}"
        )
        env = worker_env(
            database_url(), EFFECT_SERVICE_URL=recorder.url, RIVET_CHAOS_HANDLERS=o.handlers
        )
        fleet = Fleet(
            size=o.workers,
            worker_args=[*o.worker_args(), *self.faults.worker_args()],  # faults hook
            env=env,
            log_dir=log_dir,
            log=log,
            command=[sys.executable, str(MANAGE_PY), "rivet_worker"] if o.exec_workers else None,
        )
        planned = plan.counts()
        self.say(
            f"chaos: {o.workers} workers (concurrency {o.concurrency}, lease {o.lease_ttl:g} s) "
            f"for {o.duration:g} s; planned kill {planned[KILL]} / failpoint "
            f"{planned[FAILPOINT]} / zombie {planned[ZOMBIE]}; tasks released as they are "
            f"claimed, at most {o.backlog()} waiting"
        )
        pacer = Pacer(total=o.tasks, window=o.backlog(), spread=o.duration)
        loop = ChaosLoop(
            fleet=fleet,
            plan=plan,
            pacer=pacer,
            release=lambda indexes: self._release(plan, indexes),
            queue=o.queue,
            lease_ttl=o.lease_ttl,
            say=self.say,
        )
        try:
            schedules.create()
            loop.sources.append(schedules)
            self.faults.fleet_started(fleet)  # faults hook: what scheduler-stall stops
            fleet.start_all()
            recorder.injecting = True
            self.faults.start(log)  # faults hook
            loop.sources.append(self.faults)
            loop.run_chaos()
            schedules.chaos_over()
            loop.sources.remove(self.faults)
            self.faults.stop()  # the drain runs without faults
            recorder.injecting = False
            self.say(
                f"chaos over at {loop.now():.1f} s ({pacer.released} of {o.tasks} tasks "
                "released); draining with the same workers, no new events"
            )
            drain_started = loop.now()
            loop.outcome.drain_note = loop.drain(o.drain_timeout, hold=schedules.holding)
            if not loop.outcome.drain_note:
                self.say(f"drained in {loop.now() - drain_started:.1f} s")
        finally:
            self.faults.stop()  # no fault outlives the chaos (stop is idempotent)
            if self.faults in loop.sources:  # the chaos raised: the error is the one to see
                loop.sources.remove(self.faults)
            loop.close()
            fleet.stop_all()
            schedules.close()  # no worker is left to hold a schedule's row
            recorder.close()
        written = run_history.write_effect_requests(recorder.records)
        faults = recorder.injected()
        loop.outcome.effect_faults = {k: faults[k] for k in ("drop", "reset", "refuse", "dup")}
        self.say(
            f"effect requests recorded: {written} ("
            + " / ".join(f"{k} {n}" for k, n in loop.outcome.effect_faults.items())
            + ")"
        )
        return loop.outcome

    # -- the end -----------------------------------------------------------------------------

    def _finish(
        self, verdict: Verdict, log: EventLog, log_dir: Path, outcome: LoopOutcome, wall: float
    ) -> ChaosResult:
        unexpected = log.unexpected_exits()
        for record in unexpected:
            self.say(
                f"note: worker {record['owner']} ended with {record['status']}, not by the "
                f"harness's hand (log: {log_dir / (record['owner'] + '.log')})"
            )
        chaos = log.chaos_counts()
        armed, reached = log.armed_counts()
        summary = run_summary(
            seed=self.seed,
            verdict=verdict,
            chaos=chaos,
            outcome=outcome,
            armed=(armed, reached),
            wall_secs=wall,
            faults=self.options.faults,
            planned=self.planned,
        )
        summary.update(self.faults.summary())
        lines = report_lines(verdict, chaos) + self.faults.report_lines(log.records)
        self.say("")
        for text in [*summary_lines(summary), "", *lines, "", *verdict_lines(verdict)]:
            self.say(text)
        if verdict.ok and not unexpected and not self.options.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            self.say(f"logs kept in {log_dir} (events.jsonl, one log per worker)")
            summary["log_dir"] = str(log_dir)
        return ChaosResult(
            verdict=verdict,
            chaos=chaos,
            log_dir=log_dir,
            lines=lines,
            summary=summary,
            faults=self.faults.counts(),
        )


def _answers(url: str) -> bool:
    try:
        fetch_health(url, timeout=2.0)
    except EffectUnavailable:
        return False
    return True


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ChaosError(f"the effect service URL {url} names no host and port")
    return parts.hostname, parts.port


def _db_name(url: str) -> str:
    return url.rsplit("/", 1)[-1].split("?", 1)[0]
