"""Child processes of the host project for tests: its environment and ``manage.py`` runs.

A child runs ``chaos_project.settings`` against the database a test names, with
``RIVET_READ_DOTENV=0`` so the committed ``.env`` cannot point it elsewhere and every inherited
``RIVET_*`` variable removed (a shell's RIVET_FAILPOINT must not reach it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chaos_project.kit.services import database_url

MANAGE = Path(__file__).resolve().parents[1] / "manage.py"
KEEP_VARIABLES = ("RIVET_TEST_TMPDIR",)


def postgres_url() -> str:
    """A DATABASE_URL naming the test database this run's Django connection uses."""
    return database_url("default")


def child_environ(database_url: str, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RIVET_") or key in KEEP_VARIABLES
    }
    env.update(
        DJANGO_SETTINGS_MODULE="chaos_project.settings",
        DATABASE_URL=database_url,
        RIVET_READ_DOTENV="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a management command to completion (migrate, rivet_enqueue, rivet_stats...)."""
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def broken_chaos(*args: str, effect_database_url: str) -> subprocess.CompletedProcess:
    """Run tests/broken_chaos.py (a chaos run with one guard broken on purpose) to completion."""
    return subprocess.run(
        [sys.executable, str(Path(__file__).with_name("broken_chaos.py")), *args],
        env=child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
