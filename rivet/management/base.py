"""The base of rivet's commands: a failure is one clear line and a documented exit code.

Exit 2: bad input (nothing was written). Exit 1: a dependency is unavailable (the database does
not answer, or its tables are missing). ``--traceback`` shows the whole chain instead.
"""

from __future__ import annotations

import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections
from django.utils.connection import ConnectionDoesNotExist

from rivet.conf import rivet_settings
from rivet.dberrors import explain
from rivet.errors import InvalidInput, StoreError

EXIT_UNAVAILABLE = 1
EXIT_BAD_INPUT = 2


class RivetCommand(BaseCommand):
    """A management command whose database failures and bad input end in one line."""

    def execute(self, *args, **options):
        check_alias(options.get("database"))
        try:
            return super().execute(*args, **options)
        except ConnectionDoesNotExist as exc:  # an alias named elsewhere (a setting, a router)
            raise CommandError(
                f"{exc}; the aliases in DATABASES are: {', '.join(connections)}",
                returncode=EXIT_BAD_INPUT,
            ) from exc
        except InvalidInput as exc:
            raise CommandError(f"nothing written: {exc}", returncode=EXIT_BAD_INPUT) from exc
        except (StoreError, DatabaseError) as exc:
            alias = options.get("database") or rivet_settings.DATABASE_ALIAS
            raise CommandError(explain(exc, alias), returncode=EXIT_UNAVAILABLE) from exc


def check_alias(alias: str | None) -> None:
    """Refuse a ``--database`` that is no alias of DATABASES: one line naming those that are."""
    if alias is None or alias in connections:
        return
    raise CommandError(
        f"--database {alias!r} is not a database alias; the aliases in DATABASES are: "
        f"{', '.join(connections)}",
        returncode=EXIT_BAD_INPUT,
    )


def load_settings_or_exit(argv: list[str]) -> None:
    """Load the settings now, so a bad one (DATABASE_URL='not a url') is one line and exit 2.

    Called by a project's manage.py before Django's own command line; ``--traceback`` in
    ``argv`` lets the error through whole.
    """
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 - the access is what loads the settings module
    except ImproperlyConfigured as exc:
        if "--traceback" in argv:
            raise
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(EXIT_BAD_INPUT)


def execute_or_explain(argv: list[str], variable: str | None = None) -> None:
    """Django's command line, where a database that fails under any command (``migrate`` and
    ``showmigrations`` included, which are Django's and not RivetCommands) is one line and
    exit 1 rather than a traceback; ``--traceback`` in ``argv`` lets the error through whole.

    ``variable``: the environment variable the project reads its database URL from, named in
    the line (:func:`rivet.dberrors.explain`).
    """
    from django.core.management import execute_from_command_line
    from django.db import connections

    try:
        execute_from_command_line(argv)
    except DatabaseError as exc:
        if "--traceback" in argv:
            raise
        alias = _database_option(argv) or "default"
        if alias not in connections:
            alias = "default"
        sys.stderr.write(f"CommandError: {explain(exc, alias, variable)}\n")
        sys.exit(EXIT_UNAVAILABLE)


def _database_option(argv: list[str]) -> str | None:
    """The alias ``--database ALIAS`` or ``--database=ALIAS`` names in ``argv``, if any."""
    for index, arg in enumerate(argv):
        if arg == "--database" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--database="):
            return arg.partition("=")[2]
    return None
