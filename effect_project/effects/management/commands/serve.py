"""``python -m effect_project serve``: migrate the effect database, then serve it with waitress.

    python -m effect_project serve [--bind 127.0.0.1:8081] [--threads M] [--connection-limit C]

Defaults come from EFFECT_BIND, EFFECT_THREADS and EFFECT_CONNECTION_LIMIT (settings or the
environment). One process: waitress reads and writes every socket on its own event loop and
runs up to M requests at once on its threads, so a client that stops reading (a SIGSTOPped
worker) holds only its own sockets; the gthread worker of gunicorn lingers up to 2 s on such a
socket's close on its main loop and stalls every other client meanwhile (see
docs/effect-service.md, "Serving"). SIGTERM or SIGINT stop it.
"""

from __future__ import annotations

import signal
import socket
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.wsgi import get_wsgi_application
from django.db import DatabaseError, connections
from waitress.server import create_server

from effect_project.effects.fastpath import effects_application
from rivet.dberrors import explain

#: An idle keep-alive connection is closed after this long (a pooled client opens another).
CHANNEL_TIMEOUT_SECS = 60


class Command(BaseCommand):
    help = "Migrate the effect database, then serve the effect API with waitress."

    def add_arguments(self, parser):
        parser.add_argument(
            "--bind", default=settings.EFFECT_BIND, help="host:port (default: %(default)s)"
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=settings.EFFECT_THREADS,
            help="requests served at once (default: %(default)s)",
        )
        parser.add_argument(
            "--connection-limit",
            type=int,
            default=settings.EFFECT_CONNECTION_LIMIT,
            help="open client connections before new ones wait (default: %(default)s)",
        )
        parser.add_argument("--access-log", action="store_true", help="log requests to stdout")

    def handle(self, *args, bind, threads, connection_limit, access_log, verbosity, **options):
        if threads < 1 or connection_limit < 1:
            raise CommandError(
                f"--threads and --connection-limit must be >= 1, got {threads}, {connection_limit}",
                returncode=2,
            )
        listen = parse_bind(bind)
        try:
            call_command("migrate", interactive=False, verbosity=max(verbosity - 1, 0))
        except DatabaseError as exc:
            raise CommandError(
                f"cannot serve: {explain(exc, 'default', 'EFFECT_DATABASE_URL')}", returncode=1
            ) from exc
        connections.close_all()  # each serving thread opens its own
        # POST /effects's common case skips Django's request machinery (effects/fastpath.py).
        application = effects_application(get_wsgi_application())
        if access_log:
            application = _access_logged(application, self.stdout)
        try:
            server = create_server(
                application,
                listen=listen,
                threads=threads,
                connection_limit=connection_limit,
                channel_timeout=CHANNEL_TIMEOUT_SECS,
                ident="rivet-effect",
            )
        except (socket.gaierror, ValueError) as exc:  # waitress: "Invalid host/port specified."
            raise CommandError(
                f"--bind {bind!r}: the host does not resolve to an address to listen on",
                returncode=2,
            ) from exc
        except OSError as exc:
            raise CommandError(
                f"--bind {bind}: cannot listen there ({exc.strerror or exc}); pick a free port "
                "or stop what holds it",
                returncode=1,
            ) from exc
        self.stdout.write(
            f"effect service: waitress on {listen}, {threads} threads, "
            f"up to {connection_limit} connections"
        )
        self.stdout.flush()
        signal.signal(signal.SIGTERM, _exit)
        server.run()


def parse_bind(bind: str) -> str:
    """``bind`` as waitress's listen value, or exit 2: HOST:PORT, the port 1..65535."""
    host, sep, port = bind.rpartition(":")
    usage = "expected HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:8081 or [::1]:8081"
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise CommandError(f"--bind {bind!r} is not HOST:PORT; {usage}", returncode=2)
    if not 1 <= int(port) <= 65535:
        raise CommandError(f"--bind {bind!r}: port {port} is out of range; {usage}", returncode=2)
    return f"{host}:{int(port)}"


def _exit(signum, frame):
    sys.exit(0)


def _access_logged(application, out):
    """The application, writing one line per request (method, path, status) to ``out``."""

    def logged(environ, start_response):
        def start(status, headers, exc_info=None):
            out.write(f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO', '')} {status}")
            out.flush()
            return start_response(status, headers, exc_info)

        return application(environ, start)

    return logged
