"""``python -m effect_project serve``: migrate the effect database, then exec gunicorn.

    python -m effect_project serve [--bind 127.0.0.1:8081] [--workers N] [--threads M]

Defaults come from EFFECT_BIND, EFFECT_WORKERS and EFFECT_THREADS (settings / environment).
With --threads above 1 gunicorn uses its threaded worker, so N * M requests run at once.
The process becomes the gunicorn master (same pid): SIGTERM stops it gracefully.
"""

import os
import sys

import gunicorn
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections


class Command(BaseCommand):
    help = "Migrate the effect database, then serve effect_project.wsgi with gunicorn."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=settings.EFFECT_BIND, help="host:port")
        parser.add_argument("--workers", type=int, default=settings.EFFECT_WORKERS)
        parser.add_argument("--threads", type=int, default=settings.EFFECT_THREADS)
        parser.add_argument("--access-log", action="store_true", help="log requests to stdout")

    def handle(self, *args, bind, workers, threads, access_log, verbosity, **options):
        if workers < 1 or threads < 1:
            raise CommandError(f"--workers and --threads must be >= 1, got {workers}, {threads}")
        call_command("migrate", interactive=False, verbosity=max(verbosity - 1, 0))
        connections.close_all()  # the gunicorn workers open their own
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "effect_project.wsgi:application",
            f"--bind={bind}",
            f"--workers={workers}",
            f"--threads={threads}",
            f"--env=DJANGO_SETTINGS_MODULE={settings.SETTINGS_MODULE}",
            *(["--access-logfile=-"] if access_log else []),
        ]
        if gunicorn.version_info >= (25, 1):
            # One control socket per user by default: a second server would fight over it.
            argv.append("--no-control-socket")
        self.stdout.write(f"effect service: gunicorn on {bind}, {workers} x {threads} threads")
        self.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, argv)
