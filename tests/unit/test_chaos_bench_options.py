"""rivet_chaos bench: list flags, their errors, the soak's default, and the plot it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management.base import CommandError

from chaos_project.chaos.bench import BenchError, BenchOptions
from chaos_project.chaos.benchplot import write_plot
from chaos_project.management.commands.rivet_chaos import Command
from tests.unit.test_chaos_benchreport import rows


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
    assert options.rate == 300.0 and options.runs == 2
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
    ],
)
def test_a_bad_list_is_refused_with_what_was_expected(args, message) -> None:
    with pytest.raises(CommandError) as caught:
        parse(*args)
    assert message in str(caught.value)


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
