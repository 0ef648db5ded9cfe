"""manage.py rivet_demo: the guarantee on the embedded default (run by `make demo`)."""

from __future__ import annotations

import environ
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from chaos_project.demo import Demo, DemoFailed


class Command(BaseCommand):
    help = (
        "Enqueue one effect task (key pay-1), abort a worker between the effect and the ack, "
        "run a normal worker, and show two deliveries and one effect, read from both databases."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--port", type=int, default=8081, help="effect service port (a free one if taken)"
        )

    def handle(self, *args, **options):
        effect_url = environ.Env().str(
            "EFFECT_DATABASE_URL", default=f"sqlite:///{settings.BASE_DIR / 'effect.sqlite3'}"
        )
        demo = Demo(effect_database_url=effect_url, say=self.stdout.write, port=options["port"])
        try:
            demo.run()
        except DemoFailed as exc:
            raise CommandError(str(exc)) from exc
