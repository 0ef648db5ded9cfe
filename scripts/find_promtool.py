#!/usr/bin/env python3
"""Find the promtool that checks rivet's Prometheus rules; install Debian's when we can.

Usage::

    scripts/find_promtool.py          # prints promtool's path, exit 0; or exit 3 and help

``RIVET_PROMTOOL`` names a promtool binary explicitly; otherwise ``promtool`` on PATH. When
none is found and we are root with ``apt-get``, Debian's ``prometheus`` package (which ships
promtool) is installed. The rules tests are never skipped silently: without promtool, they
fail with the help below.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debian_packages  # noqa: E402 (the scripts folder, for any caller)

EXIT_NO_PROMTOOL = 3
HELP = """\
rivet's Prometheus rules tests (tests/integration/test_prometheus_rules.py) run promtool,
and none was found. Get one in any of these ways, then run `make test` again:
  * Debian/Ubuntu, as root:   apt-get update && apt-get install -y prometheus
  * any OS: put the promtool of a Prometheus release on PATH;
  * point RIVET_PROMTOOL at a promtool binary you have, e.g.
        export RIVET_PROMTOOL=/opt/prometheus/promtool"""


def find() -> str | None:
    """The promtool binary to run, or None."""
    named = os.environ.get("RIVET_PROMTOOL")
    if named:
        return named if os.access(named, os.X_OK) else None
    return shutil.which("promtool")


def install() -> bool:
    """Install Debian's prometheus when this process may (scripts/debian_packages.py)."""
    if os.environ.get("RIVET_PROMTOOL"):
        return False
    return debian_packages.install("prometheus", who="find_promtool")


def main() -> int:
    return debian_packages.find_or_install(find, install, HELP, EXIT_NO_PROMTOOL)


if __name__ == "__main__":
    sys.exit(main())
