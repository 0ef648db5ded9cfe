"""Delete dedup rows older than IDEMPOTENCY_RETENTION_SECS; the rows the views wrote stay."""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from rivet.idempotency.conf import setting
from rivet.idempotency.models import IdempotencyRecord


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
            help="retention in seconds (default: setting IDEMPOTENCY_RETENTION_SECS)",
        )
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args, older_than_secs, database, **options):
        retention = (
            setting("IDEMPOTENCY_RETENTION_SECS") if older_than_secs is None else older_than_secs
        )
        if retention <= 0:
            raise CommandError(f"--older-than-secs must be positive, got {retention}")
        deleted, _ = IdempotencyRecord.objects.using(database).older_than(retention).delete()
        self.stdout.write(f"deleted {deleted} idempotency rows older than {retention:g} s")
