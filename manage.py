#!/usr/bin/env python
"""Django's command-line utility for the rivet host project."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chaos_project.settings")
    from django.core.management import execute_from_command_line

    from rivet.management.base import load_settings_or_exit

    load_settings_or_exit(sys.argv)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
