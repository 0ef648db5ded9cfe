#!/usr/bin/env python3
"""Find Patroni and etcd, which the Patroni failover test runs; install Debian's when we can.

Usage::

    scripts/find_patroni.py         # prints patroni's path, exit 0; or exit 3 and help

``patroni`` and ``etcd`` on PATH. When either is missing and we are root with ``apt-get``,
Debian's ``patroni`` and ``etcd-server`` packages are installed. The test
(tests/acceptance/test_patroni_failover.py, through scripts/patroni_pair.py) is never skipped:
without them it fails with the help below.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import debian_packages  # noqa: E402 (the scripts folder, for any caller)

EXIT_NO_PATRONI = 3
PACKAGES = {"patroni": "patroni", "etcd": "etcd-server"}

HELP = """\
rivet's Patroni failover test (tests/acceptance/test_patroni_failover.py) starts etcd and two
Patroni nodes, and patroni or etcd was not found. Get them in any of these ways, then run
`make test` again:

  * Debian/Ubuntu, as root:   apt-get update && apt-get install -y patroni etcd-server
  * pip install 'patroni[etcd3]' and an etcd 3 binary on PATH"""


def find() -> str | None:
    """The patroni binary, when etcd is on PATH too; else None."""
    if shutil.which("etcd") is None:
        return None
    return shutil.which("patroni")


def install() -> bool:
    """Install Debian's patroni and etcd-server when this process may."""
    return all(
        debian_packages.install(package, who="find_patroni")
        for tool, package in PACKAGES.items()
        if shutil.which(tool) is None
    )


def main() -> int:
    return debian_packages.find_or_install(find, install, HELP, EXIT_NO_PATRONI)


if __name__ == "__main__":
    sys.exit(main())
