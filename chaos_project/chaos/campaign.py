"""A campaign: chaos runs for consecutive seeds, back to back, one table and one JSON file.

Each run's full output goes to ``<dir>/seed-N.txt``; the terminal gets a progress bar, then the
table. The campaign holds only if every run held.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos_project.chaos.harness import ChaosError, ChaosOptions, ChaosRun
from chaos_project.chaos.plan import KINDS
from chaos_project.kit.progress import progress

COLUMNS = (
    ("seed", 6),
    ("kill", 5),
    ("failpoint", 9),
    ("zombie", 6),
    ("fenced", 7),
    ("S1", 3),
    ("S2", 3),
    ("L1", 3),
    ("F2", 4),
    ("wall", 6),
    ("verdict", 7),
)
#: With --prefetch-cycle, each seed's worker --prefetch after the seed.
PREFETCH_COLUMN = ("prefetch", 8)
#: With schedules (--schedules), two more columns before the wall time.
TICK_COLUMNS = (("T1", 3), ("T2", 3))


class Campaign:
    def __init__(
        self,
        options: ChaosOptions,
        *,
        seeds: list[int],
        json_path: Path | None,
        say: Callable[[str], None] = print,
        prefetch_cycle: tuple[int | str, ...] = (),
    ) -> None:
        """``prefetch_cycle``: the seeds' worker --prefetch in turn (empty: the options')."""
        self.prefetch_cycle = prefetch_cycle
        self.options = options
        self.seeds = seeds
        self.say = say
        self.out_dir = Path(tempfile.mkdtemp(prefix="rivet-campaign-"))
        self.json_path = json_path or self.out_dir / "campaign.json"

    def run(self) -> list[dict[str, Any]]:
        faults = ",".join(self.options.faults) or "none"
        self.say(
            f"campaign: {len(self.seeds)} seeds ({self.seeds[0]}..{self.seeds[-1]}), "
            f"{self.options.tasks} tasks, {self.options.workers} workers, "
            f"{self.options.duration:g} s each, faults {faults}; output per seed in {self.out_dir}"
        )
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        for done, seed in enumerate(self.seeds):
            self.say(progress(done, len(self.seeds), f"seed {seed} running", started))
            rows.append(self._one(seed))
            last = rows[-1]
            note = "held" if last["ok"] else "FAILED " + ",".join(last["failed"])
            self.say(progress(done + 1, len(self.seeds), f"seed {seed}: {note}", started))
        self.say("")
        for text in table(rows):
            self.say(text)
        held = sum(1 for row in rows if row["ok"])
        self.say(f"\n{held} of {len(rows)} runs held every invariant")
        self.json_path.write_text(json.dumps({"runs": rows}, indent=2) + "\n")
        self.say(f"json: {self.json_path}")
        return rows

    def _one(self, seed: int) -> dict[str, Any]:
        out_path = self.out_dir / f"seed-{seed}.txt"
        options = dataclasses.replace(self.options, seed=seed)
        if self.prefetch_cycle:
            turn = self.seeds.index(seed) % len(self.prefetch_cycle)
            options = dataclasses.replace(options, prefetch=self.prefetch_cycle[turn])
        started = time.monotonic()
        with out_path.open("w") as out:

            def say(text: str) -> None:
                out.write(text + "\n")
                out.flush()

            try:
                summary = ChaosRun(options, say=say).run().summary
            except ChaosError as exc:
                say(f"error: {exc}")
                summary = {
                    "seed": seed,
                    "ok": False,
                    "failed": ["error"],
                    "violations": [str(exc)],
                    "wall_secs": round(time.monotonic() - started, 1),
                }
        summary["output"] = str(out_path)
        if self.prefetch_cycle:
            summary["prefetch"] = options.prefetch
        return summary


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The campaign table: one line per seed, then the totals (T1 and T2 with schedules)."""
    columns = COLUMNS
    if any("T1" in row for row in rows):
        columns = COLUMNS[:-2] + TICK_COLUMNS + COLUMNS[-2:]
    if any("prefetch" in row for row in rows):
        columns = columns[:1] + (PREFETCH_COLUMN,) + columns[1:]
    header = "  ".join(f"{name:>{width}}" for name, width in columns)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(_row(row, columns))
    if rows:
        lines.append("-" * len(header))
        lines.append(_row(_totals(rows), columns))
    return lines


def _row(row: dict[str, Any], columns: tuple[tuple[str, int], ...] = COLUMNS) -> str:
    events = row.get("events", {})
    zombies = row.get("zombies", {})
    bit = zombies.get("fenced", 0) + zombies.get("unfenced", 0)
    cells = {
        "seed": row["seed"],
        "prefetch": row.get("prefetch", "-"),
        **{kind: events.get(kind, "-") for kind in KINDS},
        "fenced": f"{zombies.get('fenced', 0)}/{bit}" if zombies else "-",
        "S1": row.get("S1", "-"),
        "S2": row.get("S2", "-"),
        "L1": row.get("L1", "-"),
        "F2": row.get("F2", "-"),
        "T1": row.get("T1", "-"),
        "T2": row.get("T2", "-"),
        "wall": f"{row.get('wall_secs', 0):.0f} s",
        "verdict": "held" if row["ok"] else ",".join(row["failed"]) or "failed",
    }
    return "  ".join(f"{cells[name]!s:>{width}}" for name, width in columns)


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(*path: str) -> int:
        values = []
        for row in rows:
            value: Any = row
            for key in path:
                value = value.get(key, 0) if isinstance(value, dict) else 0
            values.append(value or 0)
        return sum(values)

    return {
        "seed": "all",
        "prefetch": "",
        "ok": all(row["ok"] for row in rows),
        "failed": sorted({code for row in rows for code in row["failed"]}),
        "events": {kind: total("events", kind) for kind in KINDS},
        "zombies": {"fenced": total("zombies", "fenced"), "unfenced": total("zombies", "unfenced")},
        "S1": total("S1"),
        "S2": total("S2"),
        "L1": total("L1"),
        "F2": total("F2"),
        "T1": total("T1"),
        "T2": total("T2"),
        "wall_secs": total("wall_secs"),
    }
