"""Shared pytest setup, and ``postgres_server``: the fixture of every test that needs PostgreSQL.

Unit tests touch no database and run with no server at all. A test that needs PostgreSQL gets
it through ``postgres_server``: pytest-django's database marks pull it in (``django_db_setup``
asks for it before it creates the test databases), and fixtures that open their own connections
(the effect service's database) ask for it too. When no server answers, every such test fails
with the reason and what to do; none is ever skipped.

Store- and layer-specific fixtures belong in the conftest.py of tests/unit, tests/integration
and tests/acceptance, not here.
"""

import os
import socket
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread

# Fixture modules shared by several directories: the effect service (a throwaway database, real
# servers), the headless Chromium the admin's browser tests drive, PgBouncer in front of the
# test server (transaction and session pooling), and a second PostgreSQL cluster.
# tests.hangguard gives every test a time limit and ends the processes a test leaves behind.
pytest_plugins = [
    "tests.hangguard",
    "tests.effect_service",
    "tests.chromium",
    "tests.pgbouncer",
    "tests.two_clusters",
]

# pytest's filterwarnings=error covers this process; child processes (workers, manage.py, the
# effect service, the chaos harness) inherit this instead, so a deprecated call in rivet's code
# fails there too, on every Django of the matrix, before the next release removes what it calls.
CHILD_WARNINGS = "error::DeprecationWarning,error::PendingDeprecationWarning"
_inherited = os.environ.get("PYTHONWARNINGS")
os.environ["PYTHONWARNINGS"] = f"{_inherited},{CHILD_WARNINGS}" if _inherited else CHILD_WARNINGS


class NoDelayWSGIServer(ThreadedWSGIServer):
    """Django's live server with Nagle's algorithm off on each accepted connection.

    Its handler writes an answer's status line and headers, then its body, in separate sends.
    With Nagle on, the body waits for the client's ACK of the headers, and a client waiting
    for the rest of the answer delays that ACK (up to 40 ms on Linux): the schema fuzz's 300
    cases took 21.9 s so, 7.3 s with this. Waitress, which serves the effect service, sets
    TCP_NODELAY on its connections itself (its default socket options).
    """

    def get_request(self) -> tuple[socket.socket, object]:
        connection, address = super().get_request()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


# pytest-django's live_server (and LiveServerTestCase) build their server from this class.
LiveServerThread.server_class = NoDelayWSGIServer


@pytest.fixture
def spans():
    """The OpenTelemetry SDK's in-memory exporter of this process, empty (tests/otel.py)."""
    from tests.otel import exporter

    exporter().clear()
    return exporter()


def _describe(alias: str) -> str:
    db = settings.DATABASES[alias]
    where = db.get("HOST") or "local socket"
    if db.get("PORT"):
        where = f"{where}:{db['PORT']}"
    user = db.get("USER") or "(default user)"
    test_name = (db.get("TEST") or {}).get("NAME") or f"test_{db['NAME']}"
    return f"{user}@{where}, test database {test_name!r}"


def _server_version() -> str:
    """Connect to the server's maintenance database, as Django's test runner will."""
    db = settings.DATABASES["default"]
    params = {
        "dbname": "postgres",
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "connect_timeout": 5,
    }
    params = {key: value for key, value in params.items() if value is not None}
    with psycopg.connect(**params, autocommit=True) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The version of the PostgreSQL server 'default' names; fails the test when none answers."""
    missing = settings.RIVET_TESTS_POSTGRES_MISSING
    if missing:
        pytest.fail(missing, pytrace=False)
    try:
        return _server_version()
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
    pytest.fail(
        f"PostgreSQL does not answer for the tests ({_describe('default')}): {reason}\n"
        "Run `make test` (it finds or starts a server), or point DATABASE_URL at one.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def django_db_setup(postgres_server, django_db_setup):
    """pytest-django's test databases, made once the server is known to answer."""
    yield


def pytest_report_header(config: pytest.Config) -> list[str]:
    source = os.environ.get("RIVET_PG_SOURCE", "DATABASE_URL as given (not via make test)")
    postgres = (
        f"PostgreSQL at {_describe('default')}"
        if not settings.RIVET_TESTS_POSTGRES_MISSING
        else "no PostgreSQL in DATABASES['default'] (database tests will fail)"
    )
    return [
        f"rivet: {postgres}, for the tests that need it; source: {source}",
        f"rivet: SQLite alias 'sqlite' at {settings.DATABASES['sqlite']['TEST']['NAME']}",
    ]


def _does_nothing(context):
    return None


@pytest.fixture
def registered_kinds():
    """``registered_kinds("a", "b")`` registers no-op jobs of those kinds for one test.

    An enqueue of a kind no installed app registers is refused (RIVET['ALLOW_UNKNOWN_KINDS']);
    tests about other rules enqueue kinds of their own through this.
    """
    from rivet.jobs import job, registry

    added: list[str] = []

    def register(*names: str) -> None:
        for name in names:
            if registry.find(name) is None:
                job(name)(_does_nothing)
                added.append(name)

    yield register
    for name in added:
        registry.unregister(name)


@pytest.fixture(autouse=True)
def _worker_session_settings_end_with_the_test() -> Iterator[None]:
    """A flush on a direct connection outside a transaction gives the session the worker's
    settings (generic plans, sorting off), as a worker's loop connection keeps them; the
    suite's connections outlive each test, so the settings are taken back after the test that
    caused them, and the next test plans as usual."""
    yield
    from django.db import connections

    from rivet.stores.postgres import end_worker_session

    for wrapper in connections.all(initialized_only=True):
        if wrapper.vendor == "postgresql" and wrapper.connection is not None:
            end_worker_session(wrapper.connection)
