"""Bad input and absent databases on the command line: one line, the documented exit code.

Each case is a real process (``manage.py`` of the host, or ``python -m effect_project``), since
the exit code and the absence of a traceback are the point. Exit 2: bad input. Exit 1: a
dependency (the database, a port) is unavailable.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from chaos_project.kit.services import free_port
from tests.effect_service import REPO
from tests.processes import MANAGE, child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long]

NON_UTF8_URL = b"postgres://postgres@127.0.0.1:5432/riv\xffet"


def manage(*args: str, url: str | bytes, **extra: str) -> subprocess.CompletedProcess:
    env = child_environ("", **extra)
    env_bytes = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    env_bytes[b"DATABASE_URL"] = os.fsencode(url)
    argv = [sys.executable, str(MANAGE), *args]
    return subprocess.run(argv, env=env_bytes, capture_output=True, timeout=120, check=False)


def effect(*args: str, url: str | bytes) -> subprocess.CompletedProcess:
    env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    env.pop(b"DJANGO_SETTINGS_MODULE", None)
    env.update({b"EFFECT_DATABASE_URL": os.fsencode(url), b"RIVET_READ_DOTENV": b"0"})
    argv = [sys.executable, "-m", "effect_project", *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=60, check=False)


def one_line(done: subprocess.CompletedProcess) -> str:
    err = done.stderr.decode(errors="replace")
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture(scope="module")
def effect_url() -> Iterator[str]:
    """A migrated effect database of this module's own."""
    server = postgres_url().rsplit("/", 1)[0]
    name = f"rivet_effect_cli_{secrets.token_hex(4)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{server}/{name}"
    migrated = effect("migrate", url=url)
    assert migrated.returncode == 0, migrated.stderr
    yield url
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def empty_url() -> Iterator[str]:
    """A database that exists, where migrate never ran."""
    server = postgres_url().rsplit("/", 1)[0]
    name = f"rivet_effect_empty_{secrets.token_hex(4)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


# -- the host's commands ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [("rivet_stats",), ("rivet_worker", "--once"), ("check",)])
def test_a_database_url_with_a_byte_that_is_not_utf8_is_exit_2(command) -> None:
    done = manage(*command, url=NON_UTF8_URL)
    assert done.returncode == 2
    assert "DATABASE_URL is not valid UTF-8 (byte 0xff at character 38)" in one_line(done)


@pytest.mark.parametrize("key", ["café-8503".encode(), b"caf\xe9", b" lead"], ids=str)
def test_the_cli_refuses_a_key_that_is_not_visible_ascii(key) -> None:
    argv = [sys.executable.encode(), os.fsencode(MANAGE), b"rivet_enqueue", b"--kind", b"noop"]
    env = child_environ(postgres_url())
    done = subprocess.run(
        [*argv, b"--idem-key", key], env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert "a key is visible ASCII (0x21-0x7E)" in one_line(done)


def test_a_bad_rivet_queue_is_exit_2_naming_the_variable() -> None:
    done = manage("rivet_worker", "--once", url=postgres_url(), RIVET_QUEUE="bad queue")
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("CommandError: RIVET_QUEUE must be queue names")
    assert "'bad queue'" in line


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "no server answers at postgres://postgres@127.0.0.1:{port}/x"),
        ({"RIVET_FAILPOINT": "nowhere:1"}, "RIVET_FAILPOINT is malformed"),
        ({"RIVET_QUEUE": "bad queue"}, "RIVET_QUEUE must be queue names"),
    ],
    ids=["no-server", "failpoint", "queue"],
)
def test_json_logs_keep_the_fatal_line_json(env, expected) -> None:
    port = free_port()
    url = f"postgres://postgres@127.0.0.1:{port}/x"
    for how in ({"RIVET_LOG_FORMAT": "json"}, {}):
        flags = () if how else ("--log-format", "json")
        done = manage("rivet_worker", "--once", *flags, url=url, **env, **how)
        assert done.returncode in (1, 2), done.stderr
        lines = [json.loads(line) for line in done.stderr.decode().splitlines()]
        assert lines[-1]["level"] == "error" and lines[-1]["event"] == "worker_failed"
        assert expected.format(port=port) in lines[-1]["error"]


# -- python -m effect_project ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("nonsense", "--bind 'nonsense' is not HOST:PORT"),
        ("127.0.0.1:abc", "--bind '127.0.0.1:abc' is not HOST:PORT"),
        ("127.0.0.1:99999", "port 99999 is out of range"),
        ("127.0.0.1:0", "port 0 is out of range"),
        ("no-such-host.invalid:8081", "the host does not resolve"),
    ],
)
def test_serve_refuses_a_bind_that_is_not_host_and_port(effect_url, bind, expected) -> None:
    done = effect("serve", "--bind", bind, url=effect_url)
    assert done.returncode == 2
    assert expected in one_line(done)
    assert b"waitress on" not in done.stdout


def test_serve_on_a_port_in_use_is_exit_1(effect_url) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        done = effect("serve", "--bind", bind, url=effect_url)
    assert done.returncode == 1
    assert f"--bind {bind}: cannot listen there (Address already in use)" in one_line(done)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("serve", "--threads", "0"), "--threads and --connection-limit must be >= 1"),
        (("prune_idempotency", "--older-than-secs", "-5"), "--older-than-secs must be positive"),
    ],
)
def test_numbers_out_of_bounds_are_exit_2(effect_url, args, expected) -> None:
    done = effect(*args, url=effect_url)
    assert done.returncode == 2
    assert expected in one_line(done)


@pytest.mark.parametrize("command", ["prune_idempotency", "migrate", "showmigrations"])
def test_the_effect_project_with_no_database_server_is_one_line_exit_1(command) -> None:
    """Django's own commands too (migrate, showmigrations), through the project's entry point."""
    done = effect(command, url=f"postgres://postgres@127.0.0.1:{free_port()}/x")
    assert done.returncode == 1
    line = one_line(done)
    assert line.startswith("CommandError: no server answers at postgres://postgres@127.0.0.1:")
    assert "start it, or fix EFFECT_DATABASE_URL (" in line


@pytest.mark.parametrize("command", ["migrate", "showmigrations"])
def test_the_host_migrate_with_no_database_server_is_one_line_exit_1(command) -> None:
    done = manage(command, url=f"postgres://postgres@127.0.0.1:{free_port()}/x")
    assert done.returncode == 1
    assert "start it, or fix DATABASE_URL (" in one_line(done)


#: A host whose queue lives on the alias 'queues' (RIVET["DATABASE_ALIAS"]), given by
#: QUEUES_URL, and whose settings read no DATABASE_URL for it.
QUEUES_SETTINGS = """
from chaos_project.settings import *  # noqa: F403
from chaos_project.settings import DATABASES, RIVET
import os
from effect_project.dbconfig import database_from_url
DATABASES = {**DATABASES, "queues": database_from_url(os.environ["QUEUES_URL"], "QUEUES_URL")}
RIVET = {**RIVET, "DATABASE_ALIAS": "queues"}
"""


@pytest.mark.parametrize(
    "command", [("rivet_stats", "--queue", "demo"), ("rivet_worker", "--once")]
)
def test_rivet_on_another_alias_hears_the_migrate_and_the_settings_of_that_alias(
    tmp_path, empty_url, command
) -> None:
    (tmp_path / "queues_settings.py").write_text(QUEUES_SETTINGS)
    extra = {
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
        "DJANGO_SETTINGS_MODULE": "queues_settings",
    }
    before = manage(*command, url=postgres_url(), QUEUES_URL=empty_url, **extra)
    assert before.returncode == 1
    line = one_line(before)
    assert line.endswith("run `python manage.py migrate --database queues`"), line
    gone = f"postgres://postgres@127.0.0.1:{free_port()}/x"
    down = manage(*command, url=postgres_url(), QUEUES_URL=gone, **extra)
    assert down.returncode == 1
    line = one_line(down)
    assert "start it, or fix DATABASES['queues'] in the settings (HOST, PORT, NAME, USER) (" in line
    assert "DATABASE_URL" not in line


def test_prune_before_migrate_says_run_migrate(empty_url) -> None:
    done = effect("prune_idempotency", url=empty_url)
    assert done.returncode == 1
    assert "the idempotency table does not exist in postgres://" in one_line(done)
    assert "`python -m effect_project migrate`" in one_line(done)


def test_the_effect_service_with_a_byte_that_is_not_utf8_is_exit_2() -> None:
    done = effect("prune_idempotency", url=NON_UTF8_URL)
    assert done.returncode == 2
    assert "EFFECT_DATABASE_URL is not valid UTF-8 (byte 0xff" in one_line(done)
