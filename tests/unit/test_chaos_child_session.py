"""A process the chaos harness starts lives in a session of its own, and dies with the harness.

The harness pauses workers with SIGSTOP on purpose. A stopped process in a process group that
becomes orphaned gets SIGHUP and SIGCONT from the kernel: that is what happened to paused
workers when the harness's own parent (a shell started with nohup) exited mid-run. Here a shell
stand-in starts the harness stand-in (``MIDDLE``) in its own process group, as a shell runs a
job; the harness starts a sleeper through its ``Child`` and stops it; the shell exits. The
sleeper must stay stopped while the harness lives, and die when the harness is killed
(chaos_project.kit.lifeline): a stopped worker left behind would keep its locks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MIDDLE = """
import os, signal, sys, time
from pathlib import Path
import django
django.setup()
from chaos_project.kit.pidfd import Child
child = Child(
    [sys.executable, "-c", "import time; time.sleep(60)"],
    env=dict(os.environ),
    log_path=Path(sys.argv[1]),
)
os.kill(child.pid, signal.SIGSTOP)
while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.01)
ids = (os.getpid(), child.pid, os.getsid(child.pid), os.getpgid(child.pid))
Path(sys.argv[2]).write_text(" ".join(map(str, ids)))
time.sleep(60)
"""

SHELL = """
import subprocess, sys, time
from pathlib import Path
log = open(sys.argv[2] + ".middle", "wb")  # not the shell's pipes: it outlives the shell
argv = [sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]]
subprocess.Popen(argv, stdout=log, stderr=log)
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
"""


def _state(pid: int) -> str | None:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state == "Z" else state


def test_a_stopped_child_stays_stopped_when_the_harness_parent_goes_and_dies_with_the_harness(
    tmp_path,
):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(REPO)}
    pids = tmp_path / "pids"
    shell = subprocess.run(
        [sys.executable, "-c", SHELL, MIDDLE, str(tmp_path / "child.log"), str(pids)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        process_group=0,  # its own group in this session, as a shell runs a job
    )
    assert shell.returncode == 0, shell.stderr
    harness, pid, sid, pgid = (int(x) for x in pids.read_text().split())
    try:
        assert sid == pid and pgid == pid, "the child leads a session of its own"
        time.sleep(0.5)  # the kernel's SIGHUP + SIGCONT, if any, have arrived by now
        assert _state(pid) == "T", f"the stopped child is {_state(pid) or 'gone'}, not stopped"
        os.kill(harness, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(pid) is None, "the stopped child outlived the harness"
    finally:
        for leftover in (harness, pid):
            if _state(leftover) is not None:
                os.kill(leftover, signal.SIGKILL)
