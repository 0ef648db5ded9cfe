"""manage.py rivet_chaos: the chaos run (default), ``verify`` on its own, and ``bench``.

    rivet_chaos [run] [--tasks 5000] [--workers 4] [--duration-secs 60] [--seed S] [--keep]
                [--schedules N] [--json P]
    rivet_chaos campaign [--seeds 20] [--first-seed 1] [RUN OPTIONS] [--json PATH]
    rivet_chaos verify [--queue chaos] [--events PATH]
    rivet_chaos bench [--workers 1,2,4] [--concurrency 1,4,16] [--kind noop,effect] [--soak [N]]
                      [--rate R] [--json PATH] [--plot PATH] [--out bench/results.md] ...

Exit 0 only when every invariant held (S1, S2, L1, F2, C1; T1, T2 with --schedules); otherwise
the failed ones are named.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from bench.runner import KINDS, PRODUCERS, SOAK_DEFAULT, Bench, BenchOptions
from chaos_project.chaos.campaign import Campaign
from chaos_project.chaos.faults import ALL_FAULTS, EFFECT_RESTART, FAULTS, parse_faults
from chaos_project.chaos.fleet import count_chaos, read_event_log
from chaos_project.chaos.harness import ChaosOptions, ChaosRun
from chaos_project.chaos.report import report_lines, verdict_lines
from chaos_project.chaos.ticks import window_end
from chaos_project.chaos.timeline import timeline_path, write_timeline
from chaos_project.chaos.verifier import Verdict, verify
from chaos_project.management.arguments import counts as _counts
from chaos_project.management.arguments import interrupt as _interrupt
from chaos_project.management.arguments import non_negative_int as _non_negative_int
from chaos_project.management.arguments import positive_float as _positive_float
from chaos_project.management.arguments import positive_int as _positive_int
from rivet.dberrors import explain
from rivet.errors import RivetError


def _prefetch(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    return _non_negative_int(text)


def _prefetch_cycle(text: str) -> tuple[int | str, ...]:
    values = tuple(_prefetch(part) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected P[,P...] with each P an integer or auto, got {text!r}"
        )
    return values


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [kind for kind in kinds if kind not in KINDS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(
            f"must be kinds from {','.join(KINDS)} (comma-separated), got {text!r}"
        )
    return tuple(dict.fromkeys(kinds))


def _faults(text: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(parse_faults(text)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "Break workers three ways (SIGKILL, a failpoint abort between effect and ack, SIGSTOP "
        "until another worker took its task) while they run effect tasks, then check both "
        "databases: S1 no duplicate effect, S2 no task done without its effect, L1 nothing "
        "pending, F2 fenced writes > 0 and every zombie fenced; with --schedules N, T1 no tick "
        "fired twice and T2 no due tick missing. Subcommands: run (the default), campaign "
        "(many seeds, one table), verify (the check alone), bench (throughput and latency)."
    )

    def add_arguments(self, parser):
        self._effect_arguments(parser)
        self._run_arguments(parser)
        sub = parser.add_subparsers(dest="action")
        run = sub.add_parser("run", help="one chaos run (the default; options after run)")
        self._effect_arguments(run)
        self._run_arguments(run)
        campaign = sub.add_parser(
            "campaign",
            help="chaos runs for consecutive seeds, one table, JSON; exit 0 if every run held",
        )
        self._effect_arguments(campaign)
        campaign.add_argument(
            "--seeds", type=_positive_int, default=20, help="how many runs (default: %(default)s)"
        )
        campaign.add_argument(
            "--first-seed", type=int, default=1, help="seed of the first run (default: %(default)s)"
        )
        campaign.add_argument(
            "--prefetch-cycle",
            type=_prefetch_cycle,
            default=(),
            metavar="P[,P...]",
            help="the seeds' --prefetch in turn, e.g. 0,auto,8: the campaign covers a worker "
            "that claims only into free slots and one that claims ahead (default: every run "
            "takes --prefetch)",
        )
        self._run_arguments(campaign, seed=False)
        check = sub.add_parser("verify", help="check the invariants on the databases as they are")
        self._effect_arguments(check)
        check.add_argument(
            "--queue", dest="verify_queue", default="chaos", help="(default: %(default)s)"
        )
        check.add_argument(
            "--events", type=Path, help="events.jsonl of the run, for its counts (default: none)"
        )
        bench = sub.add_parser(
            "bench",
            help="throughput beside its ceiling, latency, soak, enqueue (writes bench/results.*)",
        )
        self._effect_arguments(bench)
        self._bench_arguments(bench)

    @staticmethod
    def _bench_arguments(bench):
        default = "(default: %(default)s)"
        add = bench.add_argument
        add(
            "--workers",
            dest="bench_workers",
            metavar="W[,W...]",
            type=_counts,
            default=(1, 2, 4),
            help="worker processes, a list: every workers x concurrency pair is a row "
            "(default: 1,2,4)",
        )
        add(
            "--concurrency",
            dest="bench_concurrency",
            metavar="C[,C...]",
            type=_counts,
            default=(1, 4, 16),
            help="each worker's slots, a list; also the ceiling's claim batch (default: 1,4,16)",
        )
        add(
            "--kind",
            dest="bench_kinds",
            metavar="KIND[,KIND]",
            type=_kinds,
            default=KINDS,
            help="task kinds of the full-backlog rows, a list of noop and effect; effect goes "
            "through a real effect service on EFFECT_DATABASE_URL (default: noop,effect)",
        )
        add(
            "--tasks",
            dest="bench_tasks",
            type=_positive_int,
            default=5000,
            help="noop tasks per full-backlog run and per ceiling run " + default,
        )
        add(
            "--effect-tasks",
            type=_positive_int,
            default=2000,
            help="effect tasks per full-backlog run " + default,
        )
        add(
            "--runs",
            type=_positive_int,
            default=2,
            help="runs per row; rows show the median " + default,
        )
        add(
            "--no-ceiling",
            action="store_true",
            help="skip the bare claim-and-ack loop beside each row (default: measure it)",
        )
        add(
            "--rate",
            type=_non_negative_float,
            default=300.0,
            help="offered-load row: tasks per second, 0 for none " + default,
        )
        add("--rate-tasks", type=_positive_int, default=3000, help=default)
        add("--rate-workers", type=_positive_int, default=1, help=default)
        add("--rate-concurrency", type=_positive_int, default=4, help=default)
        add(
            "--rate-runs",
            type=_positive_int,
            default=3,
            help="runs of the offered-load row; its latencies are their median " + default,
        )
        add(
            "--soak",
            type=_positive_int,
            nargs="?",
            const=SOAK_DEFAULT,
            metavar="N",
            help=f"soak row: one backlog of N tasks, first and last tenth compared (N default: "
            f"{SOAK_DEFAULT}; without --soak: no soak)",
        )
        add("--soak-workers", type=_positive_int, default=1, help=default)
        add(
            "--soak-concurrency",
            type=_positive_int,
            help="(default: the largest of --concurrency)",
        )
        add(
            "--soak-vacuum-secs",
            type=_non_negative_float,
            metavar="SECS",
            help="during the soak, VACUUM rivet_task every SECS seconds, 0 for never (default: "
            "never; only the server's autovacuum, if on)",
        )
        add(
            "--enqueue-single",
            type=_non_negative_int,
            default=5000,
            help="one-at-a-time enqueues timed, 0 for none " + default,
        )
        add(
            "--enqueue-producers",
            type=_non_negative_int,
            default=PRODUCERS,
            help="the --enqueue-single enqueues again, shared among this many producer "
            "processes at once (each call its own commit), 0 for none " + default,
        )
        add(
            "--no-fsync",
            action="store_true",
            help="do not run pg_test_fsync (the commit rate, the one-producer row's ceiling; "
            "it takes about 15 s) (default: run it)",
        )
        add(
            "--enqueue-bulk",
            type=_non_negative_int,
            default=200000,
            help="tasks enqueued in batches of 10 000 and timed, 0 for none " + default,
        )
        add(
            "--schedules",
            dest="bench_schedules",
            type=_non_negative_int,
            default=1000,
            help="the scheduler's part: one-second schedules on idle workers, their ticks' "
            "lateness and the workers' CPU; 0 for none " + default,
        )
        add(
            "--big-claim-rows",
            type=_non_negative_int,
            default=1_000_000,
            help="the claim's plan and cost at this many pending rows, loaded and rolled back; "
            "0 for none " + default,
        )
        add(
            "--stale-stats-rows",
            type=_non_negative_int,
            default=200_000,
            help="a backlog of this many tasks drained on the statistics of an empty table, "
            "beside the same after an ANALYZE; 0 for none " + default,
        )
        add("--schedule-workers", type=_positive_int, default=4, help=default)
        add("--schedule-secs", type=_positive_float, default=30.0, help=default)
        add("--payload-bytes", type=_non_negative_int, default=100, help=default)
        add("--lease-ttl-secs", dest="bench_ttl", type=_positive_float, default=30, help=default)
        add(
            "--pool-size",
            type=_positive_int,
            help="each worker's PostgreSQL pool (default and minimum: concurrency + 2)",
        )
        add(
            "--prefetch",
            dest="bench_prefetch",
            type=_prefetch,
            default="auto",
            help="each worker's --prefetch (N or auto): claimed tasks that may wait for a slot; "
            "auto passes no flag (the worker's default); the ceiling claims concurrency + "
            "prefetch at a time (auto: its cap) " + default,
        )
        add(
            "--task-log-level",
            dest="bench_task_log_level",
            choices=("info", "debug"),
            default="info",
            help="the workers' --task-log-level: debug leaves the per-task lines out " + default,
        )
        add(
            "--timeout-secs",
            dest="bench_timeout",
            type=_positive_float,
            default=120.0,
            help="give up a drain when no task finished for this long " + default,
        )
        add(
            "--out",
            type=Path,
            default=Path(settings.BASE_DIR) / "bench" / "results.md",
            help="the results text (default: bench/results.md)",
        )
        add(
            "--async-rows",
            action="store_true",
            help="measure only the async rows (async def jobs beside sync ones, one worker: "
            "bench/asyncbench.py) and write them as the async section of --out, keeping the "
            "rest of it; --tasks, --effect-tasks and --runs apply (default: off)",
        )
        add(
            "--json",
            dest="bench_json",
            type=Path,
            help="the results as JSON (default: results.json beside --out)",
        )
        add(
            "--plot",
            type=Path,
            help="the figure, a PNG (default: throughput.png beside --out)",
        )
        add("--no-plot", action="store_true", help="write no figure (no matplotlib needed)")

    @staticmethod
    def _run_arguments(parser, *, seed: bool = True):
        """The options of one run (the campaign takes them too, after ``campaign``)."""
        add = parser.add_argument
        add("--tasks", type=_positive_int, default=5000, help="effect tasks (default: %(default)s)")
        add(
            "--workers",
            type=_positive_int,
            default=4,
            help="worker processes (default: %(default)s)",
        )
        add(
            "--duration-secs",
            type=_positive_float,
            default=60.0,
            help="seconds of chaos; the drain follows (default: %(default)s)",
        )
        if seed:
            add("--seed", type=int, help="repeat a run (default: random, printed)")
        add("--keep", action="store_true", help="do not empty the databases (default: empty them)")
        add(
            "--lease-ttl-secs",
            type=_positive_float,
            default=2.0,
            help="the workers' lease (default: %(default)s)",
        )
        add(
            "--concurrency",
            type=_positive_int,
            default=4,
            help="handlers per worker (default: %(default)s)",
        )
        add(
            "--prefetch",
            type=_prefetch,
            default=None,
            help="each worker's --prefetch (N or auto): claimed tasks that may wait for a slot "
            "(default: the worker's own default)",
        )
        add(
            "--backlog-tasks",
            type=_positive_int,
            help="tasks waiting to be claimed at most, released as others are claimed "
            "(default: workers x concurrency)",
        )
        add(
            "--exec-workers",
            action="store_true",
            help="start each worker as a new manage.py rivet_worker process (default: fork it "
            "from the harness, which restarts a worker in milliseconds instead of seconds)",
        )
        add("--queue", default="chaos", help="queue of the run (default: %(default)s)")
        add(
            "--handlers",
            choices=("sync", "async"),
            default="sync",
            help="run the effect kind as a def on handler threads (sync) or as an async def on "
            "each worker's event loop, through the asyncio effect client, --concurrency of "
            "them in flight (async) (default: %(default)s)",
        )
        add(
            "--schedules",
            type=_non_negative_int,
            default=0,
            metavar="N",
            help="one-second schedules fired during the chaos; adds T1 (no tick fired twice) "
            "and T2 (no due tick missing) to the verdict (default: %(default)s)",
        )
        add("--poison", type=int, default=2, help="tasks that always fail (default: %(default)s)")
        add(
            "--drain-timeout-secs",
            type=_positive_float,
            default=60.0,
            help="give up the drain when no task finished for this long (default: %(default)s)",
        )
        add(
            "--keep-logs",
            action="store_true",
            help="keep the logs of a run that held (default: only a failed run's are kept)",
        )
        add(
            "--faults",
            type=_faults,
            default=(),
            metavar="NAME[,NAME]",
            help=f"opt-in faults: {', '.join(FAULTS)}, comma-separated, or all for "
            f"{', '.join(ALL_FAULTS)} (default: none). failover runs the queue database on a "
            "primary and a synchronous standby, SIGKILLs the primary once and promotes the "
            "standby (nothing acknowledged may be lost); failover-async does so with an "
            "asynchronous standby and counts what it lost; either excludes db-restart. See "
            "docs/chaos.md, Faults",
        )
        add(
            "--json",
            type=Path,
            help="also write the outcome as JSON to this file, and the run's timeline plot "
            "beside it as NAME-timeline.png (default: none; a campaign writes campaign.json "
            "beside its per-seed output)",
        )
        add(
            "--effect-url",
            help="use the effect service at this URL (default: one answering "
            "at settings.EFFECT_SERVICE_URL, else start one)",
        )
        add(
            "--own-effect-service",
            action="store_true",
            help="always start an effect service for the run, on EFFECT_DATABASE_URL "
            "(default: off)",
        )

    @staticmethod
    def _effect_arguments(parser):
        parser.add_argument(
            "--effect-database-url",
            default=os.environ.get("EFFECT_DATABASE_URL", ""),
            help="the effect service's database, read by the verifier "
            "(default: EFFECT_DATABASE_URL from the environment)",
        )

    def handle(self, *args, **options):
        # SIGTERM (and SIGINT, even where a shell made it ignored) unwinds the run, so its
        # workers and its effect service are stopped instead of left behind.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _interrupt)
        try:
            if options.get("action") == "bench":
                return self._bench(options)
            if options.get("action") == "verify":
                return self._verify(options)
            if options.get("action") == "campaign":
                return self._campaign(options)
            return self._run(options)
        except RivetError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:  # the queue database: missing, unreachable, not migrated
            raise CommandError(explain(exc, "default")) from exc
        except KeyboardInterrupt as exc:
            raise CommandError(f"interrupted ({exc}); the run's workers were stopped") from exc

    def _run(self, options) -> None:
        result = ChaosRun(_run_options(options, seed=options["seed"]), say=self._say).run()
        if options["json"]:
            options["json"].write_text(json.dumps(result.summary, indent=2) + "\n")
            self._say(f"json: {options['json']}")
            self._plot_timeline(result, options["json"])
        _verdict_exit(result.verdict)

    def _plot_timeline(self, result, json_path: Path) -> None:
        """The run's timeline plot beside its JSON (needs matplotlib, the bench extra)."""
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self._say("timeline plot skipped: matplotlib is missing (pip install -e '.[bench]')")
            return
        verdict = "every invariant held" if result.verdict.ok else "FAILED"
        title = f"rivet chaos run, seed {result.summary['seed']}: {verdict}"
        path = write_timeline(timeline_path(json_path), result.timeline, title=title)
        self._say(f"timeline: {path}")

    def _campaign(self, options) -> None:
        first = options["first_seed"]
        rows = Campaign(
            _run_options(options, seed=None),
            seeds=list(range(first, first + options["seeds"])),
            json_path=options["json"],
            say=self._say,
            prefetch_cycle=options["prefetch_cycle"],
        ).run()
        failed = [str(row["seed"]) for row in rows if not row["ok"]]
        if failed:
            raise CommandError(f"the campaign failed: seed(s) {', '.join(failed)} did not hold")

    def _verify(self, options) -> None:
        events = read_event_log(options["events"]) if options["events"] else None
        until = window_end(events or [])
        unfenced = sum(
            1 for r in events or [] if r["event"] == "zombie_verdict" and r["outcome"] == "unfenced"
        )
        verdict = verify(
            queue=options["verify_queue"],
            effect_database_url=_effect_db(options),
            unfenced_zombies=unfenced,
            ticks_until=until,
        )
        chaos = count_chaos(events) if events is not None else None
        for text in [*report_lines(verdict, chaos), "", *verdict_lines(verdict)]:
            self._say(text)
        _verdict_exit(verdict)

    def _bench(self, options) -> None:
        bench_options = BenchOptions(
            workers=options["bench_workers"],
            concurrency=options["bench_concurrency"],
            kinds=options["bench_kinds"],
            tasks=options["bench_tasks"],
            effect_tasks=options["effect_tasks"],
            runs=options["runs"],
            ceiling=not options["no_ceiling"],
            rate=options["rate"] or None,
            rate_tasks=options["rate_tasks"],
            rate_workers=options["rate_workers"],
            rate_concurrency=options["rate_concurrency"],
            rate_runs=options["rate_runs"],
            soak=options["soak"],
            soak_workers=options["soak_workers"],
            soak_concurrency=options["soak_concurrency"],
            soak_vacuum_secs=options["soak_vacuum_secs"],
            enqueue_single=options["enqueue_single"],
            enqueue_bulk=options["enqueue_bulk"],
            enqueue_producers=options["enqueue_producers"],
            enqueue_fsync=not options["no_fsync"],
            schedules=options["bench_schedules"],
            schedule_workers=options["schedule_workers"],
            schedule_secs=options["schedule_secs"],
            big_claim_rows=options["big_claim_rows"],
            stale_stats_rows=options["stale_stats_rows"],
            payload_bytes=options["payload_bytes"],
            lease_ttl=options["bench_ttl"],
            pool_size=options["pool_size"],
            prefetch=options["bench_prefetch"],
            task_log_level=options["bench_task_log_level"],
            timeout=options["bench_timeout"],
            out=options["out"],
            json_path=options["bench_json"],
            plot=options["plot"],
            no_plot=options["no_plot"],
            effect_database_url=options["effect_database_url"],
        )
        if options["async_rows"]:
            from bench.asyncbench import AsyncBench

            AsyncBench(bench_options, options["out"], say=self._say).run()
            return
        Bench(bench_options, say=self._say).run()

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def _run_options(options, *, seed: int | None) -> ChaosOptions:
    return ChaosOptions(
        effect_database_url=_effect_db(options),
        tasks=options["tasks"],
        workers=options["workers"],
        duration=options["duration_secs"],
        seed=seed,
        keep=options["keep"],
        lease_ttl=options["lease_ttl_secs"],
        queue=options["queue"],
        concurrency=options["concurrency"],
        prefetch=options["prefetch"],
        poison=options["poison"],
        effect_url=options["effect_url"],
        # effect-restart can only restart a service the harness started itself
        own_effect_service=options["own_effect_service"] or EFFECT_RESTART in options["faults"],
        drain_timeout=options["drain_timeout_secs"],
        keep_logs=options["keep_logs"],
        backlog_tasks=options["backlog_tasks"],
        faults=options["faults"],
        exec_workers=options["exec_workers"],
        schedules=options["schedules"],
        handlers=options["handlers"],
    )


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
