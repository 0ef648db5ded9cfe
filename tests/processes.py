"""Child processes of the host project for tests: its environment and ``manage.py`` runs.

A child runs ``chaos_project.settings`` against the database a test names, with
``RIVET_READ_DOTENV=0`` so the committed ``.env`` cannot point it elsewhere and every inherited
``RIVET_*`` variable removed (a shell's RIVET_FAILPOINT must not reach it).
"""

from __future__ import annotations

import contextlib
import os
import signal
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


def run_tree(
    argv: list[str], *, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """Run ``argv`` to completion in a process group of its own; past ``timeout``, kill the
    whole group and fail with what it printed.

    Whatever it started in its group dies with it; the chaos harness's workers, in sessions of
    their own, die with it too (chaos_project.kit.lifeline), and tests.hangguard ends any
    process that is left.
    """
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(
            f"{' '.join(argv[1:3])} ran past {timeout:g} s; its process group was killed. "
            f"Output:\n{out}\n{err}"
        ) from None
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a management command to completion (migrate, rivet_enqueue, rivet_stats...)."""
    return run_tree([sys.executable, str(MANAGE), *args], env=env, timeout=120)


def broken_chaos(*args: str, effect_database_url: str) -> subprocess.CompletedProcess:
    """Run tests/broken_chaos.py (a chaos run with one guard broken on purpose) to completion."""
    return run_tree(
        [sys.executable, str(Path(__file__).with_name("broken_chaos.py")), *args],
        env=child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url),
        timeout=240,
    )
