"""Child processes signalled only through a pidfd, never through a raw pid.

A pid is not a stable handle: a child can exit on its own (a failpoint abort) between the moment
the harness picks it and the moment it signals it, and Linux reuses pids. A pidfd names one
process; once that process is reaped a signal through it fails with ProcessLookupError instead
of reaching a stranger. The fd is opened right after the spawn, while the child cannot have been
reaped yet (nobody has waited for it), and closed once it is reaped.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from django.conf import settings
from django.db import connections

from chaos_project.kit.lifeline import die_with_parent, preexec, require_main_thread
from rivet.errors import RivetError


class PidfdUnsupported(RivetError):
    """This platform has no pidfd (Linux >= 5.3 and Python >= 3.9 have one)."""


def require_pidfd() -> None:
    """Refuse to start children that could only be signalled through a raw pid."""
    if not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")):
        raise PidfdUnsupported(
            "the chaos harness signals its workers only through a pidfd (os.pidfd_open, "
            "signal.pidfd_send_signal), which this platform lacks; run it on Linux >= 5.3"
        )


#: _own_session: every child runs in a session (and process group) of its own. The harness
#: stops workers with SIGSTOP on purpose (zombies, pauses); a stopped process whose process
#: group becomes orphaned gets SIGHUP and SIGCONT from the kernel, which happens to the
#: harness's own group when its parent (a shell started with nohup, a CI step) exits mid-run:
#: paused workers would resume before the harness means them to. A group of its own, in a
#: session of its own, is never orphaned that way. The harness stops its children itself on
#: every way out (Fleet.stop_all), so a terminal's Ctrl-C need not reach them.


def _no_core_dumps() -> None:
    # A failpoint aborts with SIGABRT; a core file per abort would land in the repository.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Forked:
    """A child forked from this process, with the part of Popen's interface Child uses."""

    def __init__(self, main: Callable[[], int], log_path: Path) -> None:
        require_main_thread("a worker")
        sys.stdout.flush()
        sys.stderr.flush()
        connections.close_all()  # the child must not share this process's database sockets
        self.returncode: int | None = None
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover (runs in the child, which never returns here)
            _run_forked(main, log_path, parent)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


def _run_forked(main: Callable[[], int], log_path: Path, parent: int) -> None:
    """The child's side of a fork: output to ``log_path``, run ``main``, exit with its code."""
    code = 70
    try:
        die_with_parent(parent)  # chaos_project.kit.lifeline
        os.setsid()  # see _own_session
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        _no_core_dumps()
        random.seed()  # not the parent's sequence
        code = main()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Child:
    """One process this harness started; its output goes to ``log_path``.

    Started from ``argv`` (fork and exec), or forked from this process to run ``main`` (no
    interpreter start and no imports: a worker is up in milliseconds, not seconds).
    """

    def __init__(
        self,
        argv: Sequence[str] = (),
        *,
        env: dict[str, str],
        log_path: Path,
        main: Callable[[], int] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        if main is not None:
            self.process = Forked(main, log_path)
        else:
            require_main_thread("a worker")
            with open(log_path, "ab") as log:
                self.process = subprocess.Popen(
                    self.argv,
                    env=env,
                    cwd=settings.BASE_DIR,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=preexec(os.getpid(), _no_core_dumps),
                    start_new_session=True,  # see _own_session
                )
        self._pidfd: int | None = os.pidfd_open(self.process.pid)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def send(self, sig: signal.Signals) -> bool:
        """Signal the child through its pidfd; False (and nothing sent) once it is gone."""
        if self._pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            return False
        return True

    def poll(self) -> int | None:
        """The exit status once the child has exited (it is reaped then), else None."""
        code = self.process.poll()
        if code is not None:
            self._close()
        return code

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit status, or None if it still runs."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close()
        return code

    def stopped(self) -> bool:
        """True while the child is stopped (by SIGSTOP, its own included): /proc says "T"."""
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
        except (OSError, IndexError):
            return False

    def terminate(self) -> bool:
        """SIGCONT (a stopped child cannot act on SIGTERM) then SIGTERM; False if it is gone."""
        self.send(signal.SIGCONT)
        return self.send(signal.SIGTERM)

    def stop(self, timeout: float, *, terminated: bool = False) -> int:
        """SIGTERM (unless ``terminated`` already), then SIGKILL after ``timeout``; reaped."""
        if not terminated:
            self.terminate()
        code = self.wait(timeout)
        if code is None:
            self.send(signal.SIGKILL)
            code = self.wait(30.0)
        return code if code is not None else self.process.wait()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def describe_exit(code: int | None) -> str:
    """``exit 0``, ``SIGKILL``, ``running``: an exit status as a person reads it."""
    if code is None:
        return "running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def open_children(pid: int) -> list[int]:
    """pidfds of the processes whose parent is ``pid`` now (e.g. a server's worker processes).

    Each pid read from /proc is opened, then checked to still have ``pid`` as its parent: a pid
    that was freed and reused between the read and the open names a stranger, and is closed
    unsignalled. The caller closes the fds.
    """
    fds = []
    for child in child_pids(pid):
        try:
            fd = os.pidfd_open(child)
        except OSError:
            continue
        if _parent(child) == pid:
            fds.append(fd)
        else:
            os.close(fd)
    return fds


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (a snapshot: signal them only through a pidfd)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == pid:
            found.append(int(entry.name))
    return found


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None
