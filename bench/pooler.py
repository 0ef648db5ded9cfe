"""PgBouncer in transaction pooling in front of the queue database, for the scale study.

Debian's ``pgbouncer`` (scripts/find_pgbouncer.py installs it for ``make test``) on a free port,
its configuration in a temporary folder: ``server_pool`` server connections per database and
user, shared by every client. A worker behind it is told so with Django's
``DISABLE_SERVER_SIDE_CURSORS`` (the URL's ``disable_server_side_cursors=True``, docs/pgbouncer.md).
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


class PoolerError(RivetError):
    """PgBouncer could not be found or started."""


@dataclass(frozen=True, kw_only=True)
class Pooler:
    port: int
    pid: int
    server_pool: int
    user: str = "postgres"

    def server_pids(self) -> list[int]:
        """The server backends the bouncer holds now (its admin console's SHOW SERVERS)."""
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
        """``direct_url`` pointed at this bouncer, saying it is a transaction pooler."""
        parts = urllib.parse.urlsplit(direct_url)
        user, at, _ = parts.netloc.rpartition("@")
        netloc = f"{user}{at}127.0.0.1:{self.port}"
        query = dict(urllib.parse.parse_qsl(parts.query))
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


def _config(folder: Path, *, port: int, server: dict[str, str], server_pool: int) -> Path:
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
        "pool_mode = transaction\n"
        f"default_pool_size = {server_pool}\n"
        "max_client_conn = 2000\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        "server_reset_query = DISCARD ALL\n"
        f"admin_users = {user}\n"
    )
    return path


@contextlib.contextmanager
def running_pooler(*, server: dict[str, str], server_pool: int) -> Iterator[Pooler]:
    """PgBouncer in front of ``server`` (libpq keys host, port, user, password)."""
    folder = Path(tempfile.mkdtemp(prefix="rivet-scale-pgbouncer-"))
    folder.chmod(0o755)
    port = free_port()
    config = _config(folder, port=port, server=server, server_pool=server_pool)
    command = [find_pgbouncer(), str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        command[1:1] = ["-u", _unprivileged_user()]
    with open(folder / "pgbouncer.log", "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        _wait_ready(port, server["user"], process, folder)
        yield Pooler(port=port, pid=process.pid, server_pool=server_pool, user=server["user"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


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
