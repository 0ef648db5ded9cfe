"""manage.py rivet_schema: the OpenAPI schema of rivet's HTTP API, as rivet/schema/ serves it.

drf-spectacular's own ``spectacular`` command exists only in a project that has
``drf_spectacular`` in INSTALLED_APPS, which rivet does not ask of a host. This is that command
with rivet's settings (``rivet.api.schema.SPECTACULAR``: rivet's endpoints alone, rivet's error
codes), and it needs only the ``api`` extra. Without the extra: one line, exit 2.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

from django.core.management.base import BaseCommand, CommandError

from rivet.extras import missing_extra
from rivet.management.base import EXIT_BAD_INPUT

HELP = (
    "Write the OpenAPI schema of rivet's HTTP API (what rivet/schema/ serves) to --file or "
    "standard output; drf-spectacular's options, with rivet's settings as --custom-settings."
)
RIVET_SETTINGS = "rivet.api.schema.SPECTACULAR"

#: What the command imports: drf-spectacular's command, which imports DRF.
NEEDS = ("rest_framework", "drf_spectacular")
MISSING = [name for name in NEEDS if find_spec(name) is None]

if not MISSING:
    from drf_spectacular.management.commands.spectacular import Command as SpectacularCommand

    class Command(SpectacularCommand):
        help = HELP

        def add_arguments(self, parser):
            super().add_arguments(parser)
            parser.set_defaults(custom_settings=RIVET_SETTINGS)

else:

    class Command(BaseCommand):  # type: ignore[no-redef]
        help = HELP

        def problem(self) -> str:
            return str(missing_extra(MISSING[0], extra="api", feature="rivet_schema"))

        def run_from_argv(self, argv):
            # Before argparse, which would refuse drf-spectacular's options the command lacks.
            if "--traceback" in argv:
                raise CommandError(self.problem(), returncode=EXIT_BAD_INPUT)
            self.stderr.write(f"CommandError: {self.problem()}")
            sys.exit(EXIT_BAD_INPUT)

        def handle(self, *args, **options):
            raise CommandError(self.problem(), returncode=EXIT_BAD_INPUT)
