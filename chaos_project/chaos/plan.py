"""The seeded plan of a chaos run: how long each task works, and when and how to break workers.

Everything random in a run comes from one ``random.Random(seed)``, drawn here in a fixed order
(first each task's work, then the events), so the same seed and the same arguments give the same
plan, and a run that failed can be repeated. When an event is carried out and which worker it
finally hits depend on the state of the run (a kill or a zombie needs a worker that holds
leases; an event waits for one), but that choice is made from the plan without another draw:
see ``Fleet.pick``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KILL = "kill"
FAILPOINT = "failpoint"
ZOMBIE = "zombie"
KINDS = (KILL, FAILPOINT, ZOMBIE)
#: Kinds are dealt from this bag, shuffled, refilled when empty: every ten events hold three
#: kills, four failpoints and three zombies, so no run of ten events or more misses a kind.
KIND_BAG = (KILL,) * 3 + (FAILPOINT,) * 4 + (ZOMBIE,) * 3

#: Mean seconds between two chaos events: a run plans duration / MEAN_GAP_SECS of them, at
#: uniformly drawn times (75 in 15 s, 300 in 60 s). Four workers cannot be broken that fast
#: (at most two zombies, each stopped for a lease and more; two armed workers), so some wait
#: to the end and are reported as not carried out; the rate is what makes the default run carry
#: out at least the seed report's 227 events.
MEAN_GAP_SECS = 0.2
#: Each effect task works this many milliseconds (uniform) before its effect.
WORK_MS = (10, 300)
#: The probability that an armed worker aborts at after_effect_before_ack, per ack: at its
#: first ack, so every armed worker that gets a task reaches its failpoint.
FAILPOINT_PROBABILITY = 1.0
#: Where a pausing zombie stops itself (RIVET_FAILPOINT_ACTION=stop): its ack decided, unsent.
PAUSE_POINT = "after_effect_before_ack"
#: Where a pausing zombie stops itself on the failure path: a retry or burial decided, unsent.
PAUSE_POINT_FAIL = "after_error_before_fail"
#: Where a pausing zombie stops itself with a retry decided, unsent (and with a burial).
PAUSE_POINT_RETRY = "after_error_before_retry"
PAUSE_POINT_BURY = "after_error_before_bury"
#: Where a pausing zombie stops itself with two or more decisions about to be written at once.
PAUSE_POINT_FLUSH = "before_flush"
#: Where a pausing zombie stops itself just before a heartbeat.
PAUSE_POINT_HEARTBEAT = "before_heartbeat"
#: The points pausing zombies stop at, in turn: an ack, a retry, a burial, a batch of decisions
#: and a heartbeat (each late write meets the guard of its own kind), then a failure of either
#: kind (whose late write may also meet a task a claim buried meanwhile).
PAUSE_POINTS = (
    PAUSE_POINT,
    PAUSE_POINT_RETRY,
    PAUSE_POINT_BURY,
    PAUSE_POINT_FLUSH,
    PAUSE_POINT_HEARTBEAT,
    PAUSE_POINT_FAIL,
)

#: The chaos tasks' designs, by task number (no draw: the rest of the plan is what the seed
#: gave before designs existed). Every 20 tasks hold two flaky ones (fail their first two
#: attempts, then make their effect: retry decisions, and a task that is pending again, not
#: finished, when a zombie's late retry of it arrives), three permanent failures (raise
#: rivet.Permanent at their first attempt: buried at once; a later attempt, which only a lost
#: first one leads to, fails as a plain error until its three attempts are used up, so a
#: zombie's late burial meets a pending task), one doomed one (always fails, two attempts: a
#: retry then a burial as max attempts exceeded) and two one-shot ones (max_attempts 1: a claim
#: that meets one whose worker was lost buries it at the epoch it had, so a late write of that
#: worker meets a finished task).
FLAKY, PERMANENT, DOOMED, ONE_SHOT, PLAIN = "flaky", "permanent", "doomed", "one-shot", "plain"
DESIGN_CYCLE = {
    1: FLAKY,
    11: FLAKY,
    3: PERMANENT,
    9: PERMANENT,
    13: PERMANENT,
    7: DOOMED,
    5: ONE_SHOT,
    15: ONE_SHOT,
}
DOOMED_MAX_ATTEMPTS = 2
FLAKY_FAILS = 2
PERMANENT_MAX_ATTEMPTS = 3


#: Every DELAYED_EVERY-th chaos task (from DELAYED_FROM) is enqueued with a delay that grows
#: with its number (DELAY_SECS, in turn): a claim must wait for it (H2).
DELAYED_EVERY = 20
DELAYED_FROM = 18
DELAY_SECS = (0.5, 1.0, 2.0)


def release_delay(n: int) -> float:
    """The delay chaos task ``n`` is enqueued with (0: none)."""
    if n % DELAYED_EVERY != DELAYED_FROM:
        return 0.0
    return DELAY_SECS[(n // DELAYED_EVERY) % len(DELAY_SECS)]


def design(n: int) -> str:
    """How chaos task ``n`` is meant to go (see DESIGN_CYCLE)."""
    return DESIGN_CYCLE.get(n % 20, PLAIN)


def designed_fields(n: int, max_attempts: int) -> tuple[dict[str, object], int]:
    """The payload fields and max_attempts that make task ``n`` go as designed."""
    kind = design(n)
    if kind == FLAKY:
        return {"fail_attempts": FLAKY_FAILS}, max_attempts
    if kind == PERMANENT:
        fields = {"permanent_at": 1, "fail_attempts": PERMANENT_MAX_ATTEMPTS}
        return fields, PERMANENT_MAX_ATTEMPTS
    if kind == DOOMED:
        return {"fail_attempts": DOOMED_MAX_ATTEMPTS}, DOOMED_MAX_ATTEMPTS
    if kind == ONE_SHOT:
        return {}, 1
    return {}, max_attempts


@dataclass(frozen=True, kw_only=True)
class Planned:
    """One chaos event: at ``at`` seconds into the run, break the worker in ``slot``."""

    at: float
    kind: str
    slot: int
    failpoint_seed: int = 0
    """failpoint: RIVET_FAILPOINT_SEED of the armed worker."""
    pause: bool = False
    """zombie: stopped by its own failpoint just before a write (its decision made, not yet
    written), not by the harness's SIGSTOP at a random moment (mostly inside a handler)."""
    pause_point: str = PAUSE_POINT
    """zombie with ``pause``: the failpoint it stops at (an ack's, or a retry's or burial's)."""


@dataclass(frozen=True, kw_only=True)
class ChaosPlan:
    seed: int
    duration: float
    work_ms: tuple[int, ...]
    events: tuple[Planned, ...]

    def counts(self) -> dict[str, int]:
        return {kind: sum(1 for e in self.events if e.kind == kind) for kind in KINDS}


#: Events are planned in the run's first ``duration - PLAN_TAIL_SECS`` seconds: a failpoint
#: waits up to a second for a restarting slot to take it, and a kill, a stop or a pause needs a
#: worker holding leases while half the fleet works, so one planned in the last moment of the
#: chaos could not be carried out before it ends.
PLAN_TAIL_SECS = 1.5


def event_count(duration: float) -> int:
    return max(1, round(duration / MEAN_GAP_SECS))


def new_seed() -> int:
    """A seed for a run that was given none (printed, so the run can be repeated)."""
    return random.SystemRandom().randrange(1, 2**31)


def make_plan(seed: int, *, tasks: int, workers: int, duration: float) -> ChaosPlan:
    """The plan for one run; the same arguments always give the same plan."""
    rng = random.Random(seed)
    work_ms = tuple(rng.randint(*WORK_MS) for _ in range(tasks))
    last = max(duration - PLAN_TAIL_SECS, duration / 2)
    times = sorted(round(rng.uniform(0, last), 3) for _ in range(event_count(duration)))
    events: list[Planned] = []
    bag: list[str] = []
    for at in times:
        if not bag:
            bag = list(KIND_BAG)
            rng.shuffle(bag)
        events.append(_event(rng, bag.pop(), at, workers))
    events = _every_other_zombie_pauses(events)
    return ChaosPlan(seed=seed, duration=duration, work_ms=work_ms, events=tuple(events))


def _event(rng: random.Random, kind: str, at: float, workers: int) -> Planned:
    slot = rng.randrange(workers)
    if kind == FAILPOINT:
        return Planned(at=at, kind=kind, slot=slot, failpoint_seed=rng.randrange(1, 2**31))
    return Planned(at=at, kind=kind, slot=slot)


def _every_other_zombie_pauses(events: list[Planned]) -> list[Planned]:
    """Two zombies in three (the second, third, fifth, sixth...) stop themselves at a
    failpoint, in turn at PAUSE_POINTS; the others are SIGSTOPped by the harness. No draw, so
    the rest of the plan is what the seed gave before pauses existed."""
    zombies = paused = 0
    out = []
    for event in events:
        if event.kind == ZOMBIE:
            zombies += 1
            if zombies % 3 != 1:
                paused += 1
                point = PAUSE_POINTS[(paused - 1) % len(PAUSE_POINTS)]
                event = Planned(
                    at=event.at, kind=ZOMBIE, slot=event.slot, pause=True, pause_point=point
                )
        out.append(event)
    return out
