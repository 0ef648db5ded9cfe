"""What a database failure means to an operator: one sentence that says what to do.

The stores translate driver errors into ``StoreError`` (the driver error is its cause); the
commands, the worker's start-up check and the effect service use :func:`explain` to turn the
chain into one line, with the database named by a URL whose password is hidden.
"""

from __future__ import annotations

import sqlite3
from enum import Enum

from django.db import connections

from rivet.errors import StoreError

try:  # psycopg is a dependency, but the SQLite-only paths do not need it to import
    import psycopg
except ImportError:  # pragma: no cover
    psycopg = None  # type: ignore[assignment]
try:  # the pool extra
    import psycopg_pool
except ImportError:
    psycopg_pool = None  # type: ignore[assignment]


class Failure(Enum):
    """The kinds of database failure an operator acts on differently."""

    UNREACHABLE = "unreachable"
    """No server answers, or it refused the login: start it, or fix the URL."""
    NO_DATABASE = "no_database"
    """The server answers but the named database does not exist: create it."""
    NOT_MIGRATED = "not_migrated"
    """rivet's tables are missing: run migrate."""
    OTHER = "other"
    """Anything else: the driver's own words."""


def where(alias: str) -> str:
    """The database of ``alias`` as a URL without its password."""
    db = connections.settings[alias] if alias in connections.settings else {}
    name = db.get("NAME") or "?"
    if db.get("ENGINE", "").endswith("sqlite3"):
        return f"sqlite:///{name}"
    user = db.get("USER") or ""
    host = db.get("HOST") or "localhost"
    port = db.get("PORT") or 5432
    hidden = ":…" if db.get("PASSWORD") else ""
    login = f"{user}{hidden}@" if user else ""
    suffix = " (password hidden)" if hidden else ""
    return f"postgres://{login}{host}:{port}/{name}{suffix}"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def classify(exc: BaseException) -> tuple[Failure, BaseException]:
    """The kind of failure behind ``exc`` and the driver error that shows it."""
    for cause in reversed(_chain(exc)):  # the driver's own error first
        text = str(cause)
        if 'relation "rivet_' in text and "does not exist" in text:
            return Failure.NOT_MIGRATED, cause
        if "no such table: rivet_" in text:
            return Failure.NOT_MIGRATED, cause
        if "database" in text and "does not exist" in text:
            return Failure.NO_DATABASE, cause
        if psycopg_pool is not None and isinstance(cause, psycopg_pool.PoolTimeout):
            return Failure.UNREACHABLE, cause
        if psycopg is not None and isinstance(cause, psycopg.OperationalError):
            if "connection" in text or "could not" in text or "timeout" in text:
                return Failure.UNREACHABLE, cause
        if isinstance(cause, sqlite3.OperationalError) and "unable to open" in text:
            return Failure.UNREACHABLE, cause
    return Failure.OTHER, _chain(exc)[-1]


def explain(exc: BaseException, alias: str, variable: str = "DATABASE_URL") -> str:
    """One line: what failed, where, and what to do."""
    failure, cause = classify(exc)
    place = where(alias)
    if failure is Failure.NOT_MIGRATED:
        return f"rivet's tables do not exist in {place}: run `python manage.py migrate`"
    if failure is Failure.NO_DATABASE:
        return (
            f"the database in {place} does not exist on that server: create it "
            f"(`createdb`), or fix {variable} ({_one_line(cause)})"
        )
    if failure is Failure.UNREACHABLE:
        return f"no server answers at {place}: start it, or fix {variable} ({_one_line(cause)})"
    return f"the database at {place} failed: {_one_line(cause)}"


def preflight(alias: str, connect_timeout: float) -> None:
    """Raise DatabaseUnready unless ``alias`` answers in ``connect_timeout`` with rivet's tables.

    A worker checks this once at start, on a connection of its own, before its pool exists: a
    pool would wait out its own timeout, and a claim loop would log the same failure forever.
    """
    connection = connections[alias]
    try:
        if connection.vendor == "postgresql":
            found = _postgres_has_tables(connection, connect_timeout)
        else:
            with connection.cursor() as cursor:
                found = "rivet_task" in connection.introspection.table_names(cursor)
            connection.close()
    except Exception as exc:  # any driver error: explain() reads the chain
        raise DatabaseUnready(explain(exc, alias)) from exc
    if not found:
        raise DatabaseUnready(explain(MissingTables('relation "rivet_task" does not exist'), alias))


def _postgres_has_tables(connection, connect_timeout: float) -> bool:
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "pool"):
        params.pop(django_only, None)
    params["connect_timeout"] = max(1, round(connect_timeout))
    with psycopg.connect(**params) as conn:
        row = conn.execute("SELECT to_regclass('rivet_task') IS NOT NULL").fetchone()
    return bool(row and row[0])


class MissingTables(Exception):
    """rivet_task is not in the database (a stand-in cause for explain())."""


class DatabaseUnready(StoreError):
    """The worker's database cannot be used yet; the message says why and what to do."""
