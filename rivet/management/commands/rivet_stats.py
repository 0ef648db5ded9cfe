"""manage.py rivet_stats: what one queue holds now, as the database sees it.

The queue is read where it lives (``rivet.routing.alias_for_queue``; ``--database`` wins);
``--all`` reads every queue of every database that holds queues. When queues live on more than
one database, each block (and JSON object) also names its ``database``.
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, RivetConfigError
from rivet.management.base import RivetCommand
from rivet.producer import resolve_store
from rivet.routing import queue_aliases
from rivet.stores import queue_stores, store_for_queue
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
        parser.add_argument(
            "--database",
            help="Django database alias (default: the one that holds the queue)",
        )
        parser.add_argument(
            "--all",
            action="store_true",
            help="every queue that holds a task, on every database that holds queues",
        )

    def handle(self, *args, **options):
        if options["all"]:
            if options["queue"]:
                raise CommandError("give --queue or --all, not both", returncode=2)
            self.write_all(options)
            return
        queue = options["queue"] or rivet_settings.QUEUE
        try:
            check_name("queue", queue)
            store = store_for_queue(queue, options["database"])
        except (InvalidInput, RivetConfigError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        stats = store.queue_stats(queue)
        alias = (store.using or rivet_settings.DATABASE_ALIAS) if several_databases() else None
        if options["json"]:
            self.stdout.write(json.dumps(as_json(stats, alias)))
        else:
            self.stdout.write(render(stats, alias))

    def write_all(self, options: dict) -> None:
        stores = queue_stores()
        if options["database"]:
            stores = [(options["database"], resolve_store(options["database"]))]
        named = several_databases()
        found = [
            (alias if named else None, stats)
            for alias, store in stores
            for stats in store.queue_overview()
        ]
        if options["json"]:
            self.stdout.write(json.dumps([as_json(stats, alias) for alias, stats in found]))
        else:
            self.stdout.write("\n\n".join(render(stats, alias) for alias, stats in found))


def several_databases() -> bool:
    """Whether queues live on more than one database (then output names each one's)."""
    return len(queue_aliases()) > 1


def as_json(stats: QueueStats, alias: str | None) -> dict:
    body = stats.as_dict()
    if alias is not None:
        body["database"] = alias
    return body


def render(stats: QueueStats, alias: str | None = None) -> str:
    """The stats as aligned ``name  value`` lines, headed by the queue (and its database)."""
    values = {**stats.as_dict(), "done": stats.done_text}
    values["oldest_ready_age_secs"] = stats.oldest_ready_age
    lines = [f"{'queue':<18}{stats.queue}"]
    if alias is not None:
        lines.append(f"{'database':<18}{alias}")
    lines += [f"{label:<18}{values[key]}" for label, key in ROWS]
    return "\n".join(lines)
