"""The child processes of the demo, the chaos harness and the bench: effect service, workers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import psycopg
from django.conf import settings
from django.db import connections

from chaos_project.kit.lifeline import preexec, require_main_thread
from chaos_project.kit.pidfd import open_children
from effect_project.client import EffectUnavailable, fetch_health
from rivet.errors import RivetConfigError

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if nothing listens there, else a port the kernel picks."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``; children never re-read .env over it."""
    env = dict(os.environ)
    env.update(extra)
    env["RIVET_READ_DOTENV"] = "0"
    return env


def database_url(alias: str = "default") -> str:
    """A PostgreSQL URL for the database ``alias`` uses now (under tests: the test database)."""
    db = connections[alias].settings_dict
    user = urllib.parse.quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        user += ":" + urllib.parse.quote(db["PASSWORD"], safe="")
    hosts = host_list(db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432)
    url = f"postgres://{user}@{hosts}/{urllib.parse.quote(db['NAME'], safe='')}"
    query = {}
    # Behind a transaction pooler the alias says so (docs/pgbouncer.md); its children must too.
    if db.get("DISABLE_SERVER_SIDE_CURSORS"):
        query["disable_server_side_cursors"] = "True"
    # With several hosts (a primary and its standbys), which one to keep (docs/failover.md).
    attrs = (db.get("OPTIONS") or {}).get("target_session_attrs")
    if attrs:
        query["target_session_attrs"] = attrs
    return url + ("?" + urllib.parse.urlencode(query) if query else "")


def host_list(host: str, port: str | int) -> str:
    """``HOST`` and ``PORT`` of a DATABASES entry as a URL's ``h1:p1,h2:p2``: libpq's multi-host
    form (comma-separated hosts, and one port for all or one port per host)."""
    hosts = [h.strip() for h in str(host).split(",")]
    ports = [p.strip() for p in str(port).split(",")]
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts):
        raise RivetConfigError(
            f"the database has {len(hosts)} host(s) ({host}) but {len(ports)} ports ({port}): "
            "give one port for all, or one per host"
        )
    return ",".join(f"{h}:{p}" if p else h for h, p in zip(hosts, ports, strict=True))


def worker_env(queue_database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a worker the harness starts: this one, minus inherited RIVET_*.

    A RIVET_FAILPOINT (or RIVET_QUEUE, RIVET_OWNER...) exported in the shell must not reach a
    worker the harness meant to run clean; what a worker needs is passed in ``extra``.
    """
    env = {k: v for k, v in child_env().items() if not k.startswith("RIVET_")}
    env.update(
        DATABASE_URL=queue_database_url,
        DJANGO_SETTINGS_MODULE=settings.SETTINGS_MODULE,
        RIVET_READ_DOTENV="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class EffectService:
    """The effect service as a real ``python -m effect_project serve`` process (waitress)."""

    def __init__(
        self,
        *,
        database_url: str,
        port: int,
        threads: int = 16,
        log_path: Path | None = None,
    ):
        self.url = f"http://127.0.0.1:{port}"
        # Output goes to a file, never a pipe: nobody reads a pipe during a long run, and a
        # full one blocks the server. Without a log_path, a temporary file removed at stop.
        self._own_log = log_path is None
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="rivet-effect-", suffix=".log")[1])
        self._argv = [
            sys.executable,
            "-m",
            "effect_project",
            "serve",
            "--bind",
            f"127.0.0.1:{port}",
            "--threads",
            str(threads),
        ]
        self._env = child_env(EFFECT_DATABASE_URL=database_url)
        self.process: subprocess.Popen | None = None
        self._pidfd: int | None = None

    def start(self, timeout: float = 30.0) -> EffectService:
        self.spawn()
        return self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start the process (from the main thread: see chaos_project.kit.lifeline)."""
        self.process = self._spawn()
        if hasattr(os, "pidfd_open"):
            self._pidfd = os.pidfd_open(self.process.pid)

    def wait_ready(self, timeout: float = 30.0) -> EffectService:
        """Wait until the spawned service answers (any thread may wait); stop it on failure."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self._output()[-2000:]
                self.stop()
                raise RuntimeError(
                    f"the effect service exited with {self.process.returncode}: {err}"
                )
            try:
                fetch_health(self.url, timeout=1.0)
                return self
            except EffectUnavailable as exc:
                last = str(exc)
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"the effect service did not answer GET {self.url}/health within {timeout}s "
            f"(last: {last})"
        )

    def _spawn(self) -> subprocess.Popen:
        require_main_thread("the effect service")
        options = {"env": self._env, "cwd": settings.BASE_DIR, "stdin": subprocess.DEVNULL}
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                self._argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec(os.getpid()),  # it dies with whoever started it
                **options,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self._send(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._send(signal.SIGKILL)
                self.process.wait()
        self._close_pidfd()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def kill(self) -> int | None:
        """SIGKILL the whole service at once, master and worker processes, through pidfds.

        No graceful shutdown: requests in flight die in the middle, as when a machine or a
        container is killed. The workers are opened as pidfds while they are still the
        master's children, then the master is killed first (so it cannot start new ones).
        ``start`` may be called again afterwards. The master's exit status.
        """
        if self.process is None or self.process.poll() is not None or self._pidfd is None:
            return self.process.returncode if self.process is not None else None
        workers = open_children(self.process.pid)
        try:
            self._send(signal.SIGKILL)
            for fd in workers:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            for fd in workers:
                os.close(fd)
        code = self.process.wait()
        self._close_pidfd()
        return code

    def _send(self, sig: signal.Signals) -> None:
        """Through the pidfd where the platform has one, so a reaped pid is never signalled."""
        if self._pidfd is None:
            self.process.send_signal(sig)
            return
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            pass

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> EffectService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_worker(
    *args: str, env: dict[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess:
    """``manage.py rivet_worker ARGS`` to completion; its output is captured."""
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), "rivet_worker", *args],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def effect_connection(url: str) -> psycopg.Connection:
    """An autocommit psycopg connection to the effect database (PostgreSQL only)."""
    if not url.startswith(("postgres://", "postgresql://")):
        raise RivetConfigError(
            f"the verifier reads the effect database with psycopg and needs a PostgreSQL URL, "
            f"got EFFECT_DATABASE_URL={url!r}; set it to postgres://USER@HOST:PORT/NAME"
        )
    return psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=10)


#: Query parameters of a database URL that are Django's (django-environ moves them into the
#: DATABASES entry), not libpq's: psycopg refuses them.
DJANGO_URL_OPTIONS = frozenset(
    {
        "conn_max_age",
        "atomic_requests",
        "autocommit",
        "disable_server_side_cursors",
        "conn_health_checks",
    }
)


def libpq_url(url: str) -> str:
    """``url`` without Django's query parameters (``?disable_server_side_cursors=True``)."""
    parts = urllib.parse.urlsplit(url)
    kept = [
        (key, value)
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() not in DJANGO_URL_OPTIONS
    ]
    return parts._replace(query=urllib.parse.urlencode(kept)).geturl()
