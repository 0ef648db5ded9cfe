"""A worker paused (SIGSTOP) mid-heartbeat or mid-claim must still learn it was fenced.

After the pause, an answer (a heartbeat's, or a claim's) arrives with a deadline already past.
Taken alone it would make the guard stop the handler as expired and write nothing. The guard
heartbeats first instead, and a lease another worker took meanwhile is reported fenced (the
worker then records its refused write).
"""

from __future__ import annotations

from rivet.jobs import JobRegistry, job
from rivet.values import Claimed
from rivet.worker.attempt import Attempt, StopKind
from rivet.worker.guard import Guard

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


def running(clock: Clock) -> Attempt:
    claimed = Claimed(
        task_id=7, queue="q", kind="k", payload=None, idem_key=None,
        attempt=1, max_attempts=3, epoch=1, owner="w",
    )  # fmt: skip
    definition = job("k", registry=JobRegistry())(lambda ctx: None)
    return Attempt(
        claimed=claimed, definition=definition, started=clock(), lease_ttl=TTL, timeout_secs=None
    )


def test_a_heartbeat_answered_after_a_pause_is_asked_again_and_finds_the_fence() -> None:
    clock = Clock()
    store = PausedMidHeartbeat(clock)
    notified: list[Attempt] = []
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


def test_a_task_tracked_with_its_deadline_past_is_heartbeated_before_it_can_expire() -> None:
    clock = Clock()

    class Taken:
        calls = 0

        def lease_extend(self, leases, lease_ttl):
            Taken.calls += 1
            return set()  # another worker claimed it while this one was stopped

    guard = Guard(store=Taken(), lease_ttl=TTL, clock=clock, notify=lambda r: None)
    late = running(clock)  # claimed before the pause: its deadline counts from then
    clock.now += 3 * TTL
    guard.track(late)
    guard.check_deadlines(clock(), heartbeated=[])  # a round whose heartbeat did not cover it
    assert late.stop_kind is None
    guard.tick()  # the next round heartbeats it first
    assert Taken.calls == 1
    assert late.stop_kind is StopKind.FENCED
