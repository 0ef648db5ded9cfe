"""Fixtures for the effect service: a throwaway Postgres database and real servers.

Every server is a real ``python -m effect_project serve`` subprocess (migrate, then waitress
with several threads) on a free port. The database is created for the session, as
``rivet_effect_test_<random>``, on the server the tests' ``default`` database is on (asked for
through ``postgres_server``, so it fails like every database test when none answers), and
dropped at the end. Tests talk to the service over HTTP and look at its tables with psycopg, so
nothing of effect_project is imported into the test process (which runs under the host
project's settings).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from chaos_project.kit import services

REPO = Path(__file__).resolve().parents[1]
EFFECT_TABLES = ("effects_effect", "rivet_idempotency_record")
START_TIMEOUT_SECS = 60.0


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def replay(self) -> bool:
        return self.headers.get("idempotent-replay") == "true"


@dataclass
class EffectService:
    """One running server: its base URL, its process and where its output goes."""

    url: str
    process: subprocess.Popen
    log: Path

    def post(
        self,
        key: str | None,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"Content-Type": content_type}
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.request("POST", "/effects", data=data, headers=headers)

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def request(self, method: str, path: str, **kwargs: Any) -> Reply:
        request = urllib.request.Request(self.url + path, method=method, **kwargs)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return _reply(response)
        except urllib.error.HTTPError as error:
            with error:
                return _reply(error)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _reply(response: Any) -> Reply:
    headers = {name.lower(): value for name, value in response.headers.items()}
    return Reply(response.status, headers, response.read().decode())


class EffectDB:
    """Direct SQL on the effect database, for assertions the HTTP API cannot make."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)

    def scalar(self, sql: str, params: tuple = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()[0]

    def effects(self, key: str) -> int:
        return self.scalar("SELECT count(*) FROM effects_effect WHERE key = %s", (key,))

    def dedups(self, key: str) -> int:
        return self.scalar("SELECT count(*) FROM rivet_idempotency_record WHERE key = %s", (key,))

    def lock_waiters(self) -> int:
        """Backends on this database blocked on a lock (a request waiting for a key)."""
        return self.scalar(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )

    def wait_for_lock_waiter(self) -> None:
        wait_until(lambda: self.lock_waiters() > 0, "a request to block on a row lock")

    def truncate(self) -> None:
        self.conn.execute(f"TRUNCATE {', '.join(EFFECT_TABLES)}")

    def close(self) -> None:
        self.conn.close()


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    """Poll until `condition()` is true; fail naming `what` if it never is."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "EFFECT_DATABASE_URL": database_url, **extra}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the test process's; effect_project sets its own
    return env


def start_service(
    database_url: str, log: Path, *, threads: int = 16, **extra_env: str
) -> EffectService:
    url = f"http://127.0.0.1:{services.free_port()}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "effect_project",
                "serve",
                f"--bind={url.removeprefix('http://')}",
                f"--threads={threads}",
            ],
            cwd=REPO,
            env=service_env(database_url, **extra_env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    service = EffectService(url, process, log)
    deadline = time.monotonic() + START_TIMEOUT_SECS
    while not _answers(service):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_service(service)
            pytest.fail(f"the effect service did not start:\n{service.output()}")
        time.sleep(0.1)
    return service


def _answers(service: EffectService) -> bool:
    try:
        return service.get("/health").status == 200
    except OSError:
        return False


def stop_service(service: EffectService) -> None:
    if service.process.poll() is None:
        service.process.terminate()  # SIGTERM: the server exits 0
    try:
        service.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        service.process.kill()
        service.process.wait()


@pytest.fixture(scope="session")
def effect_database_url(postgres_server: str) -> Iterator[str]:
    """A new, empty Postgres database for the session, dropped afterwards."""
    # The server the tests' 'default' database is on (tests/conftest.py checked it answers).
    server = urllib.parse.urlsplit(services.database_url("default"))
    name = f"rivet_effect_test_{secrets.token_hex(4)}"
    admin_url = server._replace(path="/postgres").geturl()
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        pytest.fail(f"the effect service tests need PostgreSQL (DATABASE_URL): {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server._replace(path=f"/{name}").geturl()
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def effect_service(effect_database_url, tmp_path_factory) -> Iterator[EffectService]:
    """The service as deployed: 16 threads, so 16 requests run at once."""
    log = tmp_path_factory.mktemp("effect") / "service.log"
    service = start_service(effect_database_url, log, threads=16)
    yield service
    stop_service(service)


@pytest.fixture(scope="session")
def failing_effect_service(effect_service, effect_database_url, tmp_path_factory):
    """A second server on the same database with EFFECT_FAIL_BETWEEN_WRITES=1."""
    log = tmp_path_factory.mktemp("effect-failing") / "service.log"
    service = start_service(effect_database_url, log, threads=2, EFFECT_FAIL_BETWEEN_WRITES="1")
    yield service
    stop_service(service)


@pytest.fixture
def start_effect_service(tmp_path) -> Iterator[Callable[..., EffectService]]:
    """Start another server (any database URL, any options); stopped after the test."""
    started: list[EffectService] = []

    def start(database_url: str, **options: Any) -> EffectService:
        started.append(
            start_service(database_url, tmp_path / f"service{len(started)}.log", **options)
        )
        return started[-1]

    yield start
    for service in started:
        stop_service(service)


@pytest.fixture
def effect_command(effect_database_url) -> Callable[..., subprocess.CompletedProcess]:
    """Run ``python -m effect_project ARGS`` against the session's effect database."""

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "effect_project", *args],
            cwd=REPO,
            env=service_env(effect_database_url),
            capture_output=True,
            text=True,
            check=False,
        )

    return run


@pytest.fixture
def effect_db(effect_service, effect_database_url) -> Iterator[EffectDB]:
    """The effect tables, emptied before the test (the servers' migrations made them)."""
    db = EffectDB(effect_database_url)
    db.truncate()
    yield db
    db.close()
