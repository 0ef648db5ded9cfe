"""What a new user meets when something is wrong: one clear line, the documented exit code.

Every command runs as a real ``manage.py`` process, because the exit code and the absence of
a traceback are the point. Exit 2: bad input, nothing written. Exit 1: a dependency (the
database) is unavailable.
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
from rivet.models import Task
from tests.processes import MANAGE, child_environ, manage, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

COMMANDS = {
    "enqueue": ("rivet_enqueue", "--kind", "noop"),
    "stats": ("rivet_stats",),
    "dlq": ("rivet_dlq", "list"),
    "worker": ("rivet_worker", "--once", "--connect-timeout-secs", "2"),
}


def run(*args: str | bytes, url: str, stdin: bytes | None = None, **extra: str):
    """``manage.py ARGS`` against ``url``; bytes arguments pass through as raw bytes."""
    argv = [os.fsencode(sys.executable), os.fsencode(MANAGE), *map(os.fsencode, args)]
    return subprocess.run(
        argv,
        env=child_environ(url, **extra),
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=120,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    """The error output, which must be one line with no traceback."""
    err = done.stderr.decode()
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def unmigrated_url() -> Iterator[str]:
    """An empty database on the test server: it exists, but `migrate` never ran in it."""
    name = f"rivet_unmigrated_{secrets.token_hex(4)}"
    admin = postgres_url().rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = postgres_url().rsplit("/", 1)[0] + f"/{name}"
    yield url
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()[0]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    assert tables == 0, "a command wrote tables into a database that was never migrated"


# -- payload text the database cannot store ------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ('{"a":"\\ud800"}', "payload contains a lone surrogate (U+D800 at character 6)"),
        (b'{"a":"\xff"}', "payload is not valid UTF-8 (byte 0xff at character 6)"),
        ('{"a":"x\\u0000"}', "payload contains a NUL character"),
        ('{"a":', "payload is not valid JSON"),
    ],
    ids=["lone-surrogate", "raw-0xff", "nul", "malformed"],
)
def test_bad_payload_text_exits_2_with_one_line_and_writes_nothing(payload, expected):
    done = run("rivet_enqueue", "--kind", "noop", "--payload", payload, url=postgres_url())
    assert done.returncode == 2
    assert one_line(done).startswith(f"CommandError: nothing enqueued: {expected}")
    assert Task.objects.count() == 0


def test_payload_from_stdin_and_from_a_file_over_the_shell_limit(tmp_path):
    big = {"blob": "x" * 300_000}  # over the ~128 KiB a single shell argument may hold
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(big))
    from_file = run(
        "rivet_enqueue", "--kind", "noop", "--payload-file", str(path), url=postgres_url()
    )
    from_stdin = run(
        "rivet_enqueue",
        "--kind",
        "noop",
        "--payload",
        "-",
        url=postgres_url(),
        stdin=json.dumps({"n": 2}).encode(),
    )
    assert (from_file.returncode, from_stdin.returncode) == (0, 0), from_file.stderr
    assert [t.payload for t in Task.objects.order_by("id")] == [big, {"n": 2}]


def test_payload_file_problems_are_bad_input(tmp_path):
    over = tmp_path / "over.json"
    over.write_text(json.dumps({"blob": "x" * 1_100_000}))
    latin = tmp_path / "latin1.json"
    latin.write_bytes('{"a": "café"}'.encode("latin-1"))
    cases = [
        (("--payload-file", str(over)), "payload is 1100011 bytes encoded; the limit is 1048576"),
        (("--payload-file", str(latin)), "is not valid UTF-8 (byte 0xe9 at offset 10)"),
        (("--payload-file", str(tmp_path / "nope")), "cannot read payload file"),
        (("--payload", "{}", "--payload-file", str(over)), "not allowed with argument"),
    ]
    for args, expected in cases:
        done = run("rivet_enqueue", "--kind", "noop", *args, url=postgres_url())
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr.decode()
        assert "Traceback" not in done.stderr.decode()
    assert Task.objects.count() == 0


def test_a_name_outside_ascii_says_ascii():
    done = run("rivet_enqueue", "--kind", "ünïcode", url=postgres_url())
    assert done.returncode == 2
    assert "kind 'ünïcode' may use only ASCII letters (a-z, A-Z), digits" in one_line(done)
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--concurrency", "100000", "--concurrency must be an integer from 1 to 1024"),
        ("--pool-size", "99999", "--pool-size must be an integer from 2 to 1024"),
        (
            "--lease-ttl-secs",
            "1e12",
            "--lease-ttl-secs must be a number of seconds > 0 and <= 86400",
        ),
    ],
)
def test_absurd_worker_numbers_are_refused_with_the_bound(flag, value, expected):
    done = run("rivet_worker", "--once", flag, value, url=postgres_url())
    assert done.returncode == 2
    assert expected in one_line(done)


# -- an unavailable database ---------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_server_is_one_line_naming_it_and_exit_1(command):
    port = free_port()
    url = f"postgres://postgres:secret@127.0.0.1:{port}/x"
    done = run(*COMMANDS[command], url=url)
    assert done.returncode == 1
    line = one_line(done)
    assert (
        f"no server answers at postgres://postgres:…@127.0.0.1:{port}/x (password hidden)" in line
    )
    assert "secret" not in line
    assert "fix DATABASE_URL" in line


def test_a_server_that_never_answers_stops_the_worker_within_its_connect_timeout():
    with socket.socket() as silent:  # accepts the TCP connection, never speaks PostgreSQL
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgres://postgres@127.0.0.1:{silent.getsockname()[1]}/x"
        done = run(*COMMANDS["worker"], url=url)
    assert done.returncode == 1
    assert "no server answers" in one_line(done)
    assert "timeout" in one_line(done)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_before_migrate_every_command_says_run_migrate(command, unmigrated_url):
    done = run(*COMMANDS[command], url=unmigrated_url)
    assert done.returncode == 1
    assert "rivet's tables do not exist in postgres://" in one_line(done)
    assert "run `python manage.py migrate`" in one_line(done)


@pytest.mark.parametrize("url", ["not a url", "mysqlx://u:pw@db:3306/x"])
def test_a_database_url_that_is_not_one_is_exit_2(url):
    done = run("rivet_stats", url=url)
    assert done.returncode == 2
    line = one_line(done)
    assert "is not one rivet can use" in line
    assert "expected postgres://USER[:PASSWORD]@HOST[:PORT]/NAME or sqlite:///PATH" in line
    assert "pw" not in line


def test_traceback_flag_shows_the_chain():
    done = run("rivet_stats", "--traceback", url=f"postgres://postgres@127.0.0.1:{free_port()}/x")
    assert done.returncode == 1
    assert "Traceback" in done.stderr.decode()


# -- logs ----------------------------------------------------------------------------------


def test_json_logs_are_json_on_every_line():
    manage("rivet_enqueue", "--kind", "noop", env=child_environ(postgres_url()))
    done = run(
        "rivet_worker",
        "--once",
        "--log-format",
        "json",
        "--pool-size",
        "2",
        "--concurrency",
        "4",
        url=postgres_url(),
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.decode().splitlines()]
    assert all(isinstance(line.get("event"), str) and line["event"] for line in lines)
    events = [line["event"] for line in lines]
    assert {"worker_started", "pool_undersized", "claimed", "acked", "worker_stopped"} <= set(
        events
    )


# -- the effect service --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "code", "expected"),
    [
        ("postgres://postgres:secret@127.0.0.1:{port}/x", 1, "no server answers at postgres://"),
        ("not a url", 2, "is not one rivet can use"),
    ],
    ids=["no-server", "not-a-url"],
)
def test_the_effect_service_on_a_bad_database_is_one_line(url, code, expected):
    env = {**os.environ, "EFFECT_DATABASE_URL": url.format(port=free_port())}
    env["RIVET_READ_DOTENV"] = "0"
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = [sys.executable, "-m", "effect_project", "serve", "--bind", f"127.0.0.1:{free_port()}"]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == code
    line = one_line(done)
    assert expected in line
    assert "EFFECT_DATABASE_URL" in line
    assert "secret" not in line


# -- the host project's admin under runserver -----------------------------------------------


@pytest.mark.parametrize(("debug", "css_status"), [(None, 200), ("0", 404)], ids=["default", "off"])
def test_runserver_serves_the_host_admin_styled_unless_debug_is_turned_off(debug, css_status):
    import re
    import time
    import urllib.error
    import urllib.request

    port = free_port()
    env = child_environ(postgres_url())
    env.pop("DJANGO_DEBUG", None)
    if debug is not None:
        env["DJANGO_DEBUG"] = debug
    argv = [sys.executable, str(MANAGE), "runserver", f"127.0.0.1:{port}", "--noreload"]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str) -> tuple[int, str, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
                return answer.status, answer.headers["Content-Type"], answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers["Content-Type"], error.read()

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _, page = get("/admin/login/")
                break
            except OSError:
                assert server.poll() is None, "runserver exited"
                assert time.monotonic() < deadline, "runserver did not answer within 60 s"
                time.sleep(0.3)
        assert status == 200
        sheets = re.findall(r'<link rel="stylesheet"[^>]*href="([^"]+)"', page.decode())
        assert sheets
        for sheet in sheets:
            status, content_type, _ = get(sheet)
            assert status == css_status, sheet
            if css_status == 200:
                assert content_type.startswith("text/css")
    finally:
        server.terminate()
        server.wait(timeout=30)
