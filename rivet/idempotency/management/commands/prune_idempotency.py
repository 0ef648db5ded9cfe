"""Delete dedup rows older than RIVET['IDEMPOTENCY_RETENTION_SECS']; the views' rows stay."""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError

from rivet.dberrors import Failure, classify, explain, where
from rivet.idempotency.conf import setting
from rivet.idempotency.models import IdempotencyRecord

EXIT_UNAVAILABLE, EXIT_BAD_INPUT = 1, 2


class Command(BaseCommand):
    help = (
        "Delete idempotency (dedup) rows older than the retention time. A key whose row is gone "
        "is new work again, so keep the retention longer than any client retries a request."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than-secs",
            type=float,
            default=None,
            help="retention in seconds (default: RIVET['IDEMPOTENCY_RETENTION_SECS'])",
        )
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args, older_than_secs, database, **options):
        retention = (
            setting("IDEMPOTENCY_RETENTION_SECS") if older_than_secs is None else older_than_secs
        )
        if not retention > 0:  # also refuses nan
            raise CommandError(
                f"--older-than-secs must be positive, got {retention}", returncode=EXIT_BAD_INPUT
            )
        try:
            deleted, _ = IdempotencyRecord.objects.using(database).older_than(retention).delete()
        except DatabaseError as exc:
            raise CommandError(unavailable(exc, database), returncode=EXIT_UNAVAILABLE) from exc
        self.stdout.write(f"deleted {deleted} idempotency rows older than {retention:g} s")


def unavailable(exc: DatabaseError, database: str) -> str:
    """One line for a database that failed, naming the project's own migrate when it is that."""
    if classify(exc)[0] is Failure.NOT_MIGRATED:
        return (
            f"the idempotency table does not exist in {where(database)}: run this project's "
            "`migrate` first (the effect service: `python -m effect_project migrate`)"
        )
    # explain() names the variable a project keeps its URL in (DATABASE_URL_VARIABLE, as the
    # effect service does), or the alias's DATABASES entry.
    return explain(exc, database)
