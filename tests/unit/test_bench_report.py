"""bench/results.md and results.json: rows, medians, the targets' verdicts and the JSON shape."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from bench import report
from bench.report import (
    Row,
    Target,
    Window,
    duration,
    median_row,
    render,
    targets,
    to_json,
    with_ceiling,
)
from bench.stale import stale_result

ENQUEUE = {
    "single": 5000,
    "single_secs": 1.6,
    "single_per_s": 3125.0,
    "bulk": 200000,
    "batch": 10000,
    "bulk_secs": 4.0,
    "bulk_per_s": 50000.0,
}


def row(workers: int, concurrency: int, throughput: float, **extra) -> Row:
    fields = {
        "mode": "backlog",
        "kind": "noop",
        "workers": workers,
        "concurrency": concurrency,
        "tasks": 5000,
        "throughput": throughput,
        "end_to_end": (1.5, 2.5, 2.8),
        "service": (0.002, 0.003, 0.004),
        "redelivered": 0,
        "rss_mb": 64.0,
        **extra,
    }
    return Row(**fields)


def rows() -> list[Row]:
    return [
        row(1, 1, 1200.0, ceiling=1500.0),
        row(1, 4, 2000.0, ceiling=8000.0),
        row(1, 16, 5000.0, ceiling=6000.0, rss_mb=151.0),
        row(2, 16, 16000.0, ceiling=20000.0),
        row(1, 4, 900.0, kind="effect", ceiling=5000.0),
        row(
            1,
            4,
            300.0,
            mode="rate",
            rate=300.0,
            end_to_end=(0.0015, 0.003, 0.006),
            service=(0.001, 0.002, 0.003),
            latencies=(0.001, 0.0015, 0.006),
        ),
        row(
            1,
            16,
            4000.0,
            mode="soak",
            tasks=500000,
            first=Window(tasks=50000, throughput=5000.0, service=(0.003, 0.004, 0.005)),
            last=Window(tasks=50000, throughput=3500.0, service=(0.004, 0.006, 0.009)),
        ),
    ]


def verdicts() -> dict[str, tuple[bool | None, str]]:
    return {t.name: (t.met, t.bottleneck) for t in targets(rows(), ENQUEUE)}


def test_the_offered_load_latency_is_the_median_of_its_runs_each_shown() -> None:
    def run(p99: float) -> Row:
        return row(
            1, 4, 300.0, mode="rate", rate=300.0, end_to_end=(0.002, 0.003, p99),
            service=(0.001, 0.002, 0.003),
        )  # fmt: skip

    # One disturbed run of three does not decide the p99 (two runs' median was their mean).
    three = median_row([run(0.0045), run(0.0319), run(0.0042)])
    assert three.end_to_end[2] == 0.0045
    assert three.end_to_end_runs == tuple(run(p).end_to_end for p in (0.0045, 0.0319, 0.0042))
    found = {t.name: t for t in targets([three], None)}
    p99 = found["offered 300/s: end to end p99"]
    assert (p99.measured, p99.met) == ("4.5 ms (4.5 ms, 31.9 ms, 4.2 ms)", True)
    assert found["offered 300/s: end to end p50"].measured == "2.0 ms (2.0 ms, 2.0 ms, 2.0 ms)"
    data = to_json(setup=[], rows=[three], enqueue=None)
    assert data["rows"][0]["e2e_runs_ms"] == [[2.0, 3.0, 4.5], [2.0, 3.0, 31.9], [2.0, 3.0, 4.2]]
    # A single run: its figure alone.
    one = {t.name: t for t in targets([median_row([run(0.006)])], None)}
    assert one["offered 300/s: end to end p99"].measured == "6.0 ms"


def test_each_target_gets_its_verdict_from_the_rows() -> None:
    found = verdicts()
    assert found["one worker, c=1"] == (True, "")
    assert found["best configuration"][0] is True
    assert found["offered 300/s: end to end p50"][0] is True
    assert found["offered 300/s: end to end p99"][0] is False
    assert found["enqueue, one call at a time"][0] is True
    assert found["enqueue, bulk"][0] is False
    assert found["effect tasks through the effect service"][0] is False
    assert found["worker peak RSS, one worker at c=16"][0] is False
    assert found["soak: last 10 % against the first 10 %"][0] is False


def test_a_missed_throughput_names_the_worker_or_the_statements_from_the_ceiling() -> None:
    found = verdicts()
    met, bottleneck = found["one worker, c=4"]
    assert met is False and bottleneck.startswith("the worker: 25% of its ceiling (8,000/s)")
    met, bottleneck = found["one worker, c=16"]
    assert met is False and "bare loop reaches only 6,000/s" in bottleneck
    met, bottleneck = found["effect tasks through the effect service"]
    assert met is False and bottleneck.startswith("the effect service's round trip: 18% of")


def test_a_missed_enqueue_names_the_statements_or_the_producer_from_the_store_call() -> None:
    def bulk(**figures: float) -> str:
        found = {t.name: t for t in targets(rows(), {**ENQUEUE, **figures})}
        assert found["enqueue, bulk"].met is False
        return found["enqueue, bulk"].bottleneck

    assert bulk() == "the producer's path: profile it"  # a run from before the store figures
    assert bulk(bulk_store_per_s=60000.0).startswith("the store's statements: 60,000/s")
    assert bulk(bulk_store_per_s=125000.0) == (
        "the producer's Python around the store: the store's own call ran 125,000/s, "
        "rivet.enqueue_many 40% of it"
    )


def test_the_enqueue_table_shows_the_store_calls_when_measured(tmp_path: Path) -> None:
    figures = {**ENQUEUE, "single_store_per_s": 5000.0, "bulk_store_per_s": 80000.0}
    text = render(setup=[], rows=rows(), enqueue=figures, plot=None, out=tmp_path / "r.md")
    assert "| the store's `task_enqueue`, one task a call | 5000 | 1.00 | 5,000/s |" in text
    assert "| the store's `task_enqueue_many`, 10000 a call | 200000 | 2.50 | 80,000/s |" in text
    older = render(setup=[], rows=rows(), enqueue=ENQUEUE, plot=None, out=tmp_path / "o.md")
    assert "the store's `task_enqueue`" not in older.split("## Enqueue")[1].split("##")[0]


def test_the_enqueue_rows_give_their_median_and_every_round(tmp_path: Path) -> None:
    figures = {
        **ENQUEUE,
        "single_runs": [3000.0, 3125.0, 3400.0],
        "bulk_runs": [40000.0, 50000.0, 61000.0],
    }
    text = render(setup=[], rows=rows(), enqueue=figures, plot=None, out=tmp_path / "r.md")
    assert "| 1.60 | 3,125/s (3,000, 3,125, 3,400) |" in text
    assert "| 4.00 | 50,000/s (40,000, 50,000, 61,000) |" in text
    one = render(setup=[], rows=rows(), enqueue=ENQUEUE, plot=None, out=tmp_path / "o.md")
    assert "| 1.60 | 3,125/s |" in one and "| 4.00 | 50,000/s |" in one


def test_a_target_without_its_row_reads_not_measured() -> None:
    found = {t.name: t for t in targets([row(1, 1, 1200.0)], None)}
    assert found["one worker, c=16"].met is None
    assert found["one worker, c=16"].measured == "not measured"
    assert found["enqueue, bulk"].met is None
    assert found["soak: last 10 % against the first 10 %"].met is None


def test_the_median_of_runs_keeps_each_run_and_the_ceiling_its_own() -> None:
    runs = [row(1, 4, x, end_to_end=(e, e, e)) for x, e in ((1000.0, 1.0), (3000.0, 3.0))]
    merged = with_ceiling(median_row(runs), [4000.0, 6000.0, 5000.0])
    assert merged.throughput == 2000.0 and merged.runs == (1000.0, 3000.0)
    assert merged.end_to_end == (2.0, 2.0, 2.0)
    assert merged.ceiling == 5000.0 and merged.ceiling_runs == (4000.0, 6000.0, 5000.0)
    assert merged.ratio == 0.4


def test_the_json_has_one_object_per_row_with_the_issue_fields() -> None:
    setup = [("date", "2026-11-30 12:00 UTC"), ("machine", "test, 2 cores")]
    data = json.loads(json.dumps(to_json(setup=setup, rows=rows(), enqueue=ENQUEUE)))
    assert [r["mode"] for r in data["rows"]] == ["backlog"] * 5 + ["rate", "soak"]
    first = data["rows"][0]
    for key in ("workers", "concurrency", "throughput", "ceiling", "e2e_p50_ms", "e2e_p99_ms"):
        assert key in first
    assert (first["workers"], first["concurrency"], first["throughput"]) == (1, 1, 1200.0)
    assert first["ceiling"] == 1500.0 and first["rss_mb"] == 64.0 and first["ratio"] == 0.8
    assert data["rows"][5]["e2e_p50_ms"] == 1.5 and data["rows"][5]["e2e_sample_ms"][0] == 1.0
    assert data["rows"][6]["soak"]["last_over_first"] == 0.7
    assert data["enqueue"]["bulk_per_s"] == 50000.0
    assert data["setup"]["machine"] == "test, 2 cores"
    assert {t["name"] for t in data["targets"]} >= {"one worker, c=16", "enqueue, bulk"}


def test_the_report_has_the_setup_targets_every_table_and_the_plot(tmp_path: Path) -> None:
    out = tmp_path / "bench" / "results.md"
    text = render(
        setup=[("machine", "test, 2 cores")],
        rows=rows(),
        enqueue=ENQUEUE,
        plot=tmp_path / "bench" / "throughput.png",
        out=out,
        end_load="1.00 / 1.00 / 1.00",
    )
    assert text.startswith("# rivet benchmark results\n")
    for heading in ("## Setup", "## Targets", "## Full backlog", "## Offered load"):
        assert f"\n{heading}\n" in text
    assert "\n## Soak: 500,000 tasks\n" in text and "\n## Enqueue\n" in text
    assert "- machine: test, 2 cores" in text
    assert "| one worker, c=4 | >= 6,000/s | 2,000/s | **missed** | the worker: 25%" in text
    assert "| noop | 1 | 4 | 5000 | 2,000/s | 8,000/s | 25% |" in text
    assert "| last 10 % | 50000 | 3,500/s |" in text
    assert "Last tenth against the first: 70% of its throughput." in text
    assert "![throughput by concurrency and latency](throughput.png)" in text
    assert "Not a result" not in text


def test_a_run_on_a_busy_machine_says_it_is_not_a_result(tmp_path: Path) -> None:
    text = render(setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md", busy=9.5)
    assert "**Not a result: the load average at the start (9.50) exceeded the " in text
    data = to_json(setup=[], rows=rows(), enqueue=None, busy=9.5)
    assert data["busy_load"] == 9.5 and data["enqueue"] is None


def test_durations_read_in_milliseconds_below_a_second() -> None:
    assert duration(0.0043) == "4.3 ms"
    assert duration(0.9994) == "999.4 ms"
    assert duration(2.412) == "2.41 s"


SCHEDULER = {
    "schedules": 1000,
    "workers": 4,
    "secs": 30.0,
    "ticks": 34000,
    "enqueued_twice": 0,
    "missing": 0,
    "measured_ticks": 30000,
    "lateness_p50_s": 0.24,
    "lateness_p90_s": 0.33,
    "lateness_p99_s": 0.41,
    "lateness_max_s": 0.52,
    "cpu_idle_per_worker": [0.01, 0.01, 0.01, 0.01],
    "cpu_busy_per_worker": [0.06, 0.05, 0.06, 0.05],
    "cpu_secs_per_1000_ticks": 0.18,
}


def test_the_scheduler_part_has_its_table_and_two_targets(tmp_path: Path) -> None:
    text = render(
        setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md", scheduler=SCHEDULER
    )
    assert "\n## Scheduler\n" in text
    assert "| 34,000 | 30,000 | 0 | 0 | 0.240 s | 0.330 s | 0.410 s | 0.520 s |" in text
    assert "| 0.010 / 0.010 / 0.010 / 0.010 | 0.060 / 0.050 / 0.060 / 0.050 | 0.180 CPU s |" in text
    where = "(1000 one-second schedules, 4 workers)"
    assert (
        f"| scheduler: every tick once {where} | 0 twice, 0 missing | 0 twice, 0 missing of "
        in text
    )
    assert f"| scheduler: tick lateness p99 {where} | <= 1 s | 0.41 s | met | - |" in text
    late = {**SCHEDULER, "lateness_p99_s": 1.5, "enqueued_twice": 2}
    data = to_json(setup=[], rows=rows(), enqueue=None, scheduler=late)
    verdicts = {t["name"].split(" (")[0]: t["met"] for t in data["targets"]}
    assert verdicts["scheduler: every tick once"] is False
    assert verdicts["scheduler: tick lateness p99"] is False
    assert data["scheduler"]["enqueued_twice"] == 2


def test_without_the_scheduler_part_its_targets_say_not_measured(tmp_path: Path) -> None:
    text = render(setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md")
    assert "## Scheduler" not in text
    assert (
        "| scheduler: every tick once | 0 twice, 0 missing | not measured | not measured |" in text
    )


BIG_CLAIM = {
    "rows": 1_000_000,
    "batch": 16,
    "flushes": 200,
    "load_s": 14.0,
    "index_s": 12.0,
    "per_flush_ms": 1.31,
    "scan": "Index Scan using rivet_task_rank_idx",
    "index_cond": "(((queue)::text = 'bench-big'::text) AND (visible_at <= now()))",
    "problems": [],
    "explain": ["Limit (actual time=0.242..0.329 rows=16 loops=1)"],
}


def test_the_big_claim_part_shows_its_plan_and_its_target(tmp_path: Path) -> None:
    text = render(
        setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md", big_claim=BIG_CLAIM
    )
    assert "\n## Claim at 1,000,000 pending rows\n" in text
    assert "| Index Scan using rivet_task_rank_idx | `(((queue)::text" in text
    assert "| 1.31 ms | no sort, no sequential scan |" in text
    assert "Limit (actual time=0.242..0.329 rows=16 loops=1)" in text
    target = "| claim at 1,000,000 pending rows | index scan in rank order | Index Scan using "
    assert target in text and "16 | met | - |" in text
    sorted_plan = {**BIG_CLAIM, "problems": ["the claim sorts"]}
    data = to_json(setup=[], rows=rows(), enqueue=None, big_claim=sorted_plan)
    (big,) = [t for t in data["targets"] if t["name"].startswith("claim at")]
    assert (big["met"], big["bottleneck"]) == (False, "the claim sorts")
    assert data["big_claim"]["per_flush_ms"] == 1.31


def test_a_scheduler_cost_below_the_idle_noise_is_not_printed_negative(tmp_path: Path) -> None:
    noisy = {**SCHEDULER, "cpu_secs_per_1000_ticks": -0.125}
    text = render(
        setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md", scheduler=noisy
    )
    assert "| within the idle workers' noise |" in text and "-0.125" not in text


PRODUCERS = {
    "producers": 8,
    "producers_per_s": 4000.0,
    "producers_runs": [3900.0, 4000.0, 4100.0],
    "producers_client_us": 250.0,
    "producers_server_us": 150.0,
    "commit_rate": {"per_s": 5900.0, "method": "fdatasync", "note": "on the server's disk"},
}


def producers_target(**figures: Any) -> Target:
    found = {t.name: t for t in targets(rows(), {**ENQUEUE, **PRODUCERS, **figures})}
    return found["enqueue, one call at a time, 8 producers"]


def test_the_producers_target_names_the_cpu_or_the_commits(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cpu = producers_target()
    assert (cpu.goal, cpu.measured, cpu.met) == (">= 6,000/s", "4,000/s", False)
    # (250 + 150) µs x 4 000/s = 1.6 cores of 2: most of the machine.
    assert cpu.bottleneck == (
        "the machine's CPU: 250 µs of CPU per enqueue in the producer and 150 µs in its server "
        "backend: 1.6 of 2 cores at this rate"
    )
    waits = producers_target(producers_client_us=50.0, producers_server_us=50.0)
    assert waits.bottleneck.startswith(
        "the commits: the WAL flushes the server's disk gives (pg_test_fsync: 5,900 flushes/s "
        "one at a time), shared by the producers' commits (group commit); 50 µs"
    )
    remote = producers_target(producers_server_us=None, commit_rate=None)
    assert "the server's share unknown" in remote.bottleneck
    assert remote.bottleneck.endswith("the disk's flush rate was not measured")
    assert producers_target(producers_per_s=6500.0).met is True
    assert producers_target(producers_per_s=0.0).measured == "not measured"


def test_a_statement_ceiling_under_the_goal_names_the_server(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    slow = producers_target(producers_ceiling_per_s=5_000.0)
    assert slow.bottleneck == (
        "the server: the statement alone from 8 pgbench connections ran 5,000/s, under the "
        "goal, and the producers 80% of it; 250 µs of CPU per enqueue in the producer and "
        "150 µs in its server backend: 1.6 of 2 cores at this rate"
    )
    # A ceiling above the goal leaves the producers' side named, the ceiling beside it.
    fast = producers_target(producers_ceiling_per_s=12_000.0)
    assert fast.bottleneck.startswith("the machine's CPU: 250 µs")
    assert fast.bottleneck.endswith("; the statement alone (pgbench) 12,000/s")
    waits = producers_target(
        producers_client_us=50.0, producers_server_us=50.0, producers_ceiling_per_s=9_000.0
    )
    assert waits.bottleneck.startswith("the commits: ")
    assert waits.bottleneck.endswith("; the statement alone (pgbench) 9,000/s")
    # The server is named whatever CPU figures there are (a server on another machine).
    remote = producers_target(producers_server_us=None, producers_ceiling_per_s=5_000.0)
    assert remote.bottleneck.startswith("the server: the statement alone from 8 pgbench ")
    assert "; the producers' CPU: 250 µs per enqueue, " in remote.bottleneck


def test_the_producers_row_gives_the_statements_ceiling_or_why_not(tmp_path: Path) -> None:
    ceiling = {
        "producers_ceiling_per_s": 6_700.0,
        "producers_ceiling_runs": [6_500.0, 6_700.0, 5_800.0],
        "producers_ceiling_note": "pgbench -M prepared, 8 clients, 5000 statements",
    }
    figures = {**ENQUEUE, **PRODUCERS, **ceiling}
    text = render(setup=[], rows=rows(), enqueue=figures, plot=None, out=tmp_path / "r.md")
    assert (
        "| 4,000/s (3,900, 4,000, 4,100) | 6,700/s (6,500, 6,700, 5,800) (pgbench -M prepared, "
        "8 clients, 5000 statements) |" in text
    )
    missing = {
        **figures,
        "producers_ceiling_per_s": None,
        "producers_ceiling_runs": [],
        "producers_ceiling_note": "pgbench not found",
    }
    text = render(setup=[], rows=rows(), enqueue=missing, plot=None, out=tmp_path / "m.md")
    assert "| 4,000/s (3,900, 4,000, 4,100) | not measured: pgbench not found |" in text


def test_the_enqueue_table_gives_the_producers_row_and_the_commit_ceiling(tmp_path: Path) -> None:
    figures = {**ENQUEUE, **PRODUCERS}
    text = render(setup=[], rows=rows(), enqueue=figures, plot=None, out=tmp_path / "r.md")
    table = text.split("## Enqueue")[1].split("##")[0]
    assert (
        "| `rivet.enqueue`, one call at a time | 5000 | 1.60 | 3,125/s | 5,900/s (pg_test_fsync, "
        "fdatasync, on the server's disk) |" in table
    )
    assert (
        "| `rivet.enqueue`, one call at a time, 8 producer processes at once | 5000 | 1.25 | "
        "4,000/s (3,900, 4,000, 4,100) | - |" in table
    )
    failed = {**figures, "commit_rate": {"per_s": None, "method": "fdatasync", "note": "gone"}}
    text = render(setup=[], rows=rows(), enqueue=failed, plot=None, out=tmp_path / "f.md")
    assert "| 3,125/s | not measured: gone |" in text
    older = render(setup=[], rows=rows(), enqueue=ENQUEUE, plot=None, out=tmp_path / "o.md")
    assert "producer processes" not in older and "| 3,125/s | - |" in older


def _drain(reltuples: int, per_s: float) -> dict:
    return {
        "reltuples": reltuples,
        "tasks": 200_000,
        "per_s": per_s,
        "service_p50_ms": 4.0,
        "service_p99_ms": 9.5,
    }


def test_the_stale_statistics_part_shows_both_drains_and_its_target(tmp_path: Path) -> None:
    stale = stale_result(200_000, 16, _drain(0, 3_300.0), _drain(200_000, 3_500.0))
    text = render(
        setup=[], rows=rows(), enqueue=None, plot=None, out=tmp_path / "r.md", stale=stale
    )
    assert "\n## Backlog on stale statistics: 200,000 tasks\n" in text
    assert "| analyzed empty (stale) | 0 | 200,000 | 3,300/s | 4.0 / 9.5 ms |" in text
    assert "| analyzed full | 200,000 | 200,000 | 3,500/s | 4.0 / 9.5 ms |" in text
    target = "| stale statistics backlog (200,000) | >= 0.8 of the analyzed run | 0.94 "
    assert target in text and "(3,300/s against 3,500/s) | met | - |" in text
    slow = stale_result(200_000, 16, _drain(0, 80.0), _drain(200_000, 3_500.0))
    data = to_json(setup=[], rows=rows(), enqueue=None, stale=slow)
    (found,) = [t for t in data["targets"] if t["name"].startswith("stale statistics")]
    assert found["met"] is False and "stale estimates" in found["bottleneck"]
    assert data["stale_stats"]["ratio"] == 80.0 / 3_500.0


def test_the_stale_statistics_target_is_not_measured_without_the_part() -> None:
    (found,) = [t for t in targets(rows(), None) if t.name.startswith("stale statistics")]
    assert (found.name, found.met) == ("stale statistics backlog (200,000)", None)


def test_the_machine_line_gives_the_cpu_s_clock_when_the_kernel_reports_one(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.130\n"
        "processor\t: 1\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 1999.999\n"
    )
    assert report.machine(cpuinfo).startswith(f"AMD EPYC at 2.6 GHz, {os.cpu_count()} cores, ")
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Neoverse-N1\n")  # no clock reported
    assert report.machine(cpuinfo).startswith(f"Neoverse-N1, {os.cpu_count()} cores, ")
    cpuinfo.write_text("model name\t: X\ncpu MHz\t\t: unknown\n")
    assert report.machine(cpuinfo).startswith("X, ")


def test_the_cpu_check_times_its_loop_and_says_what_it_timed():
    line = report.cpu_check(200_000)
    assert re.fullmatch(
        r"200,000 additions in a Python loop took \d+\.\d\d s \(one core, at the start\)", line
    ), line


def _async_part(figure: str) -> str:
    return f"{report.ASYNC_BEGIN}\n## Async jobs\n\n| async sleep | {figure} |\n{report.ASYNC_END}"


def test_the_async_rows_go_before_the_plot_and_replace_only_their_own_part() -> None:
    full = "# rivet benchmark results\n\n## Setup\n\n- date: x\n\n## Plot\n\n![p](p.png)\n"
    once = report.with_async_section(full, _async_part("4,100/s"))
    assert once.index("## Async jobs") < once.index("## Plot")
    assert report.async_section(once) == _async_part("4,100/s")
    again = report.with_async_section(once, _async_part("4,300/s"))
    assert "4,100/s" not in again and again.count("## Async jobs") == 1
    assert again.replace(_async_part("4,300/s"), "") == once.replace(_async_part("4,100/s"), "")
    assert report.with_async_section(full, None) == full
    assert report.async_section(full) is None
    # No plot: the part goes at the end.
    bare = report.with_async_section("# rivet benchmark results\n", _async_part("1/s"))
    assert bare.endswith(report.ASYNC_END + "\n")


def test_a_full_bench_run_keeps_the_async_rows_it_did_not_measure(tmp_path: Path) -> None:
    """The full bench rewrites results.md whole except the async part, which --async-rows
    measured in a run of its own."""
    out = tmp_path / "results.md"
    out.write_text(report.with_async_section("# old\n", _async_part("4,200/s")))
    report.write_results(
        out, render(setup=[("date", "now")], rows=[], enqueue=None, plot=None, out=out)
    )
    text = out.read_text()
    assert "# old" not in text and "- date: now" in text
    assert report.async_section(text) == _async_part("4,200/s")


def test_the_async_rows_give_the_spread_of_their_runs() -> None:
    from bench.asyncbench import spread

    assert spread((4000.0, 4400.0, 4200.0)) == "10%"
    assert spread((4000.0,)) == "-"
