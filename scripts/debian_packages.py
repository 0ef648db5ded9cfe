"""Install a Debian package for the test suite's tools, when this process may.

The find_* scripts (chromium, promtool, the locales) share it: an install happens only as root
with ``apt-get`` on PATH, waits for another installer's dpkg lock instead of failing, and runs
``apt-get update`` once before trying again (a fresh machine's package lists may be missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable

#: Seconds apt-get waits for dpkg's lock held by another installer.
LOCK_TIMEOUT_SECS = 300


def can_install() -> bool:
    """True when running as root with apt-get available."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def install(package: str, *, who: str) -> bool:
    """``apt-get install`` ``package`` (after an update if the first try fails); True on success."""
    if not can_install():
        return False
    print(f"{who}: installing Debian's {package} with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", f"DPkg::Lock::Timeout={LOCK_TIMEOUT_SECS}"]
    command = ["apt-get", *lock, "install", "-y", "--no-install-recommends", package]
    if subprocess.run(command, env=env, check=False).returncode == 0:
        return True
    subprocess.run(["apt-get", *lock, "update"], env=env, check=False)
    return subprocess.run(command, env=env, check=False).returncode == 0


def find_or_install(
    find: Callable[[], str | None], install: Callable[[], bool], help_text: str, missing: int
) -> int:
    """A find_* script's main: print what ``find`` finds (installing first if need be), or
    print ``help_text`` and return ``missing``."""
    path = find()
    if path is None and install():
        path = find()
    if path is None:
        print(help_text, file=sys.stderr)
        return missing
    print(path)
    return 0
