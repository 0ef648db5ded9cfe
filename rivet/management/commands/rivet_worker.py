"""manage.py rivet_worker: claim and run tasks until stopped.

Each flag also reads its RIVET_* variable, then settings.RIVET (flag beats variable beats
setting). Exit codes: 0 stopped cleanly (SIGTERM/SIGINT, --once, --max-jobs); 1 --once could
not claim (database error); 2 a bad option, or RIVET_FAILPOINT malformed or set in a project
whose RIVET['FAILPOINTS'] is off; 3 handlers had to be abandoned (restart the worker); 128+N a
second signal N (exit at once); SIGABRT (-6, or 134 from a shell) a failpoint fired.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from importlib import import_module

from django.core.management.base import CommandError

from rivet import logs
from rivet.conf import rivet_settings
from rivet.dberrors import DatabaseUnready, preflight
from rivet.errors import RivetConfigError
from rivet.extras import require
from rivet.failpoints import Failpoints, from_settings, install
from rivet.management.base import EXIT_UNAVAILABLE, RivetCommand
from rivet.routing import queues_by_alias
from rivet.schedules.declare import code_schedules
from rivet.schedules.scheduler import Scheduler
from rivet.stores.base import Store
from rivet.stores.idle import set_idle_timeout
from rivet.worker import EXIT_STORE_ERROR, Worker
from rivet.worker.config import WorkerConfig
from rivet.worker.group import WorkerGroup
from rivet.worker.metrics import WorkerMetrics
from rivet.worker.options import OPTIONS, SWITCHES
from rivet.worker.pool import configure_pool
from rivet.worker.process import install_signal_handlers
from rivet.worker.prune import Pruner


class Command(RivetCommand):
    help = (
        "Run a worker: claim tasks into free slots, heartbeat their leases, ack or fail each "
        "attempt. SIGTERM/SIGINT: stop claiming and finish in-flight work; a second signal "
        "exits at once."
    )

    def add_arguments(self, parser):
        for option in OPTIONS:
            parser.add_argument(
                option.flag,
                dest=option.dest,
                metavar=option.metavar,
                help=f"{option.help} [{option.env}]",
            )
        parser.add_argument("--once", action="store_true", help=SWITCHES["--once"])

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            if options.get("traceback") or not wants_json(options):
                raise
            # The fatal line too is JSON, so `jq` reads every line the worker wrote.
            logs.configure("json")
            logs.event("worker_failed", logging.ERROR, error=f"CommandError: {exc}")
            logs.flush()
            sys.exit(exc.returncode)

    def handle(self, *args, **options):
        try:
            config = WorkerConfig.from_sources(options, os.environ, once=options["once"])
            points = from_settings()
            if config.metrics_port is not None:
                require("prometheus_client", extra="metrics", feature="--metrics-port")
        except RivetConfigError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        logs.configure(config.log_format)
        set_idle_timeout(config.idle_in_transaction_timeout)
        groups = route_queues(config.queues)
        for alias in groups:
            check_database(alias, config.connect_timeout)
        import_job_modules()
        group = build_group(config, groups, failpoints=install(points))
        serve_metrics(group, config.metrics_port)
        install_signal_handlers(group)
        try:
            stats = group.run()
        finally:
            group.close()
        if stats.exit_code == EXIT_STORE_ERROR:
            raise CommandError("--once could not claim: the database failed (see the log)")
        if stats.exit_code:
            raise CommandError(
                f"{stats.abandoned} handler(s) were abandoned; exiting {stats.exit_code} so a "
                "supervisor restarts the worker",
                returncode=stats.exit_code,
            )


def wants_json(options: dict) -> bool:
    """Whether --log-format (or RIVET_LOG_FORMAT) asks for JSON, even when another option is bad."""
    chosen = options.get("log_format") or os.environ.get("RIVET_LOG_FORMAT", "")
    return chosen == "json"


def route_queues(queues: tuple[str, ...]) -> dict[str, list[str]]:
    """The worker's queues by the database alias that holds each (``rivet.routing``); exit 2
    when the routing names an alias that is not in DATABASES."""
    try:
        return queues_by_alias(queues)
    except RivetConfigError as exc:
        raise CommandError(str(exc), returncode=2) from exc


def check_database(alias: str, connect_timeout: float) -> None:
    """Exit 1 with one message when the database does not answer or lacks rivet's tables."""
    try:
        preflight(alias, connect_timeout)
    except DatabaseUnready as exc:
        raise CommandError(str(exc), returncode=EXIT_UNAVAILABLE) from exc


def serve_metrics(worker: WorkerGroup, port: int | None) -> None:
    """Answer Prometheus scrapes on ``port`` (--metrics-port / RIVET_METRICS_PORT), if given."""
    if port is None:
        return
    assert isinstance(worker.metrics, WorkerMetrics)  # a port is given: the worker has metrics
    try:
        worker.metrics.serve(port)
    except OSError as exc:
        worker.close()
        raise CommandError(
            f"--metrics-port {port}: cannot listen there ({exc.strerror or exc}); pick a free port",
            returncode=2,
        ) from exc
    logs.event("metrics_serving", owner=worker.owner, port=port)


def import_job_modules() -> None:
    """Import RIVET['JOB_MODULES'] so their @rivet.job kinds are registered."""
    for module in rivet_settings.JOB_MODULES:
        try:
            import_module(module)
        except ImportError as exc:
            raise CommandError(
                f"RIVET['JOB_MODULES'] names {module!r}, which cannot be imported: {exc}",
                returncode=2,
            ) from exc


def build_group(
    config: WorkerConfig, groups: dict[str, list[str]], *, failpoints: Failpoints
) -> WorkerGroup:
    """One Worker per database alias in ``groups`` (alias -> its queues), sharing one metrics.

    The schedule thread runs beside the Worker of RIVET['DATABASE_ALIAS'] (or the first one, when
    the worker serves no queue there).
    """
    workers: list[Worker] = []
    shared = None
    if config.metrics_port is not None and len(groups) > 1:
        slots = config.concurrency * len(groups)
        shared = WorkerMetrics(
            slots=slots,
            busy=lambda: sum(w.busy_slots() for w in workers),
            busy_async=lambda: sum(w.busy_async() for w in workers),
            db_wait=lambda: max(w.db_waits.longest() for w in workers),
        )
    scheduling = rivet_settings.DATABASE_ALIAS if rivet_settings.DATABASE_ALIAS in groups else None
    for alias, queues in groups.items():
        one = dataclasses.replace(config, queues=tuple(queues))
        scheduler = alias == (scheduling or next(iter(groups)))
        workers.append(
            build_worker(one, failpoints=failpoints, metrics=shared, scheduler=scheduler)
        )
    return WorkerGroup(workers)


def build_worker(
    config: WorkerConfig,
    *,
    failpoints: Failpoints,
    metrics: WorkerMetrics | None = None,
    scheduler: bool = True,
) -> Worker:
    """A Worker on the store of its queues, with the pool, metrics and retention it asks for."""
    from rivet.stores import store_for_queue

    try:
        store = store_for_queue(config.queues[0])
    except RivetConfigError as exc:
        raise CommandError(str(exc), returncode=2) from exc
    alias = store.using or rivet_settings.DATABASE_ALIAS
    configure_pool(alias, config.pool_size, config.concurrency)
    return Worker(
        config,
        store=store,
        failpoints=failpoints,
        metrics=metrics or config.metrics_port is not None,
        pruner=build_pruner(store, config),
        scheduler=build_scheduler(store, config) if scheduler else None,
    )


def build_scheduler(store: Store, config: WorkerConfig) -> Scheduler | None:
    """The schedule thread, unless RIVET['SCHEDULER'] is off or the worker runs --once."""
    if not rivet_settings.SCHEDULER or config.once:
        return None
    return Scheduler(
        store=store,
        alias=store.using or rivet_settings.DATABASE_ALIAS,
        definitions=code_schedules.all,
        every=config.poll_interval,
        owner=config.owner or "",
    )


def build_pruner(store: Store, config: WorkerConfig) -> Pruner | None:
    """The retention thread, when a retention is set (--retention / RIVET['RETENTION'])."""
    if config.retention is None:
        return None
    return Pruner(
        store=store,
        older_than=config.retention,
        every=config.prune_every,
        batch_size=config.prune_batch_size,
        owner=config.owner or "",
    )
