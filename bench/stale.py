"""The backlog on stale statistics: drained as fast as on fresh ones.

The part (``--stale-stats-rows N``, run by bench/runner.py) empties the bench queue and
``VACUUM (ANALYZE)``s rivet_task, so its statistics are those of an empty table; inserts N noop
tasks with the bench's own loader and drains them with one worker at the headline
configuration, with no ANALYZE in between. Then the same after an ANALYZE of the full table.
The planner's estimates in the first drain say the queue holds a row or two: a statement whose
plan follows them (a sort of the whole backlog per claim, a walk of the claim index per settled
row) drains at a small fraction of the second rate. The target: the stale drain at 0.8 or more
of the analyzed one.
"""

from __future__ import annotations

from typing import Any

from bench.target import Target

#: The stale drain's throughput against the analyzed drain's, at least.
GOAL = 0.8
#: The table's size in the planner's statistics (pg_class.reltuples; -1: never analyzed).
RELTUPLES = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'rivet_task'::regclass"


def stale_result(
    rows: int, concurrency: int, stale: dict[str, Any], analyzed: dict[str, Any]
) -> dict[str, Any]:
    """The part's figures: each drain's rate and the table size its statistics claimed."""
    ratio = stale["per_s"] / analyzed["per_s"] if analyzed["per_s"] else None
    return {"rows": rows, "concurrency": concurrency, "stale": stale, "analyzed": analyzed} | {
        "ratio": ratio
    }


def stale_targets(stale: dict[str, Any] | None, rows: int = 200_000) -> list[Target]:
    """The part's target, measured or not."""
    name = f"stale statistics backlog ({(stale or {}).get('rows', rows):,})"
    goal = f">= {GOAL:g} of the analyzed run"
    if stale is None or stale["ratio"] is None:
        return [Target(name=name, goal=goal, measured="not measured", met=None)]
    ratio = stale["ratio"]
    return [
        Target(
            name=name,
            goal=goal,
            measured=f"{ratio:.2f} ({stale['stale']['per_s']:,.0f}/s against "
            f"{stale['analyzed']['per_s']:,.0f}/s)",
            met=ratio >= GOAL,
            bottleneck=(
                ""
                if ratio >= GOAL
                else "a worker statement's plan follows the stale estimates: explain the "
                "flush on such a table (tests/integration/test_stale_statistics.py)"
            ),
        )
    ]


def stale_table(stale: dict[str, Any]) -> list[str]:
    lines = [
        f"## Backlog on stale statistics: {stale['rows']:,} tasks",
        "",
        f"The bench queue emptied and `VACUUM (ANALYZE) rivet_task` run on the empty table; "
        f"{stale['rows']:,} noop tasks inserted (enqueue_many, batches of 10 000) and drained by "
        f"one worker at c={stale['concurrency']}, with no ANALYZE between (autovacuum does not "
        "count: the planner's row count, pg_class.reltuples, is shown as the drain found it). "
        "Then the same with an ANALYZE after the insert.",
        "",
        "| statistics | reltuples at the drain | tasks | throughput | claim to ack p50 / p99 |",
        "|---|--:|--:|--:|--:|",
    ]
    for label, key in (("analyzed empty (stale)", "stale"), ("analyzed full", "analyzed")):
        run = stale[key]
        lines.append(
            f"| {label} | {run['reltuples']:,} | {run['tasks']:,} | {run['per_s']:,.0f}/s "
            f"| {run['service_p50_ms']:.1f} / {run['service_p99_ms']:.1f} ms |"
        )
    if stale["ratio"] is not None:
        lines += ["", f"Stale against analyzed: {stale['ratio']:.2f} (target >= {GOAL:g})."]
    return lines
