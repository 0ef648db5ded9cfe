"""The benchmark's figure: throughput by concurrency beside its ceiling, and the latency
distribution at the offered rate. One PNG, two panels, written beside ``bench/results.md``.

matplotlib comes with the ``bench`` dependency group (``pip install --group bench``; ``dev``
has it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.report import BACKLOG, RATE, Row
from rivet.errors import RivetConfigError

#: The latency targets at the offered load (docs/benchmarking.md), drawn on the latency panel.
P50_TARGET_MS, P99_TARGET_MS = 2.0, 5.0


def require_matplotlib() -> None:
    """Refuse before measuring anything when the figure could not be drawn at the end."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise RivetConfigError(
            "the benchmark's plot needs matplotlib: pip install --group bench (or pass --no-plot)"
        ) from exc


def write_plot(path: Path, rows: Sequence[Row], *, title: str) -> Path:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    _throughput(left, [r for r in rows if r.mode == BACKLOG])
    _latency(right, next((r for r in rows if r.mode == RATE and r.latencies), None))
    figure.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _throughput(ax, rows: Sequence[Row]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_title("Full backlog: throughput by concurrency")
    ax.set_xlabel("concurrency per worker (= claim batch of the ceiling)")
    ax.set_ylabel("throughput (tasks per second, log scale)")
    if not rows:
        ax.text(0.5, 0.5, "no full-backlog run", ha="center", transform=ax.transAxes)
        return
    colours: dict[int, str] = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for workers in sorted({r.workers for r in rows}):
        colours[workers] = palette[len(colours) % len(palette)]
    styles = {"noop": ("-", "o"), "effect": ("-.", "s")}
    for (kind, workers), series in sorted(_series(rows).items()):
        line, marker = styles.get(kind, (":", "^"))
        xs = [r.concurrency for r in series]
        label = f"{kind}, {workers} worker{'s' if workers > 1 else ''}"
        ax.plot(
            xs,
            [r.throughput for r in series],
            line,
            marker=marker,
            color=colours[workers],
            label=label,
        )
    for workers in sorted(colours):
        ceiling = sorted(
            {r.concurrency: r.ceiling for r in rows if r.workers == workers and r.ceiling}.items()
        )
        if ceiling:
            ax.plot(
                [c for c, _ in ceiling],
                [y for _, y in ceiling],
                "--",
                marker="x",
                color=colours[workers],
                alpha=0.6,
                label=f"ceiling, {workers} connection{'s' if workers > 1 else ''}",
            )
    concurrencies = sorted({r.concurrency for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    # log scale: an effect row at tens per second and a ceiling at tens of thousands both read
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.grid(True, which="minor", axis="y", alpha=0.12)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best", ncols=2)


def _series(rows: Sequence[Row]) -> dict[tuple[str, int], list[Row]]:
    found: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        found.setdefault((row.kind, row.workers), []).append(row)
    return {key: sorted(value, key=lambda r: r.concurrency) for key, value in found.items()}


def _latency(ax, row: Row | None) -> None:
    if row is None:
        ax.set_title("Offered load: end-to-end latency")
        ax.text(0.5, 0.5, "no offered-load run", ha="center", transform=ax.transAxes)
        return
    ax.set_title(
        f"Offered load {row.rate:g}/s ({row.workers} worker, c={row.concurrency}): "
        "end to end, enqueue to ack"
    )
    values = sorted(x * 1000 for x in row.latencies)
    ax.hist(
        values,
        bins=60,
        range=(0, max(values[int(len(values) * 0.995)], P99_TARGET_MS) * 1.1),
        color="tab:blue",
        alpha=0.75,
        label=f"{len(values)} tasks",
    )
    p50, p99 = row.end_to_end[0] * 1000, row.end_to_end[2] * 1000
    ax.axvline(p50, color="tab:green", label=f"p50 {p50:.1f} ms (median of the runs)")
    ax.axvline(p99, color="tab:red", label=f"p99 {p99:.1f} ms")
    ax.axvline(
        P50_TARGET_MS,
        color="tab:green",
        linestyle=":",
        alpha=0.7,
        label=f"target p50 <= {P50_TARGET_MS:g} ms",
    )
    ax.axvline(
        P99_TARGET_MS,
        color="tab:red",
        linestyle=":",
        alpha=0.7,
        label=f"target p99 <= {P99_TARGET_MS:g} ms",
    )
    ax.set_xlabel("end to end, milliseconds (at most the slowest 0.5 % beyond the axis)")
    ax.set_ylabel("tasks")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
