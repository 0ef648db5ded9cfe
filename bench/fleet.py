"""Worker processes for the bench and the scale study: ``rivet_worker`` children under names of
their own, each logging to a file, and the waits for them to start.

Both runners start their workers here, so a change to how a measured worker is started (its
command line, its owner name, its log) reaches every figure at once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from chaos_project.kit.pidfd import Child
from chaos_project.kit.services import MANAGE_PY


def start_workers(
    name: str, count: int, worker_args: Sequence[str], env: Mapping[str, str], log_dir: Path
) -> list[Child]:
    """``count`` workers, owners ``<name>-0`` .. ``<name>-<count-1>``, logs beside them."""
    argv = [sys.executable, str(MANAGE_PY), "rivet_worker", *worker_args]
    return [
        Child(
            [*argv, "--owner", f"{name}-{n}"], env=dict(env), log_path=log_dir / f"{name}-{n}.log"
        )
        for n in range(count)
    ]


def check_alive(workers: Sequence[Child], error: type[Exception], what: str = "a worker") -> None:
    """Raise ``error`` with the log's tail when one of ``workers`` has exited."""
    for worker in workers:
        if worker.poll() is not None:
            raise error(f"{what} exited ({worker.returncode}):\n{worker.log_tail()}")


def wait_ready(
    workers: Sequence[Child],
    timeout: float,
    error: type[Exception],
    what: str = "a worker",
    poll: float = 0.1,
) -> None:
    """Until every worker logged worker_started (a measurement must not wait for start-up)."""
    deadline = time.monotonic() + timeout
    while not all('"worker_started"' in w.log_tail(1_000_000) for w in workers):
        check_alive(workers, error, what)
        if time.monotonic() > deadline:
            raise error(f"the workers did not start within {timeout:g} s")
        time.sleep(poll)
