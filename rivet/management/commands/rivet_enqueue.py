"""manage.py rivet_enqueue: add one task from the command line.

Prints ``enqueued <id>``, or ``duplicate <id>`` (exit 0) when the idempotency key was used
before for the same work. Exit 1: the key names different work. Exit 2: bad input (malformed
or oversized payload, bad name); nothing is written.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import IdempotencyMismatch, InvalidInput
from rivet.management.base import RivetCommand
from rivet.producer import enqueue
from rivet.validation import parse_payload


class Command(RivetCommand):
    help = "Enqueue one task; a key used before with the same work prints 'duplicate <id>'."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue", help="queue name (default: RIVET['QUEUE'], or the registered job's)"
        )
        parser.add_argument("--kind", required=True, help="job kind, e.g. noop")
        parser.add_argument("--payload", default="null", help="payload as JSON (default: null)")
        parser.add_argument("--idem-key", help="idempotency key; a retry with it is a no-op")
        parser.add_argument(
            "--delay-secs", type=float, help="run no sooner than N seconds from now"
        )
        parser.add_argument("--priority", type=int, help="-100..100, higher runs first")
        parser.add_argument("--max-attempts", type=int, help="attempts before the task is buried")
        parser.add_argument(
            "--database",
            help=f"Django database alias (default: RIVET['DATABASE_ALIAS'], "
            f"now {rivet_settings.DATABASE_ALIAS!r})",
        )

    def handle(self, *args, **options):
        try:
            result = enqueue(
                options["kind"],
                parse_payload(options["payload"]),
                queue=options["queue"],
                idem_key=options["idem_key"],
                delay=options["delay_secs"],
                priority=options["priority"],
                max_attempts=options["max_attempts"],
                using=options["database"],
            )
        except InvalidInput as exc:
            raise CommandError(f"nothing enqueued: {exc}", returncode=2) from exc
        except IdempotencyMismatch as exc:
            raise CommandError(str(exc), returncode=1) from exc
        word = "duplicate" if result.duplicate else "enqueued"
        self.stdout.write(f"{word} {result.task_id}")
