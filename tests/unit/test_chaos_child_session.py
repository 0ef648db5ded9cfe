"""A process the chaos harness starts lives in a session of its own.

The harness pauses workers with SIGSTOP on purpose. A stopped process in a process group that
becomes orphaned gets SIGHUP and SIGCONT from the kernel: that is what happened to paused
workers when the harness's own parent (a shell started with nohup) exited mid-run. Here a
middle process, in a process group of its own inside this session (as a shell's job is), starts
a sleeper through the harness's ``Child``, stops it and exits: the sleeper must stay stopped.
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
print(child.pid, os.getsid(child.pid), os.getpgid(child.pid), flush=True)
"""


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_stopped_child_stays_stopped_when_the_harness_parent_goes(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(REPO)}
    middle = subprocess.run(
        [sys.executable, "-c", MIDDLE, str(tmp_path / "child.log")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        process_group=0,  # its own group in this session, as a shell runs a job
    )
    assert middle.returncode == 0, middle.stderr
    pid, sid, pgid = (int(x) for x in middle.stdout.split())
    try:
        assert sid == pid and pgid == pid, "the child leads a session of its own"
        time.sleep(0.5)  # the kernel's SIGHUP + SIGCONT, if any, have arrived by now
        assert _state(pid) == "T", f"the stopped child is {_state(pid) or 'gone'}, not stopped"
    finally:
        if _state(pid) is not None:
            os.kill(pid, signal.SIGKILL)
