"""What a database failure means to an operator: one sentence that says what to do.

The stores translate driver errors into ``StoreError`` (the driver error is its cause); the
commands, the worker's start-up check and the effect service use :func:`explain` to turn the
chain into one line, with the database named by a URL whose password is hidden.

The kind of failure is read from exception classes, PostgreSQL's SQLSTATEs and SQLite's result
codes, never from message text: the server words its messages in its ``lc_messages``, libpq in
the client's locale. Where the driver gives no code (a connection libpq could not make), the
database is asked (see :func:`classify`).
"""

from __future__ import annotations

import os
import threading
import time
from enum import Enum
from typing import Any

from django.conf import settings
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
    # Several hosts (a primary and its standbys: libpq's multi-host form) pair with one port
    # each, or share the one port given.
    hosts = str(db.get("HOST") or "localhost").split(",")
    ports = str(db.get("PORT") or 5432).split(",")
    if len(ports) != len(hosts):
        ports = ports[:1] * len(hosts)
    nodes = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    hidden = ":…" if db.get("PASSWORD") else ""
    login = f"{user}{hidden}@" if user else ""
    suffix = " (password hidden)" if hidden else ""
    return f"postgres://{login}{nodes}/{name}{suffix}"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


#: SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html) by failure.
_NOT_MIGRATED_STATES = frozenset({"42P01"})  # undefined_table
_NO_DATABASE_STATES = frozenset({"3D000"})  # invalid_catalog_name
#: admin_shutdown, crash_shutdown, cannot_connect_now (a server that is stopping or starting).
_UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
#: Whole classes: 08 connection exception, 28 invalid authorization (the login was refused).
_UNREACHABLE_CLASSES = ("08", "28")

#: sqlite3's primary result codes (https://www.sqlite.org/rescode.html).
SQLITE_ERROR = 1
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CANTOPEN = 14


def sqlite_code(exc: BaseException) -> int | None:
    """The primary SQLite result code behind ``exc`` (extended codes folded), else None.

    Read through the chain: Django's wrapper of a sqlite3 error keeps it as its cause.
    """
    return next((code for code in map(_own_sqlite_code, _chain(exc)) if code is not None), None)


def _own_sqlite_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # sqlite3 errors have it (Python 3.11+)
    return code & 0xFF if isinstance(code, int) else None


def _sqlstate(exc: BaseException) -> str | None:
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return None
    return exc.sqlstate or exc.diag.sqlstate


def _by_state(state: str) -> Failure | None:
    if state in _NOT_MIGRATED_STATES:
        return Failure.NOT_MIGRATED
    if state in _NO_DATABASE_STATES:
        return Failure.NO_DATABASE
    if state in _UNREACHABLE_STATES or state.startswith(_UNREACHABLE_CLASSES):
        return Failure.UNREACHABLE
    return None


def _connection_failed(exc: BaseException) -> bool:
    """A connection that could not be made (or was lost): the class says so, not the text.

    libpq reports no SQLSTATE for a failed connection attempt: "connection refused", a
    name that does not resolve, and the server's own FATAL at start-up ("database does not
    exist", a refused login) all arrive as a bare ``psycopg.OperationalError``. A pool that
    could not hand out a connection in time raises ``PoolTimeout``.
    """
    if psycopg_pool is not None and isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    return (
        psycopg is not None and isinstance(exc, psycopg.OperationalError) and _sqlstate(exc) is None
    )


def _kind(exc: BaseException) -> Failure | None:
    """What one error of the chain says by its class and code alone; None: nothing."""
    if isinstance(exc, MissingTables):
        return Failure.NOT_MIGRATED
    state = _sqlstate(exc)
    if state is not None:
        return _by_state(state)
    if _connection_failed(exc):
        return Failure.UNREACHABLE
    if _own_sqlite_code(exc) == SQLITE_CANTOPEN:
        return Failure.UNREACHABLE
    return None


def classify(exc: BaseException, alias: str | None = None) -> tuple[Failure, BaseException]:
    """The kind of failure behind ``exc`` and the driver error that shows it.

    Read from exception classes, SQLSTATEs and SQLite result codes, never from message text
    (a server's messages follow its ``lc_messages``, libpq's the client's locale). Two
    failures carry no code, and with ``alias`` the database is asked instead: a connection
    that failed with the named database missing from the server's catalog is NO_DATABASE,
    and a SQLite error (SQLITE_ERROR covers "no such table" and syntax alike) with rivet's
    tables missing from the file is NOT_MIGRATED.
    """
    chain = _chain(exc)
    for cause in reversed(chain):  # the driver's own error first
        failure = _kind(cause)
        if failure is Failure.UNREACHABLE and alias and _database_missing(cause, alias):
            return Failure.NO_DATABASE, cause
        if failure is None and alias and _sqlite_not_migrated(cause, alias):
            return Failure.NOT_MIGRATED, cause
        if failure is not None:
            return failure, cause
    return Failure.OTHER, chain[-1]


#: Seconds a probe of the server (is the database in its catalog?) may take to connect.
PROBE_CONNECT_TIMEOUT = 3
#: The databases a probe tries, in order: every server has them unless an operator dropped them.
MAINTENANCE_DATABASES = ("postgres", "template1")


def _database_missing(exc: BaseException, alias: str) -> bool:
    """True when the server answers and its catalog has no database named by ``alias``."""
    if not _connection_failed(exc) or isinstance(exc, _connect_timeout_errors()):
        return False
    if alias not in connections.settings or connections[alias].vendor != "postgresql":
        return False
    params = _connect_params(alias)
    name = params.get("dbname")
    for maintenance in MAINTENANCE_DATABASES:
        if maintenance == name:
            continue
        try:
            with psycopg.connect(**{**params, "dbname": maintenance}) as conn:
                row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                return row.fetchone() is None
        except psycopg.Error:
            continue
    return False


def _connect_timeout_errors() -> tuple[type[BaseException], ...]:
    """A connect that timed out: the server did not answer, so there is nothing to ask."""
    timeout = getattr(getattr(psycopg, "errors", None), "ConnectionTimeout", None)
    return (timeout,) if timeout is not None else ()


def _sqlite_not_migrated(exc: BaseException, alias: str) -> bool:
    """True for a SQLITE_ERROR from a database where some of rivet's tables are missing."""
    if _own_sqlite_code(exc) != SQLITE_ERROR or alias not in connections.settings:
        return False
    from django.apps import apps

    wanted = {model._meta.db_table for model in apps.get_app_config("rivet").get_models()}
    return _sqlite_lacks(connections[alias], wanted)


def _sqlite_lacks(connection, wanted: set[str]) -> bool:
    """True when ``connection`` is SQLite and some of the ``wanted`` tables are not in it."""
    if connection.vendor != "sqlite":
        return False
    try:
        with connection.cursor() as cursor:
            present = set(connection.introspection.table_names(cursor))
    except Exception:  # a broken transaction or a file that will not open: we cannot tell
        return False
    return not wanted <= present


def missing_table(exc: BaseException) -> bool:
    """True when ``exc`` says a table migrate creates (rivet's or the host's) is missing.

    PostgreSQL says so by its SQLSTATE (undefined_table). SQLite has no code of its own for it
    (a missing table is SQLITE_ERROR, like a syntax error), so for a SQLITE_ERROR the open
    SQLite connections are asked: is a table of a model migrate would put there missing?
    """
    chain = _chain(exc)
    if any(_sqlstate(cause) in _NOT_MIGRATED_STATES for cause in chain):
        return True
    if not any(_own_sqlite_code(cause) == SQLITE_ERROR for cause in chain):
        return False
    return any(
        _sqlite_lacks(connection, _model_tables(connection.alias))
        for connection in connections.all(initialized_only=True)
        if connection.vendor == "sqlite" and connection.connection is not None
    )


def _model_tables(alias: str) -> set[str]:
    """The tables migrate creates on ``alias`` (managed, concrete models the routers allow)."""
    from django.apps import apps
    from django.db import router

    return {
        model._meta.db_table
        for model in apps.get_models()
        if router.allow_migrate_model(alias, model)
    }


def _connect_params(alias: str) -> dict:
    """psycopg.connect() keyword arguments for ``alias`` (Django's own, less its extras)."""
    params = connections[alias].get_connection_params()
    for django_only in ("cursor_factory", "context", "pool"):
        params.pop(django_only, None)
    params["connect_timeout"] = PROBE_CONNECT_TIMEOUT
    return params


def explain(exc: BaseException, alias: str, variable: str | None = None) -> str:
    """One line: what failed, where, and what to do.

    ``variable``: the environment variable the project reads the database's URL from; by
    default the project's own (:func:`settings_to_fix`).
    """
    failure, cause = classify(exc, alias)
    place = where(alias)
    if failure is Failure.NOT_MIGRATED:
        return f"rivet's tables do not exist in {place}: run `{migrate_command(alias)}`"
    fix = settings_to_fix(alias, variable)
    if failure is Failure.NO_DATABASE:
        return (
            f"the database in {place} does not exist on that server: create it "
            f"(`createdb`), or fix {fix} ({_one_line(cause)})"
        )
    if failure is Failure.UNREACHABLE:
        return f"no server answers at {place}: start it, or fix {fix} ({_one_line(cause)})"
    return f"the database at {place} failed: {_one_line(cause)}"


def migrate_command(alias: str) -> str:
    """The command that creates rivet's tables on ``alias`` (plain ``migrate`` only migrates
    ``default``)."""
    suffix = "" if alias == "default" else f" --database {alias}"
    return f"python manage.py migrate{suffix}"


def settings_to_fix(alias: str, variable: str | None = None) -> str:
    """What names the database of ``alias``: the environment variable the project reads its
    URL from (``variable``, else settings.DATABASE_URL_VARIABLE, else DATABASE_URL when it is
    set and the alias is ``default``), or else the alias's own entry in DATABASES."""
    variable = variable or getattr(settings, "DATABASE_URL_VARIABLE", None)
    if variable is None and alias == "default" and os.environ.get("DATABASE_URL"):
        variable = "DATABASE_URL"
    if variable:
        return variable
    return f"DATABASES[{alias!r}] in the settings (HOST, PORT, NAME, USER)"


def preflight(alias: str, connect_timeout: float) -> None:
    """Raise DatabaseUnready unless ``alias`` answers in ``connect_timeout`` with rivet's tables.

    A worker checks this once at start, on a connection of its own, before its pool exists: a
    pool would wait out its own timeout, and a claim loop would log the same failure forever.
    """
    connection = connections[alias]
    try:
        if connection.vendor == "postgresql":
            found = _postgres_has_tables(connection, connect_timeout)
            if found is None:
                raise DatabaseUnready(_no_answer(alias, connect_timeout))
        else:
            with connection.cursor() as cursor:
                found = "rivet_task" in connection.introspection.table_names(cursor)
            connection.close()
    except DatabaseUnready:
        raise
    except Exception as exc:  # any driver error: explain() reads the chain
        raise DatabaseUnready(explain(exc, alias)) from exc
    if not found:
        raise DatabaseUnready(explain(MissingTables("rivet_task is not in the database"), alias))


def _postgres_has_tables(connection, connect_timeout: float) -> bool | None:
    """Whether rivet_task exists; None when the first statement got no answer in time.

    ``connect_timeout`` bounds the connect (libpq's) and then the first statement too. A pooler
    in session pooling whose server connections are all held by other clients accepts the
    connection at once and holds its first statement until one is free (PgBouncer: up to its
    ``query_wait_timeout``, two minutes by default), which no connect timeout covers. The
    statement runs on a thread of its own; past the timeout it is left to finish or fail there
    (the thread is a daemon, its connection closed when it returns) and the caller says why.
    """
    params = _connect_params(connection.alias)
    params["connect_timeout"] = max(1, round(connect_timeout))
    started = time.monotonic()
    conn = psycopg.connect(**params)
    answer: dict[str, Any] = {}

    def first_statement() -> None:
        try:
            answer["row"] = conn.execute("SELECT to_regclass('rivet_task') IS NOT NULL").fetchone()
        except BaseException as exc:  # handed to the caller's thread
            answer["error"] = exc
        finally:
            conn.close()

    asking = threading.Thread(target=first_statement, name="rivet-preflight", daemon=True)
    asking.start()
    asking.join(max(0.0, connect_timeout - (time.monotonic() - started)))
    if asking.is_alive():
        return None
    if "error" in answer:
        raise answer["error"]
    row = answer.get("row")
    return bool(row and row[0])


def _no_answer(alias: str, connect_timeout: float) -> str:
    return (
        f"{where(alias)} accepted a connection but did not answer its first statement within "
        f"{connect_timeout:g} s (--connect-timeout-secs): {NO_FREE_SERVER_CONNECTION}"
    )


#: What a first statement that gets no answer means, and what to do: said by the worker's
#: start-up check (``preflight``) and by a running worker (``rivet.worker.dbwait``) alike.
NO_FREE_SERVER_CONNECTION = (
    "no server connection is free. A pooler in session pooling (PgBouncer pool_mode = "
    "session) whose every server connection is held by another client holds each new client "
    "until one is free: give it a larger pool (default_pool_size; each worker holds up to "
    "--pool-size connections plus its LISTEN connection), or stop the clients that hold it"
)


class MissingTables(Exception):
    """rivet_task is not in the database (a stand-in cause for explain())."""


class DatabaseUnready(StoreError):
    """The worker's database cannot be used yet; the message says why and what to do."""
