"""Real worker processes: ``python manage.py rivet_worker`` started, signalled and reaped here.

A child runs the host project's settings (``chaos_project.settings``) against this test run's
PostgreSQL test database (or a SQLite file a test names), with ``RIVET_READ_DOTENV=0`` so the
committed ``.env`` cannot point it elsewhere and every inherited ``RIVET_*`` variable removed.
Tests are transactional so that rows they write are committed and visible to the children.

Only processes started by the ``workers`` fixture are ever signalled, through their Popen
handle (a child is not reaped until waited for, so its pid cannot be reused meanwhile); the
fixture kills any survivor at teardown.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import MANAGE, child_environ, manage, postgres_url


def wait_for(predicate: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` after ``limit``."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {limit:g}s waiting for {what}")
        time.sleep(0.05)


class WorkerProcess:
    """One ``manage.py rivet_worker`` child; its stdout and stderr go to one log file."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(MANAGE), "rivet_worker", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.args} still running; log:\n{self.log}") from None

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines (run the worker with --log-format json), optionally one event."""
        lines = []
        for line in self.log.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if name is None or record.get("event") == name:
                    lines.append(record)
        return lines

    def kill(self) -> None:
        if self.running:
            self.proc.kill()
        self.proc.wait(timeout=10)


class WorkerLab:
    """Starts workers on this run's PostgreSQL test database and reads the tasks they ran."""

    wait_for = staticmethod(wait_for)

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def env(self, **extra: str) -> dict[str, str]:
        return child_environ(postgres_url(), **extra)

    def start(self, *args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        log_path = self.log_dir / f"worker-{len(self.started) + 1}.log"
        worker = WorkerProcess(list(args), env or self.env(), log_path)
        self.started.append(worker)
        return worker

    @staticmethod
    def enqueue(kind: str, payload: Any = None, *, queue: str = "demo", **options: Any) -> int:
        from rivet.producer import enqueue

        return enqueue(kind, payload, queue=queue, using="default", **options).task_id

    @staticmethod
    def task(task_id: int):
        from rivet.models import Task

        return Task.objects.get(pk=task_id)

    def close(self) -> None:
        for worker in self.started:
            worker.kill()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerLab]:
    lab = WorkerLab(tmp_path)
    yield lab
    lab.close()


@pytest.fixture
def run_manage() -> Callable[..., subprocess.CompletedProcess]:
    return manage


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel, built once per run into a temporary folder (never dist/)."""
    import os

    out = tmp_path_factory.mktemp("dist")
    repo = Path(__file__).resolve().parents[2]
    # Without --sdist/--wheel, build makes the sdist, then the wheel from the sdist: a file the
    # sdist forgets is missing from the wheel too. The suite's warnings-are-errors is for
    # rivet's code, not for pip and build.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(repo)],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"build exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return out
