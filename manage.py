#!/usr/bin/env python
"""Django's command-line utility for the rivet host project."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chaos_project.settings")
    from rivet.management.base import execute_or_explain, load_settings_or_exit

    load_settings_or_exit(sys.argv)
    execute_or_explain(sys.argv)


if __name__ == "__main__":
    main()
