"""PgBouncer in front of the test server: session fixtures, one bouncer per pooling mode.

``pgbouncer_transaction`` and ``pgbouncer_session`` each start Debian's ``pgbouncer``
(scripts/find_pgbouncer.py finds it; ``make test`` installs it) on a free port, with its
config in a temporary folder, in front of the server ``DATABASES['default']`` names, and stop
it at the end of the run. Without pgbouncer the tests that ask for one fail with how to get it;
none is skipped. ``through(bouncer)`` points the 'default' alias at a bouncer for a while, so
the real code (the store, Django's connections, every thread's) goes through it.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from tests.tools import required_tool

START_TIMEOUT_SECS = 10.0
#: Server connections per (database, user) pair in transaction pooling: few, so a test sees
#: every one of them. In session pooling each client holds one for its whole session: a worker
#: (its pool and its LISTEN connection) and a producer beside it need more.
POOL_SIZE = 2
SESSION_POOL_SIZE = 10


@dataclass(frozen=True)
class Bouncer:
    mode: str
    host: str
    port: int
    user: str

    def url(self, dbname: str) -> str:
        """A DATABASE_URL through this bouncer; a transaction pooler says so to Django."""
        flag = "?disable_server_side_cursors=True" if self.mode == "transaction" else ""
        return f"postgres://{self.user}@{self.host}:{self.port}/{dbname}{flag}"

    def connect(self, dbname: str, **kwargs) -> psycopg.Connection:
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname=dbname, **kwargs
        )


def find_pgbouncer() -> str:
    return required_tool("pgbouncer")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(mode: str, port: int, folder: Path, user: str) -> Path:
    db = settings.DATABASES["default"]
    server = [f"host={db.get('HOST') or '127.0.0.1'}", f"port={db.get('PORT') or 5432}"]
    server.append(f"user={db.get('USER') or user}")
    if db.get("PASSWORD"):
        server.append(f"password={db['PASSWORD']}")
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    path = folder / "pgbouncer.ini"
    path.write_text(
        "[databases]\n"
        f"* = {' '.join(server)}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {mode}\n"
        f"default_pool_size = {POOL_SIZE if mode == 'transaction' else SESSION_POOL_SIZE}\n"
        "max_client_conn = 200\n"
        # psycopg sends none it does not need; Django's connection may
        "ignore_startup_parameters = extra_float_digits,options\n"
        "server_reset_query = DISCARD ALL\n"
        f"admin_users = {user}\n"
    )
    return path


@contextmanager
def running_bouncer(mode: str) -> Iterator[Bouncer]:
    binary = find_pgbouncer()
    folder = Path(tempfile.mkdtemp(prefix=f"rivet-pgbouncer-{mode}-"))
    folder.chmod(0o755)
    user = settings.DATABASES["default"].get("USER") or getpass.getuser()
    port = free_port()
    config = _config(mode, port, folder, user)
    command = [binary, str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        command[1:1] = ["-u", "postgres" if _user_exists("postgres") else "nobody"]
    log = (folder / "pgbouncer.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    bouncer = Bouncer(mode=mode, host="127.0.0.1", port=port, user=user)
    backends: list[int] = []
    try:
        _wait_ready(bouncer, process, folder)
        yield bouncer
    finally:
        backends = _server_pids(bouncer)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
        _wait_gone(backends)


def _server_pids(bouncer: Bouncer) -> list[int]:
    """The server backends the bouncer holds (its admin console's SHOW SERVERS, remote_pid)."""
    try:
        with bouncer.connect(
            "pgbouncer", autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cursor = conn.execute("SHOW SERVERS")
            column = [c.name for c in cursor.description].index("remote_pid")
            return [row[column] for row in cursor.fetchall()]
    except psycopg.Error:
        return []


def _wait_gone(pids: list[int]) -> None:
    """Wait until the bouncer's server backends have exited: the test databases are dropped
    after the bouncer stops, and DROP DATABASE refuses while a session is on it."""
    if not pids:
        return
    db = settings.DATABASES["default"]
    params = {
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
    }
    params = {key: value for key, value in params.items() if value}
    deadline = time.monotonic() + START_TIMEOUT_SECS
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        while time.monotonic() < deadline:
            (left,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
            ).fetchone()
            if not left:
                return
            time.sleep(0.05)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _wait_ready(bouncer: Bouncer, process: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECS
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with bouncer.connect("postgres", connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            last = exc
            time.sleep(0.1)
    output = (folder / "pgbouncer.log").read_text(errors="replace")
    pytest.fail(
        f"pgbouncer ({bouncer.mode} pooling, port {bouncer.port}) did not answer within "
        f"{START_TIMEOUT_SECS}s (exit code {process.poll()}; last error: {last}):\n{output}",
        pytrace=False,
    )


# Both ask for django_db_setup: a bouncer stops (and its server connections end) before the test
# databases are dropped.
@pytest.fixture(scope="session")
def pgbouncer_transaction(django_db_setup) -> Iterator[Bouncer]:
    """PgBouncer in transaction pooling in front of the test server."""
    with running_bouncer("transaction") as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_session(django_db_setup) -> Iterator[Bouncer]:
    """PgBouncer in session pooling in front of the test server."""
    with running_bouncer("session") as bouncer:
        yield bouncer


@contextmanager
def through(bouncer: Bouncer, alias: str = "default", flag: bool = True) -> Iterator[None]:
    """Point ``alias`` at ``bouncer`` (every thread's connection: they share its settings).

    In transaction pooling the alias also gets DISABLE_SERVER_SIDE_CURSORS, Django's own switch
    for a transaction pooler, which rivet reads too (unless ``flag`` is False: an alias that
    does not say so).
    """
    db = connections[alias].settings_dict
    keys = ("HOST", "PORT", "DISABLE_SERVER_SIDE_CURSORS")
    saved = {key: db.get(key) for key in keys}
    connections[alias].close()
    db.update(
        HOST=bouncer.host,
        PORT=str(bouncer.port),
        DISABLE_SERVER_SIDE_CURSORS=flag and bouncer.mode == "transaction",
    )
    try:
        yield
    finally:
        connections[alias].close()
        db.update(saved)
