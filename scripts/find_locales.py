#!/usr/bin/env python3
"""Make sure the locales rivet's non-English-server test needs exist; install Debian's if we can.

Usage::

    scripts/find_locales.py           # prints the locales, exit 0; or exit 3 and help

tests/acceptance/test_first_hour_localized.py runs a PostgreSQL server whose ``lc_messages``
is German and clients whose ``LANG`` is German, so that every first-hour message is shown to
come from error classes and codes, never from English text. Both need the glibc locale
``de_DE.UTF-8``. When it is missing and we are root with ``apt-get``, Debian's
``locales-all`` is installed. The test is never skipped silently: without the locale it fails
with the help below.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debian_packages  # noqa: E402 (the scripts folder, for any caller)

LOCALES = ("de_DE.UTF-8",)
PACKAGE = "locales-all"
EXIT_NO_LOCALE = 3
HELP = f"""\
rivet's non-English-server test (tests/acceptance/test_first_hour_localized.py) needs the
locale(s) {", ".join(LOCALES)}, and `locale -a` does not list them.
Get them in any of these ways, then run `make test` again:
  * Debian/Ubuntu, as root:   apt-get update && apt-get install -y {PACKAGE}
  * Debian/Ubuntu, as root, one locale: uncomment de_DE.UTF-8 in /etc/locale.gen, run locale-gen
  * other systems: generate de_DE.UTF-8 with the system's own locale tool"""


def _normal(name: str) -> str:
    """'de_DE.UTF-8' and 'de_DE.utf8' (what `locale -a` prints) compare equal."""
    return name.lower().replace("utf-8", "utf8")


def missing() -> list[str]:
    """The needed locales that `locale -a` does not list."""
    try:
        listed = subprocess.run(
            ["locale", "-a"], capture_output=True, text=True, check=False
        ).stdout.split()
    except OSError:
        return list(LOCALES)
    have = {_normal(name) for name in listed}
    return [name for name in LOCALES if _normal(name) not in have]


def install() -> bool:
    """Install Debian's locales-all when this process may (scripts/debian_packages.py)."""
    return debian_packages.install("locales-all", who="find_locales")


def main() -> int:
    if missing():
        install()
    if missing():
        print(HELP, file=sys.stderr)
        return EXIT_NO_LOCALE
    print(" ".join(LOCALES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
