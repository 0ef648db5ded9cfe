"""manage.py rivet_enqueue: add one task from the command line.

Prints ``enqueued <id>``, or ``duplicate <id>`` (exit 0) when the idempotency key was used
before for the same work. Exit 1: the key names different work, or the database is unavailable.
Exit 2: bad input (malformed or oversized payload, text the database cannot store, a bad name);
nothing is written. The payload comes from ``--payload JSON``, ``--payload -`` (standard input)
or ``--payload-file PATH``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from django.core.management.base import CommandError

from rivet.conf import rivet_settings
from rivet.errors import IdempotencyMismatch, InvalidInput, PayloadTooLarge
from rivet.management.base import EXIT_BAD_INPUT, RivetCommand
from rivet.producer import enqueue
from rivet.validation import parse_payload


class Command(RivetCommand):
    help = "Enqueue one task; a key used before with the same work prints 'duplicate <id>'."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue", help="queue name (default: RIVET['QUEUE'], or the registered job's)"
        )
        parser.add_argument("--kind", required=True, help="job kind, e.g. noop")
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--payload",
            default="null",
            help="payload as JSON (default: null); '-' reads it from standard input",
        )
        source.add_argument(
            "--payload-file", metavar="PATH", help="read the payload JSON from a file"
        )
        parser.add_argument("--idem-key", help="idempotency key; a retry with it is a no-op")
        parser.add_argument(
            "--delay-secs", type=float, help="run no sooner than N seconds from now"
        )
        parser.add_argument("--priority", type=int, help="-100..100, higher runs first")
        parser.add_argument("--max-attempts", type=int, help="attempts before the task is buried")
        parser.add_argument(
            "--database",
            help="Django database alias (default: the one that holds the queue: "
            f"RIVET['QUEUE_DATABASES'] and routers, else {rivet_settings.DATABASE_ALIAS!r})",
        )

    def handle(self, *args, **options):
        try:
            result = enqueue(
                options["kind"],
                parse_payload(payload_text(options)),
                queue=options["queue"],
                idem_key=options["idem_key"],
                delay=options["delay_secs"],
                priority=options["priority"],
                max_attempts=options["max_attempts"],
                using=options["database"],
            )
        except InvalidInput as exc:
            raise CommandError(f"nothing enqueued: {exc}", returncode=EXIT_BAD_INPUT) from exc
        except IdempotencyMismatch as exc:
            raise CommandError(str(exc), returncode=1) from exc
        word = "duplicate" if result.duplicate else "enqueued"
        self.stdout.write(f"{word} {result.task_id}")


def payload_text(options: dict) -> str:
    """The payload JSON from --payload, standard input (``-``) or --payload-file."""
    if options["payload_file"]:
        path = Path(options["payload_file"])
        try:
            with path.open("rb") as stream:
                return _decoded(stream, f"payload file {str(path)!r}")
        except OSError as exc:
            raise InvalidInput(f"cannot read payload file {str(path)!r}: {exc.strerror}") from exc
    if options["payload"] == "-":
        return _decoded(sys.stdin.buffer, "payload on standard input")
    return options["payload"]


def _decoded(stream: BinaryIO, what: str) -> str:
    """The stream as UTF-8 text, refused unread past a bound far above the payload limit."""
    # JSON text may carry whitespace the stored payload drops; the real limit is checked on the
    # encoded payload, this only stops a runaway file from being read into memory whole.
    bound = 4 * rivet_settings.MAX_PAYLOAD_BYTES
    data = stream.read(bound + 1)
    if len(data) > bound:
        raise PayloadTooLarge(
            f"{what} is over {bound} bytes; the payload limit is "
            f"{rivet_settings.MAX_PAYLOAD_BYTES} bytes encoded"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from exc
