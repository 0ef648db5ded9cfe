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
