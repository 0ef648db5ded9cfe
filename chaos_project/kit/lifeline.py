"""Children that die with the process that started them, however it dies.

The harness stops workers on purpose (SIGSTOP) and a stopped worker may hold a lock. If the
harness itself dies (an exception, SIGTERM, SIGKILL, a test's timeout) its children must not
live on with parent 1: a stopped one would hold its lock until its connection dies, and every
session that wants the row waits. Each child asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``); SIGKILL reaches a stopped process too. The kernel sends it when the
*thread* that forked the child ends, so children are started from the main thread only
(``require_main_thread``): a helper thread that exits would take its children with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent: int | None = None) -> None:
    """In a child just forked: SIGKILL when the parent dies. ``parent``: its pid, to catch a
    parent that died before the request was made (then the child exits at once)."""
    if _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent is not None and os.getppid() != parent:
        os._exit(70)


def require_main_thread(what: str) -> None:
    """Refuse to start a child that would die when a helper thread ends (see the module doc)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            f"{what} must be started from the main thread: its parent-death signal follows "
            f"the thread that forks it, and {threading.current_thread().name!r} ends before it"
        )


def preexec(parent: int, *then: object) -> object:
    """A ``preexec_fn`` for Popen: die with ``parent``, then run each callable of ``then``."""

    def run() -> None:
        die_with_parent(parent)
        for step in then:
            step()  # type: ignore[operator]

    return run
