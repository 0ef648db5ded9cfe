"""Child processes the demo and the harness start: the effect service and workers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from rivet.effect_client import EffectUnavailable, fetch_verify

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


class EffectService:
    """The effect service as a real gunicorn process, started and stopped by its owner."""

    def __init__(self, *, database_url: str, port: int, workers: int = 1, threads: int = 4):
        self.url = f"http://127.0.0.1:{port}"
        self._argv = [
            sys.executable,
            "-m",
            "effect_project",
            "serve",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
        ]
        self._env = child_env(EFFECT_DATABASE_URL=database_url)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> EffectService:
        self.process = subprocess.Popen(
            self._argv,
            env=self._env,
            cwd=settings.BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace")[-2000:]
                raise RuntimeError(
                    f"the effect service exited with {self.process.returncode}: {err}"
                )
            try:
                fetch_verify(self.url, timeout=1.0)
                return self
            except EffectUnavailable:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the effect service did not answer at {self.url} within {timeout}s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

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
