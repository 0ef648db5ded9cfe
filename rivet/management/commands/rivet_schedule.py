"""manage.py rivet_schedule: list schedules (next and last run), run one now, pause, resume.

Exit codes (docs/operations.md): 0 done; 2 bad input (an unknown schedule name: nothing was
changed); 1 the database is unavailable.
"""

from __future__ import annotations

import json
from typing import Any

from rivet.conf import rivet_settings
from rivet.management.base import RivetCommand
from rivet.producer import resolve_store
from rivet.schedules import operate
from rivet.schedules.cron import check_timezone
from rivet.schedules.models import Schedule

COLUMNS = ("name", "state", "cron", "timezone", "kind", "next_run", "last_tick", "source")


class Command(RivetCommand):
    help = (
        "Schedules: `list` shows each with its next and last run; `run NAME` enqueues one task "
        "of it now; `pause NAME` stops its ticks; `resume NAME` starts them again from now."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser("list", help="every schedule, its next and last run")
        listing.add_argument("--json", action="store_true", help="one JSON object a line")
        for action, text in (
            ("run", "enqueue one task of the schedule now (its ticks go on as before)"),
            ("pause", "stop the schedule's ticks (none is owed for the pause)"),
            ("resume", "start a paused schedule again, from now"),
        ):
            sub = actions.add_parser(action, help=text)
            sub.add_argument("name", help="the schedule's name (see `list`)")

    def handle(self, *args, **options):
        store = resolve_store()
        alias = store.using or rivet_settings.DATABASE_ALIAS
        action = options["action"]
        if action == "list":
            rows = [describe(s) for s in Schedule.objects.using(alias).order_by("name")]
            self.stdout.write(render(rows, as_json=options["json"]))
        elif action == "run":
            result = operate.run_now(options["name"], store=store, alias=alias)
            self.stdout.write(f"enqueued task {result.task_id} for schedule {options['name']}")
        else:
            verb = operate.pause if action == "pause" else operate.resume
            done = verb(options["name"], alias=alias)
            state = "paused" if action == "pause" else "resumed"
            already = "" if done.changed else f" (it already was {state})"
            self.stdout.write(f"schedule {options['name']} {state}{already}")


def describe(schedule: Schedule) -> dict[str, Any]:
    """A schedule as the command and the API show it."""
    upcoming = operate.next_run(schedule)
    last = schedule.last_tick_at
    if last is not None:  # shown in the schedule's zone, as the next run is
        last = last.astimezone(check_timezone(schedule.timezone))
    return {
        "name": schedule.name,
        "state": "enabled" if schedule.enabled else "paused",
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "kind": schedule.kind,
        "next_run": upcoming.isoformat() if upcoming else None,
        "last_tick": last.isoformat() if last else None,
        "source": schedule.source,
    }


def render(rows: list[dict[str, Any]], *, as_json: bool) -> str:
    if as_json:
        return "\n".join(json.dumps(row) for row in rows)
    if not rows:
        return "no schedules"
    cells = [[c.replace("_", " ") for c in COLUMNS]] + [
        [str(row[c] or "-") for c in COLUMNS] for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )
