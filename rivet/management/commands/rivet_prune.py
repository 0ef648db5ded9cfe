"""manage.py rivet_prune: delete done tasks and fenced-write records older than a retention.

Pending and dead tasks are never touched (dead ones leave through ``rivet_dlq purge``). Each
batch is one short transaction. Exit codes: 0 done, 1 the database failed, 2 bad usage.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput
from rivet.management.base import EXIT_BAD_INPUT, RivetCommand
from rivet.producer import resolve_store
from rivet.validation import check_name
from rivet.worker.options import MAX_PRUNE_BATCH, Expected, duration, integer_between
from rivet.worker.prune import KEY_CAVEAT, prune


class Command(RivetCommand):
    help = (
        "Delete done tasks and fenced-write records older than --older-than (default: "
        "RIVET['RETENTION']), in batches that each hold their locks only briefly. Pending and "
        f"dead tasks are kept. {KEY_CAVEAT}"
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="age past which rows go: 7d, 12h, 30m, 90s or seconds "
            "(default: RIVET['RETENTION'])",
        )
        parser.add_argument(
            "--batch-size",
            metavar="N",
            default=None,
            help="most rows one statement deletes (default: RIVET['PRUNE_BATCH_SIZE'], 1000)",
        )
        parser.add_argument("--queue", help="only this queue (default: every queue)")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would go; delete nothing"
        )
        parser.add_argument("--database", help="Django database alias (default: the store's)")

    def handle(self, *args, **options):
        older_than_text = options["older_than"] or rivet_settings.RETENTION
        if older_than_text is None:
            raise CommandError(
                "give --older-than (e.g. --older-than 30d) or set RIVET['RETENTION']",
                returncode=EXIT_BAD_INPUT,
            )
        older_than = _parsed("--older-than", duration, older_than_text)
        batch_text = options["batch_size"] or rivet_settings.PRUNE_BATCH_SIZE
        batch_size = _parsed("--batch-size", integer_between(1, MAX_PRUNE_BATCH), batch_text)
        queue = options["queue"]
        if queue is not None:
            try:
                check_name("queue", queue)
            except InvalidInput as exc:
                raise CommandError(str(exc), returncode=EXIT_BAD_INPUT) from exc
        store = resolve_store(options["database"])
        which = f"older than {older_than_text}" + (f" in queue {queue}" if queue else "")
        if options["dry_run"]:
            counts = store.prunable(older_than, queue=queue)
            self.stdout.write(
                f"would prune {counts.tasks} done task(s) and {counts.fenced} fenced-write "
                f"record(s) {which}; nothing deleted (dry run)"
            )
            return
        self.stdout.write(KEY_CAVEAT)
        pruned = prune(store, older_than=older_than, batch_size=batch_size, queue=queue)
        self.stdout.write(
            f"pruned {pruned.tasks} done task(s) and {pruned.fenced} fenced-write record(s) "
            f"{which}, in batches of at most {batch_size}"
        )


def _parsed(flag: str, parse, text):
    """A flag's value through its option parser; bad input is one line and exit 2."""
    try:
        return parse(text)
    except Expected as exc:
        raise CommandError(
            f"{flag} must be {exc}, got {text!r}", returncode=EXIT_BAD_INPUT
        ) from None
