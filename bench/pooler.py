"""PgBouncer in front of a PostgreSQL server: the scale study's pooler, and the test suite's.

Debian's ``pgbouncer`` (scripts/find_pgbouncer.py installs it for ``make test``) on a free port,
its configuration in a temporary folder: ``server_pool`` server connections per database and
user, shared by every client, in transaction pooling unless told otherwise. A worker behind a
transaction pooler is told so with Django's ``DISABLE_SERVER_SIDE_CURSORS`` (the URL's
``disable_server_side_cursors=True``, docs/pgbouncer.md). The bouncer is the one thing here
that writes a PgBouncer configuration: tests/pgbouncer.py starts its bouncers through it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from chaos_project.kit.services import free_port
from rivet.errors import RivetError

START_TIMEOUT_SECS = 10.0
#: The pooling modes a bouncer runs in (PgBouncer's ``pool_mode``; statement pooling breaks
#: transactions, which rivet needs).
POOL_MODES = ("transaction", "session")


class PoolerError(RivetError):
    """PgBouncer could not be found or started."""


@dataclass(frozen=True, kw_only=True)
class Pooler:
    port: int
    pid: int
    server_pool: int
    user: str = "postgres"
    pool_mode: str = "transaction"

    def server_pids(self) -> list[int]:
        """The server backends the bouncer holds now (its admin console's SHOW SERVERS);
        raises psycopg.Error when the console does not answer."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            dbname="pgbouncer",
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,  # the console speaks the simple protocol only
        ) as conn:
            cursor = conn.execute("SHOW SERVERS")
            column = [c.name for c in cursor.description or ()].index("remote_pid")
            return [row[column] for row in cursor.fetchall()]

    def url(self, direct_url: str) -> str:
        """``direct_url`` pointed at this bouncer; a transaction pooler says so to Django."""
        parts = urllib.parse.urlsplit(direct_url)
        user, at, _ = parts.netloc.rpartition("@")
        netloc = f"{user}{at}127.0.0.1:{self.port}"
        query = dict(urllib.parse.parse_qsl(parts.query))
        if self.pool_mode == "transaction":
            query["disable_server_side_cursors"] = "True"
        return urllib.parse.urlunsplit(
            parts._replace(netloc=netloc, query=urllib.parse.urlencode(query))
        )


def find_pgbouncer() -> str:
    for path in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if path and os.access(path, os.X_OK):
            return path
    raise PoolerError(
        "the scale study's PgBouncer mode needs pgbouncer: apt-get install pgbouncer "
        "(scripts/find_pgbouncer.py), or leave pgbouncer out of --modes"
    )


def _config(
    folder: Path, *, port: int, server: dict[str, str], server_pool: int, pool_mode: str
) -> Path:
    user = server["user"]
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    target = " ".join(f"{key}={value}" for key, value in server.items() if value)
    path = folder / "pgbouncer.ini"
    path.write_text(
        "[databases]\n"
        f"* = {target}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {server_pool}\n"
        "max_client_conn = 2000\n"
        # psycopg sends none it does not need; Django's connection may
        "ignore_startup_parameters = extra_float_digits,options\n"
        "server_reset_query = DISCARD ALL\n"
        f"admin_users = {user}\n"
    )
    return path


@contextlib.contextmanager
def running_pooler(
    *,
    server: dict[str, str],
    server_pool: int,
    pool_mode: str = "transaction",
    binary: str | None = None,
) -> Iterator[Pooler]:
    """PgBouncer in front of ``server`` (libpq keys host, port, user, password), ``binary`` or
    the one on this machine. On the way out it stops, and waits until the server backends it
    held have exited: a database it served can be dropped at once (DROP DATABASE refuses while
    a session is on it)."""
    if pool_mode not in POOL_MODES:
        raise PoolerError(f"pool_mode {pool_mode!r}: expected one of {', '.join(POOL_MODES)}")
    folder = Path(tempfile.mkdtemp(prefix=f"rivet-pgbouncer-{pool_mode}-"))
    folder.chmod(0o755)
    port = free_port()
    config = _config(folder, port=port, server=server, server_pool=server_pool, pool_mode=pool_mode)
    command = [binary or find_pgbouncer(), str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        command[1:1] = ["-u", _unprivileged_user()]
    with open(folder / "pgbouncer.log", "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    pooler = Pooler(
        port=port,
        pid=process.pid,
        server_pool=server_pool,
        user=server["user"],
        pool_mode=pool_mode,
    )
    backends: list[int] = []
    try:
        _wait_ready(port, server["user"], process, folder)
        yield pooler
    finally:
        with contextlib.suppress(psycopg.Error):
            backends = pooler.server_pids()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
        _wait_gone(server, backends)


def _wait_gone(server: dict[str, str], pids: list[int]) -> None:
    """Until the backends ``pids`` on ``server`` have exited (at most START_TIMEOUT_SECS)."""
    if not pids:
        return
    params = {key: value for key, value in server.items() if value}
    deadline = time.monotonic() + START_TIMEOUT_SECS
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
            ).fetchone()
            if not row or not row[0]:
                return
            time.sleep(0.05)


def _unprivileged_user() -> str:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "nobody"
    return "postgres"


def _wait_ready(port: int, user: str, process: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECS
    last: Exception | None = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with psycopg.connect(
                host="127.0.0.1", port=port, user=user, dbname="postgres", connect_timeout=2
            ) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            last = exc
            time.sleep(0.1)
    output = (folder / "pgbouncer.log").read_text(errors="replace")
    raise PoolerError(
        f"pgbouncer on port {port} did not answer within {START_TIMEOUT_SECS:g} s "
        f"(exit code {process.poll()}; last error: {last}):\n{output}"
    )
