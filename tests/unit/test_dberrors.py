"""rivet.dberrors reads error classes, SQLSTATEs and SQLite result codes, never message text."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
import pytest
from django.db import utils as django_errors
from django.db.utils import ConnectionHandler

from rivet import dberrors
from rivet.dberrors import (
    SQLITE_BUSY,
    SQLITE_CANTOPEN,
    SQLITE_ERROR,
    Failure,
    MissingTables,
    classify,
    missing_table,
    sqlite_code,
)
from rivet.errors import StoreError
from rivet.stores.sqlite import SqliteStore


def wrapped(driver_error: Exception) -> Exception:
    """The chain a store raises: StoreError <- Django's error <- the driver's error."""
    django_error = django_errors.DatabaseError(str(driver_error))
    django_error.__cause__ = driver_error
    store_error = StoreError("the store failed")
    store_error.__cause__ = django_error
    return store_error


@pytest.mark.parametrize(
    ("driver_error", "expected"),
    [
        (psycopg.errors.UndefinedTable("Relation »rivet_task« existiert nicht"), "not_migrated"),
        (psycopg.errors.InvalidCatalogName("Datenbank »x« existiert nicht"), "no_database"),
        (psycopg.errors.AdminShutdown("Verbindung wird abgebrochen"), "unreachable"),
        (psycopg.errors.CannotConnectNow("das Datenbanksystem startet"), "unreachable"),
        (
            psycopg.errors.InvalidPassword("Passwort-Authentifizierung fehlgeschlagen"),
            "unreachable",
        ),
        (psycopg.errors.ConnectionFailure("la connexion a échoué"), "unreachable"),
        (psycopg.OperationalError("Verbindungsaufbau abgelehnt"), "unreachable"),
        (psycopg.errors.ConnectionTimeout("Zeitüberschreitung"), "unreachable"),
        (psycopg_pool.PoolTimeout("kein Verbindung"), "unreachable"),
        (psycopg.errors.UniqueViolation("doppelter Schlüsselwert"), "other"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value,
)
def test_a_driver_error_is_classified_by_its_class_whatever_its_words(driver_error, expected):
    failure, cause = classify(wrapped(driver_error))
    assert (failure.value, cause) == (expected, driver_error)


def test_english_words_in_an_error_of_another_class_are_not_read():
    # The old rules matched these words; a column that does not exist is not "not migrated".
    error = psycopg.errors.UndefinedColumn('relation "rivet_task" does not exist')
    assert classify(wrapped(error))[0] is Failure.OTHER
    error = psycopg.errors.SyntaxError('database "x" does not exist, could not connect')
    assert classify(wrapped(error))[0] is Failure.OTHER


def test_the_worker_preflight_stand_in_is_not_migrated_by_its_class():
    assert classify(MissingTables("was auch immer"))[0] is Failure.NOT_MIGRATED


def test_a_sqlite_file_that_cannot_be_opened_is_unreachable_by_its_result_code(tmp_path):
    with pytest.raises(sqlite3.OperationalError) as raised:
        sqlite3.connect(tmp_path / "no-such-folder" / "rivet.sqlite3")
    assert sqlite_code(raised.value) == SQLITE_CANTOPEN
    assert classify(wrapped(raised.value)) == (Failure.UNREACHABLE, raised.value)


def test_a_sqlite_error_without_an_alias_to_ask_is_other(tmp_path):
    connection = sqlite3.connect(tmp_path / "rivet.sqlite3")
    with pytest.raises(sqlite3.OperationalError) as raised:
        connection.execute("SELECT * FROM rivet_task")
    connection.close()
    assert classify(wrapped(raised.value))[0] is Failure.OTHER


@pytest.fixture
def busy_error(tmp_path) -> sqlite3.OperationalError:
    """A real 'database is locked': another connection holds the write lock."""
    path = tmp_path / "locked.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as raised:
            waiter.execute("BEGIN IMMEDIATE")
    finally:
        waiter.close()
        holder.close()
    return raised.value


def test_the_sqlite_store_explains_a_busy_lock_by_its_result_code(busy_error):
    assert sqlite_code(busy_error) == SQLITE_BUSY
    store = SqliteStore.__new__(SqliteStore)  # the message needs only the alias
    store.using = "default"
    assert "set OPTIONS['transaction_mode'] = 'IMMEDIATE'" in store._error_message(busy_error)
    django_error = django_errors.OperationalError(str(busy_error))  # as Django raises it
    django_error.__cause__ = busy_error
    assert "transaction_mode" in store._error_message(django_error)
    other = sqlite3.OperationalError("database is locked")  # the words alone: no code
    assert store._error_message(other) == "database is locked"


# -- missing_table: the API's not_migrated, for rivet's tables and the host's ---------------


@pytest.fixture
def sqlite_alias(tmp_path, monkeypatch, django_db_blocker):
    """One open SQLite alias on an empty file of its own, the only connection dberrors asks."""
    path = str(tmp_path / "host.sqlite3")
    handler = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": path}})
    monkeypatch.setattr(dberrors, "connections", handler)
    with django_db_blocker.unblock():  # a file in tmp_path, not a test database
        handler["default"].ensure_connection()
        yield handler["default"]
        handler["default"].close()


def sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # as the sqlite3 module sets it
    return error


def test_a_sqlite_error_from_a_database_without_its_tables_is_a_missing_table(sqlite_alias):
    # SQLite's words are not read: a SQLITE_ERROR in any words, and the file has no tables.
    assert missing_table(wrapped(sqlite_error("keine solche Tabelle", SQLITE_ERROR)))


def test_a_sqlite_error_from_a_database_with_its_tables_is_no_missing_table(
    sqlite_alias, monkeypatch
):
    with sqlite_alias.cursor() as cursor:
        cursor.execute("CREATE TABLE wanted (x)")
    monkeypatch.setattr(dberrors, "_model_tables", lambda alias: {"wanted"})
    assert not missing_table(wrapped(sqlite_error("no such table: wanted", SQLITE_ERROR)))


def test_the_words_no_such_table_under_another_code_are_no_missing_table(sqlite_alias):
    assert not missing_table(wrapped(sqlite_error("no such table: rivet_task", SQLITE_BUSY)))
    assert not missing_table(wrapped(sqlite3.OperationalError("no such table: rivet_task")))


def test_a_postgres_missing_table_is_read_from_its_sqlstate():
    assert missing_table(wrapped(psycopg.errors.UndefinedTable("Relation »x« existiert nicht")))
    assert not missing_table(wrapped(psycopg.errors.UndefinedColumn('relation "x" does not exist')))


def test_where_names_every_host_of_a_multi_host_alias_with_its_port(monkeypatch) -> None:
    handler = ConnectionHandler(
        {
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            "one": {"ENGINE": "django.db.backends.postgresql", "NAME": "q", "HOST": "db",
                    "PORT": "5433", "USER": "app", "PASSWORD": "secret"},
            "two": {"ENGINE": "django.db.backends.postgresql", "NAME": "q",
                    "HOST": "10.0.0.1,10.0.0.2", "PORT": "5432,5433", "USER": "app"},
            "shared": {"ENGINE": "django.db.backends.postgresql", "NAME": "q",
                       "HOST": "a,b", "PORT": "", "USER": ""},
        }
    )  # fmt: skip
    monkeypatch.setattr(dberrors, "connections", handler)
    assert dberrors.where("one") == "postgres://app:…@db:5433/q (password hidden)"
    assert dberrors.where("two") == "postgres://app@10.0.0.1:5432,10.0.0.2:5433/q"
    assert dberrors.where("shared") == "postgres://a:5432,b:5432/q"


@pytest.mark.parametrize(
    ("alias", "command"),
    [
        ("default", "python manage.py migrate"),
        ("queues", "python manage.py migrate --database queues"),
    ],
)
def test_missing_tables_name_the_migrate_of_the_alias_rivet_is_on(alias, command):
    line = dberrors.explain(wrapped(psycopg.errors.UndefinedTable("no rivet_task")), alias)
    assert line.endswith(f": run `{command}`"), line


@pytest.mark.parametrize(
    ("alias", "environ", "fix"),
    [
        ("default", {"DATABASE_URL": "postgres://h/x"}, "fix DATABASE_URL ("),
        ("default", {}, "fix DATABASES['default'] in the settings (HOST, PORT, NAME, USER) ("),
        (
            "queues",
            {"DATABASE_URL": "postgres://h/x"},
            "fix DATABASES['queues'] in the settings (HOST, PORT, NAME, USER) (",
        ),
    ],
)
def test_an_unreachable_database_names_what_sets_it_in_this_project(
    monkeypatch, alias, environ, fix
):
    """DATABASE_URL only where the project reads it for that alias; else the alias's entry."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    line = dberrors.explain(wrapped(psycopg.errors.CannotConnectNow("starting up")), alias)
    assert ": start it, or " + fix in line, line
    gone = dberrors.explain(wrapped(psycopg.errors.InvalidCatalogName("no such db")), alias)
    assert "(`createdb`), or " + fix in gone, gone


def test_a_project_that_names_its_url_variable_hears_that_variable(settings, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings.DATABASE_URL_VARIABLE = "EFFECT_DATABASE_URL"
    line = dberrors.explain(wrapped(psycopg.errors.CannotConnectNow("starting up")), "default")
    assert ": start it, or fix EFFECT_DATABASE_URL (" in line, line
