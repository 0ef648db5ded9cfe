"""The chaos run as a picture: what was broken when, the fenced writes, and the throughput.

:func:`read_timeline` gathers, on one clock (seconds since the run's event log started): the
harness's events (workers started, SIGKILL, failpoint aborts, SIGSTOP and SIGCONT of zombies,
leases reclaimed from them, the opt-in faults), and from the queue database the fenced writes
(``rivet_fenced_write.created_at``) and the tasks done (``updated_at`` of done rows).
:func:`write_timeline` draws them as three panels over one time axis, beside the run's JSON
(``rivet_chaos --json run.json`` writes ``run-timeline.png``). matplotlib comes with the
``bench`` extra; without it the run says so and draws nothing.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chaos_project.chaos.fleet import EventLog
from chaos_project.chaos.plan import FAILPOINT, KILL, ZOMBIE

#: Lanes of the events panel, bottom to top: (event in the log, label, colour, marker).
LANES = (
    ("start", "worker started", "tab:green", "^"),
    (KILL, "SIGKILL", "tab:red", "X"),
    (FAILPOINT, "failpoint abort", "tab:orange", "X"),
    ("stop", "SIGSTOP (zombie)", "tab:purple", "s"),
    (ZOMBIE, "lease reclaimed", "tab:pink", "o"),
    ("thaw", "SIGCONT", "tab:blue", "D"),
)
#: Log records that are bookkeeping, not something that happened to the fleet.
NOT_DRAWN = frozenset(
    {"exit", "signal", "zombie_verdict", "not_carried_out", "skipped", "stop_held_nothing"}
)


@dataclass(frozen=True)
class Timeline:
    """A run on one clock: seconds since its event log started."""

    events: list[dict[str, Any]] = field(default_factory=list)
    fenced: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    #: When the planned chaos window started and ended (the drain follows).
    chaos: tuple[float, float] | None = None

    def lanes(self) -> list[tuple[str, str, str, list[float]]]:
        """(label, colour, marker, times) for each kind of event that happened."""
        known = {event for event, *_ in LANES}
        drawn = [
            (label, colour, marker, [r["t"] for r in self.events if r["event"] == event])
            for event, label, colour, marker in LANES
        ]
        faults = sorted({r["event"] for r in self.events} - known - NOT_DRAWN)
        for fault in faults:
            times = [r["t"] for r in self.events if r["event"] == fault]
            drawn.append((f"fault: {fault}", "tab:brown", "*", times))
        return [lane for lane in drawn if lane[3]]


def read_timeline(
    log: EventLog, *, queue: str, duration: float, using: str = "default"
) -> Timeline:
    """The run's timeline: the event log's records and the queue database's rows of ``queue``."""
    from rivet.models import FencedWrite, Task

    # The log's clock is monotonic; the database stamps rows with its wall clock (this host).
    origin = datetime.now(UTC) - timedelta(seconds=time.monotonic() - log.started)
    fenced = FencedWrite.objects.using(using).filter(queue=queue)
    done = Task.objects.using(using).filter(queue=queue, state="done")
    starts = [r["t"] for r in log.records if r["event"] == "start"]
    return Timeline(
        events=list(log.records),
        fenced=_seconds(fenced.values_list("created_at", flat=True), origin),
        done=_seconds(done.values_list("updated_at", flat=True), origin),
        chaos=(min(starts), min(starts) + duration) if starts else None,
    )


def _seconds(moments: Any, origin: datetime) -> list[float]:
    return sorted((moment - origin).total_seconds() for moment in moments)


def per_second(times: Sequence[float], end: float) -> tuple[list[float], list[int]]:
    """Counts in one-second bins from 0 to ``end``: (left edges, counts)."""
    bins = max(1, math.ceil(end))
    counts = Counter(min(max(int(t), 0), bins - 1) for t in times)
    return [float(b) for b in range(bins)], [counts.get(b, 0) for b in range(bins)]


def timeline_path(json_path: Path) -> Path:
    """Where the plot of a run goes: beside its JSON, ``NAME-timeline.png``."""
    return json_path.with_name(f"{json_path.stem}-timeline.png")


def write_timeline(path: Path, timeline: Timeline, *, title: str) -> Path:
    """Draw the three panels (events, fenced writes, throughput) into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max([1.0, *timeline.done, *timeline.fenced, *(r["t"] for r in timeline.events)]) + 1
    figure, (events, fenced, done) = plt.subplots(
        3,
        1,
        figsize=(12, 7.5),
        sharex=True,
        height_ratios=[2.2, 1, 1.4],
        layout="constrained",
    )
    _events(events, timeline)
    _fenced(fenced, timeline, end)
    _throughput(done, timeline, end)
    for ax in (events, fenced, done):
        if timeline.chaos:
            ax.axvspan(*timeline.chaos, color="0.93", zorder=0)
        ax.grid(axis="x", color="0.85", linewidth=0.6)
        ax.set_xlim(0, end)
    done.set_xlabel("seconds since the run started")
    figure.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _events(ax: Any, timeline: Timeline) -> None:
    lanes = timeline.lanes()
    note = " (shaded: the chaos window; the drain follows)" if timeline.chaos else ""
    ax.set_title(f"What the harness broke, and when{note}", fontsize=10, loc="left")
    ax.set_title("count", fontsize=9, loc="right")
    for row, (_, colour, marker, times) in enumerate(lanes):
        ax.scatter(times, [row] * len(times), color=colour, marker=marker, s=46, zorder=3)
        ax.text(1.005, row, f" {len(times)}", transform=ax.get_yaxis_transform(), va="center")
    ax.set_yticks(range(len(lanes)), [lane[0] for lane in lanes])
    ax.set_ylim(-0.7, max(len(lanes), 1) - 0.3)
    if not lanes:
        ax.text(0.5, 0.5, "no events", ha="center", transform=ax.transAxes)


def _fenced(ax: Any, timeline: Timeline, end: float) -> None:
    edges, counts = per_second(timeline.fenced, end)
    ax.bar(edges, counts, width=1.0, align="edge", color="tab:red", alpha=0.8)
    ax.set_title(
        f"Fenced writes (stale acks and fails the fence refused): {len(timeline.fenced)}",
        fontsize=10,
        loc="left",
    )
    ax.set_ylabel("per second")
    ax.set_ylim(0, max([1, *counts]) * 1.15)


def _throughput(ax: Any, timeline: Timeline, end: float) -> None:
    edges, counts = per_second(timeline.done, end)
    ax.step(edges, counts, where="post", color="tab:blue", linewidth=1.4)
    ax.fill_between(edges, counts, step="post", color="tab:blue", alpha=0.2)
    title = f"Throughput: tasks done per second ({len(timeline.done)} done)"
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel("tasks / s")
    ax.set_ylim(0, max([1, *counts]) * 1.15)
