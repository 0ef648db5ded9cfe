"""``python -m effect_project <command>``: manage.py for the effect service.

``python -m effect_project serve [--bind 127.0.0.1:8081] [--threads M]`` migrates
the effect database (EFFECT_DATABASE_URL) and then serves effect_project.wsgi with waitress.
"""

import os
import sys

from rivet.management.base import execute_or_explain, load_settings_or_exit


def main() -> None:
    # This entry point always means the effect service, even where the shell exports the host
    # project's DJANGO_SETTINGS_MODULE; --settings still overrides it.
    os.environ["DJANGO_SETTINGS_MODULE"] = "effect_project.settings"
    load_settings_or_exit(sys.argv)
    # A database that does not answer is one line naming EFFECT_DATABASE_URL, under any
    # command (Django's migrate and showmigrations too), exit 1.
    execute_or_explain(
        [f"{sys.executable} -m effect_project", *sys.argv[1:]], variable="EFFECT_DATABASE_URL"
    )


if __name__ == "__main__":
    main()
