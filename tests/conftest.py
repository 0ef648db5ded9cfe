"""Shared pytest setup: check once, before any test, that the PostgreSQL server answers.

Store- and layer-specific fixtures belong in the conftest.py of tests/unit, tests/integration
and tests/acceptance, not here.
"""

import os

import psycopg
import pytest
from django.conf import settings

# The effect service fixtures (a throwaway database, real servers), one instance per
# session for every test that asks.
pytest_plugins = ["tests.effect_service"]

# pytest's filterwarnings=error covers this process; child processes (workers, manage.py, the
# effect service, the chaos harness) inherit this instead, so a deprecated call in rivet's code
# fails there too, on every Django of the matrix, before the next release removes what it calls.
CHILD_WARNINGS = "error::DeprecationWarning,error::PendingDeprecationWarning"
_inherited = os.environ.get("PYTHONWARNINGS")
os.environ["PYTHONWARNINGS"] = f"{_inherited},{CHILD_WARNINGS}" if _inherited else CHILD_WARNINGS

_VERSION = pytest.StashKey[str]()


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


def pytest_sessionstart(session: pytest.Session) -> None:
    try:
        version = _server_version()
    except psycopg.Error as exc:
        pytest.exit(
            f"PostgreSQL does not answer for the tests ({_describe('default')}): "
            f"{' '.join(str(exc).split())}\n"
            "Run `make test` (it finds or starts a server), or point DATABASE_URL at one.",
            returncode=3,
        )
    session.config.stash[_VERSION] = version


def pytest_report_header(config: pytest.Config) -> list[str]:
    source = os.environ.get("RIVET_PG_SOURCE", "DATABASE_URL as given (not via make test)")
    version = config.stash.get(_VERSION, "?")
    return [
        f"rivet: PostgreSQL {version} at {_describe('default')}; source: {source}",
        f"rivet: SQLite alias 'sqlite' at {settings.DATABASES['sqlite']['TEST']['NAME']}",
    ]
