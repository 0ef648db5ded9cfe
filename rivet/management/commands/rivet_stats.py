"""manage.py rivet_stats: what one queue holds now, as the database sees it."""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput
from rivet.management.base import RivetCommand
from rivet.producer import resolve_store
from rivet.validation import check_name
from rivet.values import QueueStats

ROWS = (
    ("ready", "ready"),
    ("leased", "leased"),
    ("delayed", "delayed"),
    ("done", "done"),
    ("dead", "dead"),
    ("oldest ready age", "oldest_ready_age_secs"),
    ("fenced writes", "fenced"),
)


class Command(RivetCommand):
    help = (
        "Counts for a queue: ready (runnable now), leased (held by a worker), delayed (waiting "
        "for a run time or a retry), done, dead, the age of the oldest ready task, and the "
        "fenced writes (stale acks and fails the fencing token refused)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--queue", help="queue name (default: RIVET['QUEUE'])")
        parser.add_argument("--json", action="store_true", help="one JSON object, for machines")
        parser.add_argument("--database", help="Django database alias (default: the store's)")

    def handle(self, *args, **options):
        queue = options["queue"] or rivet_settings.QUEUE
        try:
            check_name("queue", queue)
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2) from exc
        stats = resolve_store(options["database"]).queue_stats(queue)
        if options["json"]:
            self.stdout.write(json.dumps(stats.as_dict()))
        else:
            self.stdout.write(render(stats))


def render(stats: QueueStats) -> str:
    """The stats as aligned ``name  value`` lines, headed by the queue."""
    values = {**stats.as_dict(), "done": stats.done_text}
    values["oldest_ready_age_secs"] = stats.oldest_ready_age
    lines = [f"{'queue':<18}{stats.queue}"]
    lines += [f"{label:<18}{values[key]}" for label, key in ROWS]
    return "\n".join(lines)
