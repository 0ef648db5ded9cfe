"""The first-hour messages under a server and a client that do not speak English.

A throwaway PostgreSQL cluster runs with ``lc_messages = 'de_DE.UTF-8'``: its errors say
"Relation »rivet_task« existiert nicht". The commands run with ``LANG=de_DE.UTF-8`` and their
locale set from it (as a host that calls ``setlocale`` does), two ways: on psycopg's bundled
libpq (built without translations: its own texts stay English, the C library's are German),
and on the system's libpq (``PSYCOPG_IMPL=python``; libpq's own texts German too: "Verbindung
zum Server ... fehlgeschlagen"). Every message must still name the right
failure, because rivet reads error classes and SQLSTATEs, never text.

Needs the glibc locale de_DE.UTF-8 (``scripts/find_locales.py``, run by ``make test``,
installs Debian's locales-all); without it the test fails with how to get it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from chaos_project.chaos.pgcluster import Cluster
from chaos_project.kit.services import free_port
from tests.processes import MANAGE, child_environ
from tests.tools import script

pytestmark = [pytest.mark.acceptance, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]
GERMAN = "de_DE.UTF-8"
COMMANDS = {
    "enqueue": ("rivet_enqueue", "--kind", "noop"),
    "stats": ("rivet_stats",),
    "dlq": ("rivet_dlq", "list"),
    "worker": ("rivet_worker", "--once", "--connect-timeout-secs", "2"),
}
#: Imported by every child Python: sets the process's locale from LANG, as a host may do.
SET_LOCALE = "import locale\nlocale.setlocale(locale.LC_ALL, '')\n"


@pytest.fixture(scope="module")
def german_server() -> Iterator[Cluster]:
    """A cluster of this module's own whose server messages are German."""
    finder = script("find_locales")
    if finder.missing():
        pytest.fail(finder.HELP, pytrace=False)
    cluster = Cluster.create(prefix="rivet-i18n-")
    try:
        with psycopg.connect(cluster.url("postgres"), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET lc_messages = '{GERMAN}'")
            conn.execute("SELECT pg_reload_conf()")
        with psycopg.connect(cluster.url("postgres")) as conn:
            with pytest.raises(psycopg.errors.UndefinedTable) as raised:
                conn.execute("SELECT 1 FROM rivet_task")
        assert "existiert nicht" in str(raised.value), "the server does not speak German"
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(params=["bundled-libpq", "system-libpq"])
def german_client(request, tmp_path) -> dict[str, str]:
    """Environment for a child whose locale is German (see the module's docstring)."""
    (tmp_path / "sitecustomize.py").write_text(SET_LOCALE)
    env = {"LANG": GERMAN, "LC_ALL": GERMAN, "LANGUAGE": "de", "PYTHONPATH": str(tmp_path)}
    if request.param == "system-libpq":
        env["PSYCOPG_IMPL"] = "python"
    return env


@pytest.fixture
def empty_database(german_server) -> Iterator[str]:
    """A database on the German server that exists but was never migrated."""
    name = f"rivet_unmigrated_{secrets.token_hex(4)}"
    with psycopg.connect(german_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield german_server.url(name)
    with psycopg.connect(german_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def run(argv: list[str], env: dict[str, str]) -> str:
    """Run a child to its end; it must exit 1 with one line and no traceback."""
    done = subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def command(name: str, url: str, client: dict[str, str]) -> str:
    argv = [sys.executable, str(MANAGE), *COMMANDS[name]]
    return run(argv, child_environ(url, **client))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_before_migrate_every_command_says_run_migrate(name, german_client, empty_database):
    line = command(name, empty_database, german_client)
    assert "rivet's tables do not exist in postgres://" in line
    assert "run `python manage.py migrate`" in line


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_missing_database_says_create_it(name, german_client, german_server):
    missing = f"rivet_missing_{secrets.token_hex(4)}"
    line = command(name, german_server.url(missing), german_client)
    assert f"the database in postgres://postgres@127.0.0.1:{german_server.port}/{missing}" in line
    assert "does not exist on that server: create it" in line
    assert "existiert nicht" in line  # the server's own words, in its language


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_server_says_start_it(name, german_client):
    port = free_port()
    line = command(name, f"postgres://postgres@127.0.0.1:{port}/x", german_client)
    assert f"no server answers at postgres://postgres@127.0.0.1:{port}/x" in line
    assert "start it, or fix DATABASE_URL" in line
    assert "Verbindungsaufbau abgelehnt" in line  # the C library's words, in the client's
    if german_client.get("PSYCOPG_IMPL") == "python":
        assert "fehlgeschlagen" in line  # libpq's own words, in the client's language


def test_the_effect_service_on_a_missing_database_says_create_it(german_client, german_server):
    missing = f"rivet_effect_missing_{secrets.token_hex(4)}"
    env = {**os.environ, **german_client, "EFFECT_DATABASE_URL": german_server.url(missing)}
    env["RIVET_READ_DOTENV"] = "0"
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = [sys.executable, "-m", "effect_project", "serve", "--bind", f"127.0.0.1:{free_port()}"]
    line = run(argv, env)
    assert "does not exist on that server: create it" in line
    assert "fix EFFECT_DATABASE_URL" in line
    assert "existiert nicht" in line


def test_sqlite_before_migrate_is_read_from_its_tables_not_its_words(tmp_path):
    """SQLite gives "no such table" the code of a syntax error (SQLITE_ERROR): ask the file."""
    path = tmp_path / "empty.sqlite3"
    sqlite3.connect(path).close()
    line = command("stats", f"sqlite:///{path}", {})
    assert (
        f"rivet's tables do not exist in sqlite:///{path}: run `python manage.py migrate`" in line
    )
