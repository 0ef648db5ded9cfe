"""Failpoints: where the worker aborts, what that leaves in the store, and RIVET_FAILPOINT parsing.

In-process against a MemoryStore (helpers in worker_kit.py).
"""

from __future__ import annotations

import os

import pytest

from rivet.failpoints import FailpointConfigError, Failpoints, fires, parse, parse_seed
from rivet.jobs import job
from tests.unit.worker_kit import (
    Aborted,
    RecordingAbort,
    enqueue,
    make_worker,
)


@pytest.mark.parametrize("point", ["after_claim", "after_effect_before_ack"])
def test_a_failpoint_before_the_ack_leaves_the_task_pending(store, jobs, point):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    abort = RecordingAbort(raise_it=True)
    worker = make_worker(store, jobs, failpoints=Failpoints({point: 1.0}, abort=abort))
    with pytest.raises(Aborted):
        worker.run()
    worker.guard.close()
    task = store.task_get(task_id)
    assert (task.state, task.attempts, abort.count) == ("pending", 1, 1)


def test_after_ack_fires_once_the_task_is_done(store, jobs):
    job("noop", registry=jobs)(lambda ctx: None)
    task_id = enqueue(store, "noop")
    abort = RecordingAbort(raise_it=True)
    worker = make_worker(store, jobs, failpoints=Failpoints({"after_ack": 1.0}, abort=abort))
    with pytest.raises(Aborted):
        worker.run()
    worker.guard.close()
    assert store.task_get(task_id).state == "done"


def test_before_effect_fires_around_plain_handlers_but_not_ones_that_fire_it_themselves(
    store, jobs
):
    job("plain", registry=jobs)(lambda ctx: None)
    job("effectful", registry=jobs)(fires("before_effect")(lambda ctx: None))
    enqueue(store, "plain")
    enqueue(store, "effectful")
    abort = RecordingAbort(raise_it=False)
    points = Failpoints({"before_effect": 1.0}, abort=abort)
    make_worker(store, jobs, once=True, failpoints=points).run()
    assert abort.count == 1


def test_failpoint_parsing_names_the_variable_and_the_format():
    assert parse("after_claim:0.5, after_ack:1") == {"after_claim": 0.5, "after_ack": 1.0}
    assert parse("") == {}
    for bad in ("after_claim", "nowhere:1.0", "after_ack:2", "after_ack:x"):
        with pytest.raises(FailpointConfigError, match=r"RIVET_FAILPOINT is malformed.*name:"):
            parse(bad)
    with pytest.raises(FailpointConfigError, match="RIVET_FAILPOINT_SEED must be an integer"):
        parse_seed("abc")


def test_a_seed_makes_failpoint_draws_repeatable():
    def draws(seed: int) -> list[bool]:
        points = Failpoints({"after_ack": 0.5}, seed=seed)
        return [points.should_fire("after_ack") for _ in range(40)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_the_action_variable_chooses_abort_or_stop_and_refuses_anything_else():
    from rivet.failpoints import ACTION_VAR, stop_self

    armed = {"RIVET_FAILPOINT": "after_ack:1.0"}
    assert Failpoints.from_env(armed)._abort is os.abort
    assert Failpoints.from_env({**armed, ACTION_VAR: "stop"})._abort is stop_self
    with pytest.raises(FailpointConfigError, match="RIVET_FAILPOINT_ACTION must be one of"):
        Failpoints.from_env({**armed, ACTION_VAR: "pause"})


def test_a_stopping_point_stops_the_process_and_it_goes_on_when_continued():
    import signal
    import subprocess
    import sys
    import time

    code = (
        "from rivet.failpoints import Failpoints\n"
        "points = Failpoints.from_env()\n"
        "points.fire('after_ack')\n"
        "points.fire('after_ack')\n"
        "print('continued', flush=True)\n"
    )
    env = {**os.environ, "RIVET_FAILPOINT": "after_ack:1.0", "RIVET_FAILPOINT_ACTION": "stop"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        for _ in range(200):
            with open(f"/proc/{child.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the child never stopped at its point")
        child.send_signal(signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0
    assert out.decode().strip() == "continued"  # once: the second fire did not stop it


def test_a_point_fired_in_another_thread_stops_that_thread_before_it_goes_on():
    """The guard's heartbeat and a handler's decision fire their points outside the main
    thread. The thread that fired must be stopped when stop_self returns: a process-directed
    SIGSTOP was taken by the main thread while the firing thread ran on and sent the write it
    was to stop before (here: a byte to a pipe; seen in 17 stops of 60 before the fix)."""
    import select
    import subprocess
    import sys
    import time

    code = (
        "import os, sys, threading, time\n"
        "from rivet.failpoints import stop_self\n"
        "def fire():\n"
        "    stop_self()\n"
        "    os.write(int(sys.argv[1]), b'x')\n"
        "threading.Thread(target=fire).start()\n"
        "time.sleep(60)\n"
    )
    wrote = 0
    for _ in range(20):
        read_end, write_end = os.pipe()
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(write_end)], pass_fds=(write_end,)
        )
        os.close(write_end)
        try:
            for _ in range(600):
                with open(f"/proc/{child.pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                        break
                time.sleep(0.01)
            else:
                raise AssertionError("the child never stopped")
            time.sleep(0.05)  # what the firing thread could still send, it has sent now
            wrote += bool(select.select([read_end], [], [], 0)[0])
        finally:
            child.kill()
            child.wait()
            os.close(read_end)
    assert wrote == 0


def test_failpoints_are_off_unless_the_project_enables_them(settings):
    from rivet.failpoints import from_settings

    settings.RIVET = {}
    assert from_settings({}).armed == {}
    with pytest.raises(FailpointConfigError, match=r"RIVET\['FAILPOINTS'\] = True"):
        from_settings({"RIVET_FAILPOINT": "after_ack:1.0"})
    settings.RIVET = {"FAILPOINTS": True}
    assert from_settings({"RIVET_FAILPOINT": "after_ack:1.0"}).armed == {"after_ack": 1.0}


def test_off_the_process_wide_points_never_read_the_environment(settings, monkeypatch):
    from rivet import failpoints

    settings.RIVET = {}
    monkeypatch.setenv("RIVET_FAILPOINT", "after_ack:1.0")
    monkeypatch.setattr(failpoints, "_active", None)
    assert failpoints.active().armed == {}


def test_a_worker_with_rivet_failpoint_set_and_failpoints_off_refuses_to_start(
    settings, monkeypatch
):
    from django.core.management import CommandError, call_command

    settings.RIVET = {}
    monkeypatch.setenv("RIVET_FAILPOINT", "after_claim:1.0")
    with pytest.raises(CommandError, match="RIVET_FAILPOINT is set but failpoints are off") as err:
        call_command("rivet_worker", "--once")
    assert err.value.returncode == 2
    assert "\n" not in str(err.value)


def test_the_failpoints_setting_is_checked_to_be_true_or_false(settings):
    from rivet.checks import check_rivet_settings

    settings.RIVET = {"FAILPOINTS": "yes"}
    found = [(e.id, e.msg) for e in check_rivet_settings()]
    assert ("rivet.E002", "RIVET['FAILPOINTS'] must be True or False, got 'yes'") in found
