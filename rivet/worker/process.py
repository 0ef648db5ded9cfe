"""The worker as a process: its default owner name and its shutdown signals."""

from __future__ import annotations

import logging
import os
import signal
import socket
from typing import Any

from rivet import logs


def default_owner() -> str:
    """hostname:pid, the lease_owner a worker writes unless --owner names one."""
    return f"{socket.gethostname()}:{os.getpid()}"


def install_signal_handlers(worker: Any) -> None:
    """SIGTERM/SIGINT stop the worker gracefully; a second one exits at once (os._exit)."""

    def on_signal(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if worker.stopping:
            logs.event("worker_exit_now", logging.WARNING, owner=worker.owner, signal=name)
            logging.shutdown()
            os._exit(128 + signum)
        logs.event("worker_signal", owner=worker.owner, signal=name)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
