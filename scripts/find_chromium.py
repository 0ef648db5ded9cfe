#!/usr/bin/env python3
"""Find the Chromium that rivet's browser tests drive; install Debian's when we can.

Usage::

    scripts/find_chromium.py          # prints the browser's path, exit 0; or exit 3 and help

``RIVET_CHROMIUM`` names a browser binary explicitly. Otherwise the first of ``chromium``,
``chromium-browser``, ``google-chrome`` on PATH is used. When none is found and we are root
with ``apt-get``, Debian's ``chromium`` package is installed. Playwright's own browser download
is not used: the tests launch this binary through ``executable_path``. The browser tests are
never skipped silently: without a browser, they fail with the help below.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debian_packages  # noqa: E402 (the scripts folder, for any caller)

NAMES = ("chromium", "chromium-browser", "google-chrome")
EXIT_NO_BROWSER = 3
HELP = """\
rivet's browser tests (tests/acceptance/test_admin_browser.py) drive a real headless
Chromium, and none was found.
Get one in any of these ways, then run `make test` again:
  * Debian/Ubuntu, as root:   apt-get update && apt-get install -y chromium
  * any OS: install Chromium or Google Chrome so that `chromium` or `google-chrome` is on PATH;
  * point RIVET_CHROMIUM at a Chromium binary you have, e.g.
        export RIVET_CHROMIUM=/opt/chrome/chrome"""


def find() -> str | None:
    """The browser binary to launch, or None."""
    named = os.environ.get("RIVET_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def install() -> bool:
    """Install Debian's chromium when this process may (scripts/debian_packages.py)."""
    if os.environ.get("RIVET_CHROMIUM"):
        return False
    return debian_packages.install("chromium", who="find_chromium")


def main() -> int:
    return debian_packages.find_or_install(find, install, HELP, EXIT_NO_BROWSER)


if __name__ == "__main__":
    sys.exit(main())
