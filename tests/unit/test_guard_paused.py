"""A worker paused (SIGSTOP) in the middle of a heartbeat must still learn it was fenced.

The heartbeat's answer arrives after the lease it extended has run out; taken alone it would
leave the task's deadline in the past, and the guard would stop the handler as expired and
write nothing. The guard asks again instead, and the lease another worker took meanwhile is
reported fenced (the worker then records its refused write).
"""

from __future__ import annotations

from rivet.guard import Guard, Running, StopKind
from rivet.jobs import JobContext
from rivet.values import Claimed

TTL = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class PausedMidHeartbeat:
    """First heartbeat: the lease is still held, but the answer comes back after a long pause.
    Every later one: another worker has claimed the task."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls = 0

    def lease_extend(self, leases, lease_ttl):
        self.calls += 1
        if self.calls == 1:
            self.clock.now += 3 * TTL  # SIGSTOP after the statement ran, SIGCONT much later
            return {lease.task_id for lease in leases}
        return set()


def running(clock: Clock) -> Running:
    claimed = Claimed(
        task_id=7, queue="q", kind="k", payload=None, idem_key=None,
        attempt=1, max_attempts=3, epoch=1, owner="w",
    )  # fmt: skip
    context = JobContext(task_id=7, queue="q", kind="k", payload=None, attempt=1, max_attempts=3)
    return Running(
        claimed=claimed,
        context=context,
        definition=None,
        started=clock(),
        lease_ttl=TTL,
        timeout_secs=None,
    )


def test_a_heartbeat_answered_after_a_pause_is_asked_again_and_finds_the_fence() -> None:
    clock = Clock()
    store = PausedMidHeartbeat(clock)
    notified: list[Running] = []
    guard = Guard(store=store, lease_ttl=TTL, clock=clock, notify=notified.append)
    task = running(clock)
    guard.track(task)
    clock.now += TTL / 3  # the first heartbeat is due
    guard.tick()
    assert store.calls == 2
    assert task.stop_kind is StopKind.FENCED
    assert notified == [task]


def test_a_prompt_heartbeat_is_not_repeated() -> None:
    clock = Clock()

    class Prompt:
        calls = 0

        def lease_extend(self, leases, lease_ttl):
            Prompt.calls += 1
            return {lease.task_id for lease in leases}

    guard = Guard(store=Prompt(), lease_ttl=TTL, clock=clock, notify=lambda r: None)
    task = running(clock)
    guard.track(task)
    clock.now += TTL / 3
    guard.tick()
    assert Prompt.calls == 1
    assert task.stop_kind is None
