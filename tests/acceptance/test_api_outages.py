"""The host's API when its database is down or not migrated: 503 JSON on every endpoint.

The host project is served by a real HTTP server (waitress, in a child process) on a database
that does not answer, or on one that exists but where ``migrate`` never ran. Every rivet
endpoint (metrics and the schema included) must answer 503 with rivet's JSON error body, never
Django's 500 HTML page, whatever the credentials are (authenticating needs the database too).
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from chaos_project.kit.services import free_port
from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance]

REPO = Path(__file__).resolve().parents[2]
BASIC = {"Authorization": "Basic " + base64.b64encode(b"ada:pw").decode()}
BEARER = {"Authorization": "Bearer the-metrics-token"}
#: (method, path, headers): every endpoint of rivet/urls.py, and a path none serves.
REQUESTS = [
    ("GET", "/rivet/tasks/", BASIC),
    ("POST", "/rivet/tasks/", BASIC),
    ("POST", "/rivet/tasks/bulk/", BASIC),
    ("GET", "/rivet/tasks/1/", BASIC),
    ("POST", "/rivet/tasks/1/cancel/", BASIC),
    ("GET", "/rivet/queues/", BASIC),
    ("GET", "/rivet/queues/default/", BASIC),
    ("POST", "/rivet/queues/default/sweep/", BASIC),
    ("GET", "/rivet/dead-letters/", BASIC),
    ("DELETE", "/rivet/dead-letters/1/", BASIC),
    ("POST", "/rivet/dead-letters/1/requeue/", BASIC),
    ("GET", "/rivet/metrics/", BASIC),
    ("GET", "/rivet/metrics/", BEARER),
    ("GET", "/rivet/schema/", BASIC),
    ("GET", "/rivet/docs/", BASIC),
    ("GET", "/rivet/nothing-here/", BASIC),
]
BODIES = {"/rivet/tasks/": {"kind": "noop"}, "/rivet/tasks/bulk/": {"tasks": [{"kind": "noop"}]}}


@contextmanager
def serve(database_url: str, log: Path) -> Iterator[str]:
    """The host project under waitress on ``database_url``; yields its base URL."""
    port = free_port()
    env = child_environ(database_url, RIVET_METRICS_TOKEN="the-metrics-token")
    argv = [
        sys.executable,
        "-m",
        "waitress",
        f"--listen=127.0.0.1:{port}",
        "--threads=2",
        "chaos_project.wsgi:application",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the host did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def call(base: str, method: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    body = BODIES.get(path) if method == "POST" else None
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={**headers, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def assert_every_endpoint_answers(base: str, code: str) -> list[str]:
    details = []
    for method, path, headers in REQUESTS:
        status, content_type, raw = call(base, method, path, headers)
        assert (status, content_type) == (503, "application/json"), (method, path, raw[:300])
        body = json.loads(raw)
        assert body["code"] == code, (method, path, body)
        details.append(body["detail"])
    return details


@pytest.fixture
def unmigrated_url() -> Iterator[str]:
    """An empty database on the test server: it exists, but `migrate` never ran in it."""
    name = f"rivet_api_unmigrated_{secrets.token_hex(4)}"
    server = postgres_url().rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_database_that_does_not_answer_is_503_database_unavailable(tmp_path) -> None:
    url = f"postgres://postgres:secret@127.0.0.1:{free_port()}/rivet"
    with serve(url, tmp_path / "host.log") as base:
        details = assert_every_endpoint_answers(base, "database_unavailable")
        assert all("retry later" in detail for detail in details)
        assert not any("secret" in detail or "127.0.0.1" in detail for detail in details)
    log = (tmp_path / "host.log").read_text()
    assert "no server answers at postgres://postgres:…@127.0.0.1" in log  # the operator's line
    assert "Traceback" not in log


def test_before_migrate_every_endpoint_says_run_migrate(tmp_path, unmigrated_url) -> None:
    with serve(unmigrated_url, tmp_path / "host.log") as base:
        details = assert_every_endpoint_answers(base, "not_migrated")
        assert all("run `python manage.py migrate`" in detail for detail in details)
    assert "Traceback" not in (tmp_path / "host.log").read_text()
