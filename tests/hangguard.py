"""No test hangs the suite, and no process a test started outlives it.

Three parts, for every test of the suite (and so for every matrix cell):

- **The suite is a subreaper** (``PR_SET_CHILD_SUBREAPER``): a process whose parent died (a
  worker forked by a chaos harness the test killed) comes back to pytest instead of to init,
  so the suite can still find it and end it.
- **Each test leaves no process behind.** Processes that appeared while a test ran and are still
  there after it (those a fixture wider than the test started, and their children, are the
  fixture's: not counted) get a short grace
  to exit, then SIGKILL (a stopped one too); the run's summary names each, with the test.
- **Each test has a time limit** (``HANG_LIMIT_SECS``; ``long`` and ``topology`` tests
  ``LONG_HANG_LIMIT_SECS``; ``@pytest.mark.timeout(SECS)`` to set one). When it runs out, the
  stack of every thread is written to stderr, every process the test started is killed
  (whatever it held, such as a row lock a stopped worker kept, is freed), and the test fails
  with ``HangTimeout``; the suite goes on. A test still stuck ``LAST_GRACE_SECS`` later (a call
  that never returns to Python; ``RIVET_HANG_LAST_GRACE_SECS``, default 60) ends the whole run
  with exit code 3 instead of hanging it.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

HANG_LIMIT_SECS = 300.0
LONG_HANG_LIMIT_SECS = 900.0
LAST_GRACE_SECS = float(os.environ.get("RIVET_HANG_LAST_GRACE_SECS", "60"))
LEAK_GRACE_SECS = 3.0
PR_SET_CHILD_SUBREAPER = 36
EXIT_HUNG = 3


class HangTimeout(Exception):
    """A test ran past its time limit; the stacks of every thread are on stderr above."""


def descendants(root: int | None = None, *, skip: frozenset[int] = frozenset()) -> dict[int, str]:
    """{pid: command line} of every live process below ``root`` (this one by default), leaving
    out ``skip`` and everything below them."""
    found: dict[int, str] = {}
    stack = [os.getpid() if root is None else root]
    while stack:
        for pid in _children(stack.pop()):
            if pid not in found and pid not in skip and _alive(pid):
                found[pid] = command_line(pid)
                stack.append(pid)
    return found


#: Processes a fixture wider than one test started (a PgBouncer, a second cluster): they and
#: their children (a server's backends) belong to that fixture, not to the test that first
#: asked for it, and live until the fixture is finalized.
FIXTURE_PROCESSES: dict[int, set[int]] = {}


def _protected() -> frozenset[int]:
    return frozenset(pid for pids in FIXTURE_PROCESSES.values() for pid in pids)


def _test_processes() -> dict[int, str]:
    return descendants(skip=_protected())


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest):
    if fixturedef.scope == "function":
        yield
        return
    before = set(_test_processes())
    yield
    started = set(_test_processes()) - before
    if started:
        FIXTURE_PROCESSES.setdefault(id(fixturedef), set()).update(started)


def pytest_fixture_post_finalizer(fixturedef: Any, request: pytest.FixtureRequest) -> None:
    FIXTURE_PROCESSES.pop(id(fixturedef), None)


def _children(pid: int) -> list[int]:
    """The children of ``pid``, from each of its threads' ``children`` file."""
    pids: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as listing:
                pids += [int(child) for child in listing.read().split()]
        except OSError:
            continue
    return pids


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as raw:
            return raw.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def end_processes(pids: Iterator[int] | list[int], grace: float) -> None:
    """Wait up to ``grace`` seconds for ``pids`` to exit, then SIGKILL the rest; reap them."""
    pids = list(pids)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        _reap(pids)
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        _reap(pids)
        time.sleep(0.02)
    _reap(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _reap(pids: list[int]) -> None:
    """Collect the exit status of those that are (now) this process's children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def limit_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        return float(marker.args[0])
    if item.get_closest_marker("long") or item.get_closest_marker("topology"):
        return LONG_HANG_LIMIT_SECS
    return HANG_LIMIT_SECS


class Watchdog:
    """One test's time limit, kept by a thread: see the module's text."""

    def __init__(self, item: pytest.Item, limit: float, before: set[int]) -> None:
        self.item = item
        self.limit = limit
        self.before = before
        self.fired = False
        self._done = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._watch, name="hangguard", daemon=True)

    def __enter__(self) -> Watchdog:
        _alarm["armed"] = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        _alarm["armed"] = False  # an alarm that comes late must not escape the test's phases
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        if self._done.wait(self.limit):
            return
        self.fired = True
        out = sys.__stderr__
        out.write(
            f"\n\n=== hangguard: {self.item.nodeid} ran past its {self.limit:g} s limit; "
            "the stack of every thread follows ===\n"
        )
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        self.item.stash[FIRED] = self.limit
        signal.pthread_kill(self._main, signal.SIGALRM)  # HangTimeout in the test's thread
        started = {pid: cmd for pid, cmd in _test_processes().items() if pid not in self.before}
        for pid, cmd in started.items():
            out.write(f"=== hangguard: killing pid {pid}: {cmd}\n")
        out.flush()
        end_processes(list(started), grace=0)  # frees what it held (a row lock, say)
        if self._done.wait(LAST_GRACE_SECS):
            return
        capture = self.item.config.pluginmanager.getplugin("capturemanager")
        with contextlib.suppress(Exception):  # the run ends: let the dump reach the terminal
            capture.suspend_global_capture(in_=True)
        out.write(
            f"=== hangguard: {self.item.nodeid} is still stuck {LAST_GRACE_SECS:g} s after "
            "its limit; ending the run\n"
        )
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
        end_processes(list(descendants()), grace=0)
        os._exit(EXIT_HUNG)


_alarm = {"armed": False}
FIRED = pytest.StashKey[float]()


def _on_alarm(signum: int, frame: object) -> None:
    if _alarm["armed"]:
        _alarm["armed"] = False
        raise HangTimeout("the test ran past its time limit (hangguard); stacks are on stderr")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A phase that ended on its own after the limit ran out still fails (once)."""
    outcome = yield
    report = outcome.get_result()
    limit = item.stash.get(FIRED, None)
    if limit is not None and report.passed:
        del item.stash[FIRED]
        report.outcome = "failed"
        report.longrepr = (
            f"HangTimeout: ran past its {limit:g} s limit (hangguard; stacks on stderr)"
        )
    elif limit is not None and report.failed:
        del item.stash[FIRED]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "timeout(secs): this test's time limit (tests/hangguard.py), in seconds"
    )
    _become_subreaper()
    signal.signal(signal.SIGALRM, _on_alarm)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    before = set(_test_processes())
    with Watchdog(item, limit_of(item), before):
        yield


@pytest.fixture(autouse=True)
def _no_process_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, end the processes it started and left running (see the module doc)."""
    before = set(_test_processes())
    yield
    left = {pid: cmd for pid, cmd in _test_processes().items() if pid not in before}
    if not left:
        return
    end_processes(list(left), grace=LEAK_GRACE_SECS)
    LEFT_BEHIND.extend((request.node.nodeid, pid, cmd) for pid, cmd in left.items())


#: (test, pid, command line) of each process a test left running, for the run's summary.
LEFT_BEHIND: list[tuple[str, int, str]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LEFT_BEHIND:
        return
    terminalreporter.section("hangguard: processes tests left running (ended)")
    for nodeid, pid, cmd in LEFT_BEHIND:
        terminalreporter.line(f"a process the test left running was ended: {nodeid}: {pid} {cmd}")
