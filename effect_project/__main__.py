"""``python -m effect_project <command>``: manage.py for the effect service.

``python -m effect_project serve [--bind 127.0.0.1:8081] [--threads M]`` migrates
the effect database (EFFECT_DATABASE_URL) and then serves effect_project.wsgi with waitress.
"""

import os
import sys

from django.core.management import execute_from_command_line

from rivet.management.base import load_settings_or_exit


def main() -> None:
    # This entry point always means the effect service, even where the shell exports the host
    # project's DJANGO_SETTINGS_MODULE; --settings still overrides it.
    os.environ["DJANGO_SETTINGS_MODULE"] = "effect_project.settings"
    load_settings_or_exit(sys.argv)
    execute_from_command_line([f"{sys.executable} -m effect_project", *sys.argv[1:]])


if __name__ == "__main__":
    main()
