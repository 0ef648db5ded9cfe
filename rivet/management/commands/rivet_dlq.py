"""manage.py rivet_dlq: the dead-letter queue of one queue, and cancelling into it.

A task is dead when its attempts are used up (a claim buries it, so no reaper is needed), when
its handler raised rivet.Permanent, or when an operator cancelled it (``cancel ID``).
Exit codes: 0 done, 1 refused (e.g. the id is not a dead task of the queue), 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput
from rivet.management.base import RivetCommand
from rivet.operations import dead_letters
from rivet.operations.cancel import cancel
from rivet.operations.outcome import Outcome, find_dead
from rivet.producer import resolve_store
from rivet.stores.base import Store
from rivet.validation import check_name

ACTIONS = ("list", "show", "requeue", "sweep", "purge", "cancel")
NEEDS_ID = ("show", "requeue", "cancel")
ERROR_WIDTH = 60


class Command(RivetCommand):
    help = (
        "Inspect and act on dead tasks: list, show ID, requeue ID (keeps the idempotency key), "
        "sweep (bury pending tasks with no attempts left and no live lease; use only when no "
        "worker polls the queue), purge (delete dead rows; asks first unless --yes), cancel ID "
        "(bury a pending task now, or stop a running one at its next heartbeat; requeue "
        "revives it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument(
            "task_id", nargs="?", type=int, help="task id, for show, requeue and cancel"
        )
        parser.add_argument("--queue", help="queue name (default: RIVET['QUEUE'])")
        parser.add_argument("--limit", type=int, default=100, help="rows to list (default 100)")
        parser.add_argument(
            "--older-than-secs", type=float, help="purge: only tasks dead for at least N seconds"
        )
        parser.add_argument("--yes", action="store_true", help="purge: do not ask to confirm")
        parser.add_argument("--database", help="Django database alias (default: the store's)")

    def handle(self, *args, **options):
        action, task_id = options["action"], options["task_id"]
        queue = self._queue(options["queue"])
        if action in NEEDS_ID and task_id is None:
            raise CommandError(f"{action} needs a task id: rivet_dlq {action} ID", returncode=2)
        if action not in NEEDS_ID and task_id is not None:
            raise CommandError(f"{action} takes no task id (got {task_id})", returncode=2)
        if action != "purge" and (options["older_than_secs"] is not None or options["yes"]):
            raise CommandError("--older-than-secs and --yes apply to purge only", returncode=2)
        store = resolve_store(options["database"])
        if action == "list":
            self.list_dead(store, queue, options["limit"])
        elif action == "show":
            self.show_task(store, queue, task_id)
        elif action == "requeue":
            self.say(dead_letters.requeue(store, task_id, queue=queue))
        elif action == "cancel":
            self.say(cancel(store, task_id, queue=queue))
        elif action == "sweep":
            self.say(dead_letters.sweep(store, queue))
        else:
            self.purge(store, queue, options["older_than_secs"], options["yes"])

    def _queue(self, queue: str | None) -> str:
        try:
            return check_name("queue", queue or rivet_settings.QUEUE)
        except InvalidInput as exc:
            raise CommandError(str(exc), returncode=2) from exc

    def list_dead(self, store: Store, queue: str, limit: int) -> None:
        tasks = store.dead_list(queue, limit=limit)
        if not tasks:
            self.stdout.write(f"no dead tasks in queue {queue}")
            return
        self.stdout.write(f"{'id':>8}  {'kind':<20} {'attempts':>8}  {'updated_at':<26} last_error")
        for task in tasks:
            self.stdout.write(
                f"{task.id:>8}  {task.kind:<20} {task.attempts:>8}  "
                f"{task.updated_at.isoformat(timespec='seconds'):<26} {_short(task.last_error)}"
            )

    def show_task(self, store: Store, queue: str, task_id: int) -> None:
        task = self.say(find_dead(store, task_id, queue=queue), quiet=True).task
        self.stdout.write(json.dumps(vars(task), indent=2, ensure_ascii=False, default=_iso))

    def say(self, outcome: Outcome, *, quiet: bool = False) -> Outcome:
        """Print what the operation did (unless ``quiet``); a refusal is exit 1, in its words."""
        if not outcome.ok:
            raise CommandError(outcome.message, returncode=1)
        if not quiet:
            self.stdout.write(outcome.message)
        return outcome

    def purge(self, store: Store, queue: str, older_than: float | None, yes: bool) -> None:
        if older_than is not None and older_than < 0:
            raise CommandError(f"--older-than-secs must be >= 0, got {older_than}", returncode=2)
        self.stdout.write(dead_letters.PURGE_CAVEAT)
        if not yes:
            self._confirm(f"Delete the {dead_letters.purge_scope(queue, older_than)}? [y/N] ")
        self.say(dead_letters.purge_queue(store, queue, older_than_secs=older_than))

    def _confirm(self, prompt: str) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                "purge deletes rows and releases their idempotency keys, so it asks first, but "
                "stdin is not a terminal to ask on; pass --yes to purge without asking",
                returncode=2,
            )
        self.stdout.write(prompt, ending="")
        self.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CommandError("purge cancelled; nothing deleted", returncode=1)


def _short(text: str) -> str:
    """The error on one line, cut from the front: the reason a task died is at the end."""
    line = " ".join(text.split())
    return line if len(line) <= ERROR_WIDTH else "..." + line[-(ERROR_WIDTH - 3) :]


def _iso(value: object) -> str:
    """Timestamps as ISO 8601 in the JSON of ``show``."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
