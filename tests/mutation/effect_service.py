"""``python -m tests.mutation.effect_service serve --bind HOST:PORT``: the effect service with the
mutant RIVET_TEST_MUTATION names (tests.mutation.effect_settings), for the matrix's chaos runs
of an ``effect`` mutant. A test build only."""

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.mutation.effect_settings"
    execute_from_command_line([f"{sys.executable} -m tests.mutation.effect_service", *sys.argv[1:]])
