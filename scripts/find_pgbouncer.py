#!/usr/bin/env python3
"""Find the PgBouncer the pooler tests start; install Debian's when we can.

Usage::

    scripts/find_pgbouncer.py         # prints pgbouncer's path, exit 0; or exit 3 and help

``RIVET_PGBOUNCER`` names a pgbouncer binary explicitly; otherwise ``pgbouncer`` on PATH, then
``/usr/sbin/pgbouncer`` (Debian's, outside a user's PATH). When none is found and we are root
with ``apt-get``, Debian's ``pgbouncer`` package is installed. The PgBouncer tests
(tests/integration/test_pgbouncer.py, tests/acceptance/test_pgbouncer.py) are never
skipped: without pgbouncer they fail with the help below.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debian_packages  # noqa: E402 (the scripts folder, for any caller)

EXIT_NO_PGBOUNCER = 3
DEBIAN_PATH = "/usr/sbin/pgbouncer"
HELP = """\
rivet's PgBouncer tests (tests/integration/test_pgbouncer.py,
tests/acceptance/test_pgbouncer.py) start pgbouncer in front of the test server, and
none was found. Get one in any of these ways, then run `make test` again:
  * Debian/Ubuntu, as root:   apt-get update && apt-get install -y pgbouncer
  * macOS:                    brew install pgbouncer
  * point RIVET_PGBOUNCER at a pgbouncer binary you have, e.g.
        export RIVET_PGBOUNCER=/opt/pgbouncer/bin/pgbouncer"""


def find() -> str | None:
    """The pgbouncer binary to run, or None."""
    named = os.environ.get("RIVET_PGBOUNCER")
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("pgbouncer")
    if found:
        return found
    return DEBIAN_PATH if os.access(DEBIAN_PATH, os.X_OK) else None


def install() -> bool:
    """Install Debian's pgbouncer when this process may (scripts/debian_packages.py)."""
    if os.environ.get("RIVET_PGBOUNCER"):
        return False
    return debian_packages.install("pgbouncer", who="find_pgbouncer")


def main() -> int:
    return debian_packages.find_or_install(find, install, HELP, EXIT_NO_PGBOUNCER)


if __name__ == "__main__":
    sys.exit(main())
