"""rivet_chaos against a queue database it cannot use: one line naming the fix, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_environ, postgres_url

pytestmark = pytest.mark.django_db

MANAGE_PY = Path(__file__).resolve().parents[2] / "manage.py"


def chaos(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), "rivet_chaos", *args],
        env=child_environ(database_url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_queue_database_is_one_line_that_says_create_it() -> None:
    missing = postgres_url().rsplit("/", 1)[0] + "/rivet_chaos_no_such_database"
    done = chaos(missing, "--tasks", "10", "--duration-secs", "1", "--seed", "1")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "rivet_chaos_no_such_database does not exist on that server" in done.stderr
    assert "createdb" in done.stderr


def test_verify_with_no_server_is_one_line_that_says_start_it() -> None:
    done = chaos("postgres://postgres@127.0.0.1:1/rivet", "verify")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "no server answers at postgres://postgres@127.0.0.1:1/rivet" in done.stderr


@pytest.mark.parametrize("count", ["-1", "x", "1.5"])
def test_schedules_must_be_a_count(count: str) -> None:
    done = chaos(postgres_url(), "--schedules", count)
    assert done.returncode == 2, done.stderr
    assert f"argument --schedules: must be an integer >= 0, got '{count}'" in done.stderr
    assert "Traceback" not in done.stderr


def test_schedules_refuse_keep_before_anything_is_touched() -> None:
    done = chaos(
        postgres_url(),
        *("--schedules", "3", "--keep", "--effect-database-url", postgres_url()),
    )
    assert done.returncode == 1, done.stderr
    assert "--schedules judges every tick task of the queue" in done.stderr
    assert "drop --keep or --schedules" in done.stderr
