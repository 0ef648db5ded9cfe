"""A worker stalled inside its scheduler pass (``--faults scheduler-stall``) cannot stop its
schedules for longer than the idle bound, and a harness that dies leaves no process behind.

The stall holds (T2, each stalled schedule fires again within the bound while its staller is
still stopped) with the real workers, and fails when the workers put no bound on their
transactions (tests/broken_chaos.py ``unbounded``). A harness killed with SIGKILL in the middle
of its chaos takes its forked workers, stopped ones included, and its effect service with it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.acceptance.conftest import wait_for
from tests.hangguard import descendants
from tests.processes import MANAGE, broken_chaos, child_environ, postgres_url, run_tree

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "300", "--workers", "3", "--duration-secs", "15", "--schedules", "8")
RUN += ("--faults", "scheduler-stall", "--drain-timeout-secs", "30", "--own-effect-service")


def test_a_stalled_scheduler_pass_releases_its_schedules_within_the_bound(
    effect_database_url, tmp_path
):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    summary_path = tmp_path / "run.json"
    done = run_tree(
        [sys.executable, str(MANAGE), "rivet_chaos", "run", *RUN, "--seed", "11",
         "--json", str(summary_path)],
        env=env,
        timeout=240,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "every invariant held: S1, S2, L1, F2, C1, H1, H2, H3, H4, H5, D1, T1, T2" in output
    stall = json.loads(summary_path.read_text())["scheduler_stall"]
    assert stall["stalls"] >= 1 and stall["schedules_stalled"] >= 1, stall
    assert stall["longest_refire_secs"] <= stall["allowed_secs"], stall
    assert "scheduler stalls" in output


def test_workers_without_the_idle_bound_fail_the_stall(effect_database_url):
    done = broken_chaos(
        "unbounded", "run", *RUN, "--seed", "12", effect_database_url=effect_database_url
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "T2 FAILED" in output
    assert "stalled in its scheduler pass" in output
    assert re.search(r"tick-\d+ (fired again after|did not fire again)", output), output


def test_a_harness_killed_with_sigkill_leaves_no_process_behind(effect_database_url, tmp_path):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    log = tmp_path / "harness.log"
    with log.open("wb") as out:
        harness = subprocess.Popen(
            [sys.executable, str(MANAGE), "rivet_chaos", "run", "--tasks", "3000",
             "--workers", "3", "--duration-secs", "120", "--seed", "13",
             "--own-effect-service"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        # Its workers and its effect service run, and a zombie is stopped (SIGSTOP): the case
        # that held a lock and hung the suite.
        tree = wait_for(
            lambda: _with_a_stopped_worker(harness.pid), "a stopped worker of the harness", 90
        )
    except AssertionError:
        harness.kill()
        raise AssertionError(log.read_text(errors="replace")) from None
    assert any("effect_project" in cmd for cmd in tree.values()), tree
    assert sum("rivet_chaos" in cmd for cmd in tree.values()) >= 3, tree  # forked workers
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    wait_for(lambda: not any(_alive(pid) for pid in tree), "every process it started to end", 10)


def _with_a_stopped_worker(root: int) -> dict[int, str] | None:
    tree = descendants(root)
    return tree if any(_state(pid) in ("T", "t") for pid in tree) and len(tree) >= 4 else None


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _alive(pid: int) -> bool:
    return _state(pid) not in ("gone", "Z", "X")
