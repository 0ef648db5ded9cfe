"""bench/results.md: one section per mode, a new run replaces only its own mode's section."""

from __future__ import annotations

from pathlib import Path

from chaos_project.chaos.benchreport import duration, write_results


def section(title: str, body: str) -> str:
    return f"{title}\n\n{body}\n"


def test_a_run_replaces_its_own_section_and_keeps_the_other(tmp_path: Path) -> None:
    out = tmp_path / "bench" / "results.md"
    write_results(out, section("## Full backlog", "first backlog"))
    write_results(out, section("## Offered load: 300 task/s", "first rate"))
    write_results(out, section("## Full backlog", "second backlog"))
    text = out.read_text()
    assert text.startswith("# rivet benchmark results\n")
    assert "second backlog" in text and "first rate" in text
    assert "first backlog" not in text
    assert text.index("## Full backlog") < text.index("## Offered load")
    assert text.count("## ") == 2


def test_durations_read_in_milliseconds_below_a_second() -> None:
    assert duration(0.0043) == "4.3 ms"
    assert duration(0.9994) == "999.4 ms"
    assert duration(2.412) == "2.41 s"
