"""The same worker code on the embedded default: a SQLite file shared by worker processes."""

from __future__ import annotations

import json
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rivet.values import HANDLER_ERROR_SUFFIX

pytestmark = pytest.mark.acceptance


@pytest.fixture
def sqlite_db(tmp_path, run_manage, workers) -> tuple[Path, dict[str, str]]:
    """A freshly migrated SQLite file and a child environment pointing at it."""
    path = tmp_path / "rivet.sqlite3"
    env = {**workers.env(), "DATABASE_URL": f"sqlite:///{path}"}
    migrated = run_manage("migrate", "--verbosity", "0", env=env)
    assert migrated.returncode == 0, migrated.stderr
    return path, env


def enqueue_in_child(run_manage, env, code: str) -> None:
    done = run_manage("shell", "--command", f"import rivet\n{code}", env=env)
    assert done.returncode == 0, done.stderr


def rows(path: Path, sql: str) -> list[tuple]:
    # sqlite3's own context manager ends the transaction but leaves the connection open, which
    # Python 3.13 reports with a ResourceWarning (an error in this suite).
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def test_two_workers_drain_one_sqlite_file_with_the_same_code(sqlite_db, run_manage, workers):
    path, env = sqlite_db
    added = run_manage("rivet_enqueue", "--queue", "demo", "--kind", "fail",
                       "--max-attempts", "2", env=env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    enqueue_in_child(
        run_manage,
        env,
        "rivet.enqueue('sleep', {'ms': 50}, queue='demo')\n"
        "for n in range(30): rivet.enqueue('noop', n, queue='demo')",
    )
    pool = [
        workers.start("--queue", "demo", "--once", "--concurrency", "3",
                      "--retry-backoff-secs", "0", "--owner", f"lite{n}", env=env)
        for n in range(2)
    ]  # fmt: skip
    assert [w.wait() for w in pool] == [0, 0], [w.log for w in pool]

    stats = run_manage("rivet_stats", "--queue", "demo", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    counts = json.loads(stats.stdout)
    assert (counts["done"], counts["dead"], counts["ready"]) == (31, 1, 0)
    attempts = dict(rows(path, "SELECT kind, max(attempts) FROM rivet_task GROUP BY kind"))
    assert attempts == {"noop": 1, "sleep": 1, "fail": 2}
    [(error,)] = rows(path, "SELECT last_error FROM rivet_task WHERE kind = 'fail'")
    assert error.endswith(HANDLER_ERROR_SUFFIX)


def test_a_sigkilled_worker_s_task_comes_back_on_sqlite_too(sqlite_db, run_manage, workers):
    path, env = sqlite_db
    enqueue_in_child(run_manage, env, "rivet.enqueue('sleep', {'ms': 1500}, queue='demo')")
    fast = ("--queue", "demo", "--lease-ttl-secs", "1", "--poll-interval", "0.1")
    first = workers.start(*fast, "--owner", "first", env=env)
    workers.wait_for(
        lambda: rows(path, "SELECT lease_owner FROM rivet_task") == [("first",)], "the claim"
    )
    first.send(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    second = workers.start(*fast, "--owner", "second", "--max-jobs", "1", env=env)
    assert second.wait() == 0, second.log
    assert rows(path, "SELECT state, attempts, lease_epoch, lease_owner FROM rivet_task") == [
        ("done", 2, 2, "second")
    ]
