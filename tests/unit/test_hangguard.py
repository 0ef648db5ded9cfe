"""The suite's hang guard (tests/hangguard.py), tried on a small suite of its own in a real
pytest run: a test that hangs on a stopped process fails with every thread's stack and the
suite goes on; a process a test leaves behind is ended; a test stuck where no signal reaches
it ends the run with exit code 3 instead of hanging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import os, signal, subprocess, sys, time
from pathlib import Path
import pytest

@pytest.mark.timeout(2)
def test_waits_for_a_stopped_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    os.kill(child.pid, signal.SIGSTOP)
    Path(os.environ["PIDS"]).write_text(str(child.pid))
    child.wait()

def test_leaves_a_process_behind():
    child = subprocess.Popen(["sleep", "120"])
    Path(os.environ["PIDS"] + ".leak").write_text(str(child.pid))
    child.returncode = 0  # pretend it was waited for: no ResourceWarning

def test_runs_after_them():
    assert True
"""

STUCK = """
import pytest, signal, time

@pytest.mark.timeout(1)
def test_ignores_every_signal():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # nothing can interrupt it
    time.sleep(30)
"""


def run_suite(tmp_path: Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "test_suite.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.hangguard", "-q", "-p", "no:cacheprovider",
         "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_suite.py")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_hang_fails_with_its_stacks_and_the_suite_goes_on(tmp_path):
    pids = tmp_path / "pids"
    started = time.monotonic()
    done = run_suite(tmp_path, SUITE, {"PIDS": str(pids)})
    output = done.stdout + done.stderr
    assert time.monotonic() - started < 60, output
    assert done.returncode == 1, output
    assert "1 failed, 2 passed" in output
    assert "HangTimeout" in output
    assert "ran past its 2 s limit; the stack of every thread follows" in output
    assert "test_waits_for_a_stopped_child" in output and "child.wait()" in output
    assert gone(int(pids.read_text()))  # the stopped child was killed, not left behind
    assert "a process the test left running was ended" in output
    assert gone(int(Path(f"{pids}.leak").read_text()))


def test_a_test_nothing_can_interrupt_ends_the_run_instead_of_hanging_it(tmp_path, monkeypatch):
    import tests.hangguard as hangguard

    started = time.monotonic()
    done = run_suite(tmp_path, STUCK, {"RIVET_HANG_LAST_GRACE_SECS": "2"})
    output = done.stdout + done.stderr
    assert time.monotonic() - started < 25, output
    assert done.returncode == hangguard.EXIT_HUNG, output
    assert "is still stuck 2 s after its limit; ending the run" in output
    assert "test_ignores_every_signal" in output
