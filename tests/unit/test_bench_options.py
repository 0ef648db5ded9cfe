"""rivet_chaos bench: list flags, their errors, the soak's default, and the plot it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management.base import CommandError

from bench.plot import write_plot
from bench.report import Row
from bench.runner import BenchError, BenchOptions
from chaos_project.management.commands.rivet_chaos import Command


def rows() -> list[Row]:
    """Backlog rows of two kinds and two worker counts with ceilings, and an offered-load row."""
    found = []
    for kind, workers, concurrency, throughput, ceiling in [
        ("noop", 1, 1, 850.0, 1500.0),
        ("noop", 1, 4, 1250.0, 5000.0),
        ("noop", 1, 16, 1650.0, 16500.0),
        ("noop", 4, 1, 1200.0, 3300.0),
        ("noop", 4, 16, 2000.0, 25800.0),
        ("effect", 1, 4, 400.0, 5000.0),
        ("effect", 1, 16, 700.0, 16500.0),
    ]:
        found.append(
            Row(
                mode="backlog",
                kind=kind,
                workers=workers,
                concurrency=concurrency,
                tasks=5000,
                throughput=throughput,
                ceiling=ceiling,
                end_to_end=(1.0, 2.0, 2.5),
                service=(0.002, 0.003, 0.004),
                redelivered=0,
            )
        )
    latencies = tuple(0.001 + (n % 40) / 20000 for n in range(3000))
    found.append(
        Row(
            mode="rate",
            kind="noop",
            workers=1,
            concurrency=4,
            tasks=3000,
            throughput=300.0,
            rate=300.0,
            end_to_end=(0.0014, 0.0017, 0.0023),
            service=(0.001, 0.0012, 0.0015),
            redelivered=0,
            latencies=latencies,
        )
    )
    return found


def parse(*args: str):
    return Command().create_parser("manage.py", "rivet_chaos").parse_args(["bench", *args])


def test_workers_and_concurrency_take_lists() -> None:
    options = parse("--workers", "1,2,4", "--concurrency", "16, 4,1,4", "--kind", "effect")
    assert options.bench_workers == (1, 2, 4)
    assert options.bench_concurrency == (16, 4, 1)
    assert options.bench_kinds == ("effect",)


def test_the_defaults_cover_the_issue_table() -> None:
    options = parse()
    assert options.bench_workers == (1, 2, 4) and options.bench_concurrency == (1, 4, 16)
    assert options.bench_kinds == ("noop", "effect")
    assert options.rate == 300.0 and options.runs == 2 and options.rate_runs == 3
    assert options.soak is None
    assert parse("--soak").soak == 500000
    assert parse("--soak", "2000").soak == 2000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "1,0"), "comma-separated list of integers >= 1 like 1,4,16, got '1,0'"),
        (("--concurrency", "four"), "got 'four'"),
        (("--concurrency", ""), "got ''"),
        (("--kind", "noop,sleep"), "must be kinds from noop,effect"),
        (("--rate", "-1"), "must be a number >= 0, got '-1'"),
        (("--enqueue-bulk", "x"), "must be an integer >= 0, got 'x'"),
        (("--enqueue-producers", "-2"), "must be an integer >= 0, got '-2'"),
        (("--rate-runs", "0"), "argument --rate-runs: must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_list_is_refused_with_what_was_expected(args, message) -> None:
    with pytest.raises(CommandError) as caught:
        parse(*args)
    assert message in str(caught.value)


def test_the_concurrent_producers_and_the_fsync_run_by_default_and_can_be_turned_off() -> None:
    options = parse()
    assert options.enqueue_producers == 8 and options.no_fsync is False
    assert BenchOptions().enqueue_producers == 8 and BenchOptions().enqueue_fsync is True
    assert "--enqueue-producers 8" in BenchOptions().command()
    assert "--no-fsync" not in BenchOptions().command()
    options = parse("--enqueue-producers", "3", "--no-fsync")
    assert options.enqueue_producers == 3 and options.no_fsync is True
    off = BenchOptions(enqueue_producers=0, enqueue_fsync=False)
    assert "--enqueue-producers 0" in off.command() and off.command().endswith(" --no-fsync")
    assert "producers at once" not in off.describe() and "no pg_test_fsync" in off.describe()
    assert "enqueue 5000 single (also from 8 producers at once)" in BenchOptions().describe()


def test_an_unknown_kind_in_the_options_is_refused() -> None:
    with pytest.raises(BenchError, match="--kind takes noop, effect; got sleep"):
        BenchOptions(kinds=("noop", "sleep"))


def test_the_json_and_the_plot_go_beside_the_results_unless_named(tmp_path: Path) -> None:
    options = BenchOptions(out=tmp_path / "r.md")
    assert options.json_out == tmp_path / "results.json"
    assert options.plot_out == tmp_path / "throughput.png"
    assert BenchOptions(out=tmp_path / "r.md", no_plot=True).plot_out is None
    assert BenchOptions(workers=(1,), concurrency=(4, 16)).pool_for(16) == 18


def test_the_plot_is_a_png_with_both_panels(tmp_path: Path) -> None:
    path = write_plot(tmp_path / "out" / "throughput.png", rows(), title="test machine")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000  # two panels of lines, a histogram, legends: not an empty canvas


def test_the_plot_says_so_when_a_mode_was_not_run(tmp_path: Path) -> None:
    backlog_only = [r for r in rows() if r.mode == "backlog"]
    path = write_plot(tmp_path / "throughput.png", backlog_only, title="no offered load")
    assert path.read_bytes().startswith(b"\x89PNG")
