"""manage.py rivet_scale: the scale study (bench/scale.py, docs/scaling.md).

rivet_scale [--workers 1,2,4,8,16,32,64] [--modes direct,pgbouncer] [--tasks 10000]
            [--rate 300] [--rate-tasks 1200] [--concurrency 4] [--server-pool 20]
            [--runs 2] [--enqueue 2000] [--no-fsync] [--out bench/scale.md] [--json PATH]
            [--plot PATH | --no-plot]
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from bench.scale import COUNTS, MODES, Scale, ScaleOptions
from chaos_project.management.arguments import (
    counts,
    interrupt,
    non_negative_int,
    positive_float,
    positive_int,
)
from rivet.dberrors import explain
from rivet.errors import RivetError


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [mode for mode in modes if mode not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"must be modes from {','.join(MODES)} (comma-separated), got {text!r}"
        )
    return modes


class Command(BaseCommand):
    help = (
        "The scale study: for each worker count, real rivet_worker processes directly and "
        "through PgBouncer (transaction pooling): a backlog's drain rate, end-to-end latency "
        "at an offered rate, CPU, WAL and write transactions per task; then one producer's "
        "enqueue rate with synchronous_commit on and off beside pg_test_fsync. Writes "
        "bench/scale.md, bench/scale.json and docs/img/scaling.png."
    )

    def add_arguments(self, parser):
        default = "(default: %(default)s)"
        add = parser.add_argument
        add(
            "--workers",
            type=counts,
            default=COUNTS,
            metavar="N[,N...]",
            help="worker process counts (default: 1,2,4,8,16,32,64)",
        )
        add("--modes", type=_modes, default=MODES, help="direct, pgbouncer or both " + default)
        add("--tasks", type=positive_int, default=10000, help="backlog per drain " + default)
        add("--rate", type=positive_float, default=300.0, help="offered tasks/s " + default)
        add("--rate-tasks", type=positive_int, default=1200, help="tasks offered " + default)
        add("--concurrency", type=positive_int, default=4, help="per worker " + default)
        add(
            "--server-pool",
            type=positive_int,
            default=20,
            help="PgBouncer's server connections (default_pool_size) " + default,
        )
        add("--runs", type=positive_int, default=2, help="runs of every point " + default)
        add(
            "--enqueue",
            type=non_negative_int,
            default=2000,
            help="single enqueues per synchronous_commit setting; 0: none " + default,
        )
        add("--no-fsync", action="store_true", help="do not run pg_test_fsync")
        add(
            "--vacuum-before-drain",
            action="store_true",
            help="VACUUM the task table after the latency part: the drain then starts on no "
            "dead rows, and direct workers plan their prepared flush again on the full table "
            "(default: they keep the plan made on the near-empty table of the latency part)",
        )
        add(
            "--timeout",
            type=positive_float,
            default=120.0,
            help="seconds without progress before a drain fails " + default,
        )
        add(
            "--out",
            type=Path,
            default=Path(settings.BASE_DIR) / "bench" / "scale.md",
            help="the results text " + default,
        )
        add("--json", type=Path, help="the results as JSON (default: --out with the suffix .json)")
        add("--plot", type=Path, help="the figure (default: docs/img/scaling.png)")
        add("--no-plot", action="store_true", help="draw no figure")

    def handle(self, *args, **options):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, interrupt)
        try:
            Scale(_options(options), say=self._say).run()
        except RivetError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise CommandError(explain(exc, "default")) from exc
        except KeyboardInterrupt as exc:
            raise CommandError(f"interrupted ({exc}); the study's workers were stopped") from exc

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def _options(options) -> ScaleOptions:
    return ScaleOptions(
        counts=options["workers"],
        modes=options["modes"],
        tasks=options["tasks"],
        rate=options["rate"],
        rate_tasks=options["rate_tasks"],
        concurrency=options["concurrency"],
        server_pool=options["server_pool"],
        runs=options["runs"],
        enqueue=options["enqueue"],
        fsync=not options["no_fsync"],
        vacuum_before_drain=options["vacuum_before_drain"],
        timeout=options["timeout"],
        out=options["out"],
        json_path=options["json"],
        plot=options["plot"],
        no_plot=options["no_plot"],
    )
