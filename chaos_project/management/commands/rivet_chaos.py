"""manage.py rivet_chaos: the chaos run (default), ``verify`` on its own, and ``bench``.

    rivet_chaos [--tasks 500] [--workers 4] [--duration-secs 15] [--seed S] [--keep]
    rivet_chaos verify [--queue chaos] [--events PATH]
    rivet_chaos bench [--workers 1,4,16] [--tasks N] [--rate R] [--out bench/results.md]

Exit 0 only when every invariant held (S1, S2, L1, F2); otherwise the failed ones are named.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from chaos_project.chaos.bench import Bench, BenchOptions
from chaos_project.chaos.faults import EFFECT_RESTART, FAULTS, parse_faults
from chaos_project.chaos.fleet import count_chaos, read_event_log
from chaos_project.chaos.harness import ChaosOptions, ChaosRun
from chaos_project.chaos.report import report_lines, verdict_lines
from chaos_project.chaos.verifier import Verdict, verify
from rivet.errors import RivetError


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def _faults(text: str) -> frozenset[str]:
    try:
        return parse_faults(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"must be worker counts like 1,4,16, got {text!r}")
    return counts


class Command(BaseCommand):
    help = (
        "Break workers three ways (SIGKILL, a failpoint abort, SIGSTOP past the lease) while "
        "they run effect tasks, then check both databases: S1 no duplicate effect, S2 no task "
        "done without its effect, L1 nothing pending, F2 fenced writes > 0. "
        "Subcommands: verify (the check alone), bench (throughput and latency)."
    )

    def add_arguments(self, parser):
        self._effect_arguments(parser)
        parser.add_argument("--tasks", type=_positive_int, default=500)
        parser.add_argument("--workers", type=_positive_int, default=4)
        parser.add_argument("--duration-secs", type=_positive_float, default=15.0)
        parser.add_argument("--seed", type=int, help="repeat a run (default: random, printed)")
        parser.add_argument("--keep", action="store_true", help="do not empty the databases")
        parser.add_argument("--lease-ttl-secs", type=_positive_float, default=2.0)
        parser.add_argument("--concurrency", type=_positive_int, default=4)
        parser.add_argument("--queue", default="chaos")
        parser.add_argument("--poison", type=int, default=2, help="tasks that always fail")
        parser.add_argument("--drain-timeout-secs", type=_positive_float, default=60.0)
        parser.add_argument("--keep-logs", action="store_true", help="keep logs of a good run")
        parser.add_argument(
            "--effect-url",
            help="use the effect service at this URL (default: one answering "
            "at settings.EFFECT_SERVICE_URL, else start one)",
        )
        parser.add_argument(
            "--own-effect-service",
            action="store_true",
            help="always start an effect service for the run (on EFFECT_DATABASE_URL)",
        )
        parser.add_argument(
            "--faults",
            type=_faults,
            default=frozenset(),
            metavar="NAME[,NAME]",
            help=f"add faults the workers' environment can have: {', '.join(FAULTS)}, or all "
            "(default: none). See docs/chaos.md, Faults",
        )
        sub = parser.add_subparsers(dest="action")
        check = sub.add_parser("verify", help="check the invariants on the databases as they are")
        self._effect_arguments(check)
        check.add_argument("--queue", dest="verify_queue", default="chaos")
        check.add_argument("--events", type=Path, help="events.jsonl of the run, for its counts")
        bench = sub.add_parser("bench", help="throughput and latency (writes bench/results.md)")
        bench.add_argument("--workers", dest="bench_workers", type=_counts, default=(1, 4, 16))
        bench.add_argument("--tasks", dest="bench_tasks", type=_positive_int, default=3000)
        bench.add_argument("--rate", type=_positive_float, help="offer tasks at R per second")
        bench.add_argument("--concurrency", dest="bench_concurrency", type=_positive_int, default=4)
        bench.add_argument("--payload-bytes", type=int, default=100)
        bench.add_argument("--lease-ttl-secs", dest="bench_ttl", type=_positive_float, default=30)
        bench.add_argument("--pool-size", type=int, default=6)
        bench.add_argument(
            "--out", type=Path, default=Path(settings.BASE_DIR) / "bench" / "results.md"
        )

    @staticmethod
    def _effect_arguments(parser):
        parser.add_argument(
            "--effect-database-url",
            default=os.environ.get("EFFECT_DATABASE_URL", ""),
            help="the effect service's database, read by the verifier [EFFECT_DATABASE_URL]",
        )

    def handle(self, *args, **options):
        try:
            if options.get("action") == "bench":
                return self._bench(options)
            if options.get("action") == "verify":
                return self._verify(options)
            return self._run(options)
        except RivetError as exc:
            raise CommandError(str(exc)) from exc

    def _run(self, options) -> None:
        run = ChaosRun(
            ChaosOptions(
                effect_database_url=_effect_db(options),
                tasks=options["tasks"],
                workers=options["workers"],
                duration=options["duration_secs"],
                seed=options["seed"],
                keep=options["keep"],
                lease_ttl=options["lease_ttl_secs"],
                queue=options["queue"],
                concurrency=options["concurrency"],
                poison=options["poison"],
                effect_url=options["effect_url"],
                # effect-restart can only restart a service the harness started itself
                own_effect_service=options["own_effect_service"]
                or EFFECT_RESTART in options["faults"],
                drain_timeout=options["drain_timeout_secs"],
                keep_logs=options["keep_logs"],
                faults=options["faults"],
            ),
            say=self._say,
        )
        _verdict_exit(run.run().verdict)

    def _verify(self, options) -> None:
        verdict = verify(queue=options["verify_queue"], effect_database_url=_effect_db(options))
        events = options["events"]
        chaos = count_chaos(read_event_log(events)) if events else None
        for text in [*report_lines(verdict, chaos), "", *verdict_lines(verdict)]:
            self._say(text)
        _verdict_exit(verdict)

    def _bench(self, options) -> None:
        Bench(
            BenchOptions(
                workers=options["bench_workers"],
                tasks=options["bench_tasks"],
                rate=options["rate"],
                concurrency=options["bench_concurrency"],
                payload_bytes=options["payload_bytes"],
                lease_ttl=options["bench_ttl"],
                pool_size=options["pool_size"],
                out=options["out"],
            ),
            say=self._say,
        ).run()

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def _effect_db(options) -> str:
    url = options["effect_database_url"]
    if not url:
        raise CommandError(
            "the verifier reads the effect service's database: set EFFECT_DATABASE_URL "
            "(or pass --effect-database-url postgres://USER@HOST:PORT/NAME)"
        )
    return url


def _verdict_exit(verdict: Verdict) -> None:
    if not verdict.ok:
        raise CommandError(f"invariants failed: {', '.join(verdict.failed_codes())}")
