"""The invariants read from a run's history (chaos_project.chaos.history), not its end state.

- H1 leases never overlap: a task is claimed only once the lease before it was settled or had
  expired, by the claiming transaction's own clock (the ``now()`` the claim compared
  ``visible_at`` with: one clock, so no skew between two transactions' clocks can matter). The
  lease's deadline is the one its last claim or heartbeat wrote, which must be that
  transaction's now() plus the lease (``lease_ttl``). And a live lease is ended
  only by its holder (no other worker's decision settles the task while it is live, and no
  change that names no worker, an operator's sweep or requeue, or a claim's burial, ends it
  before it lapsed by that change's own clock), and a retry ends it (the task waits for its
  retry held by nobody).
- H2 nothing runs early: a task with no live lease is claimed only once it is ready: its
  enqueue's delay or ``run_at``, a retry's backoff, a requeue's time; and a retry is made ready
  no sooner than the backoff its worker decided (read from the worker's log).
- H3 attempts are bounded: no task is claimed more than ``max_attempts`` times in one life (a
  requeue starts a new life), a cancelled task is never claimed again, and a finished task
  stays finished: a done or dead task is never claimed or changed (a heartbeat, a decision, a
  cancel mark), and only a dead task is requeued: every change an operator's requeue made
  (the history names the actor) was made to a task that was dead before it.
- H4 epochs only grow: every claim gives the task an epoch above every epoch it had before,
  over its whole history, requeues included, and no change lowers it.
- H5 every done effect task's answer was a success: the result its handler returned names the
  effect the service made for the task's key (201, or 200 replaying it), the effect service's
  own table holds that effect under that key, and (through the proxy's record) the worker was
  delivered that answer before the ack was written. Every answer the service gave for a key
  names the same effect.
- F2 (its history part) no stale decision applied: every decision the store applied (a change
  of ``settled_epoch``/``settled_by``: an ack, a retry, a burial, a claim's or an operator's
  burial) names the epoch the row held when it was applied. The end-state row check sees this
  for finished tasks only; a stale retry leaves its task pending, and only the history shows
  that it went through.
- D1 no task died unless designed to: a dead task was cancelled, designed to fail, or used up
  its ``max_attempts`` claims in its last life.

Each check returns a count and up to five samples that say what happened to which task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from chaos_project.chaos.history import (
    ACK,
    BURY,
    CLAIM,
    ENQUEUE,
    HEARTBEAT,
    REQUEUE,
    RETRY,
    Change,
    EffectRequest,
    Image,
)
from chaos_project.chaos.history import SWEEP as SWEEP_ACTOR

SAMPLES = 5
SUCCESS = (200, 201)
#: The workers log a retry's backoff to the millisecond.
DELAY_ROUNDING_SECS = 0.001


@dataclass
class Count:
    """How many times one invariant was broken, and a few of them described."""

    n: int = 0
    samples: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.n += 1
        if len(self.samples) < SAMPLES:
            self.samples.append(text)


@dataclass(frozen=True, kw_only=True)
class TaskEnd:
    """What the verifier knows of a task beyond its history: its final row."""

    state: str
    kind: str
    key: str
    designed_to_fail: bool = False
    """Its payload makes it fail on purpose (every attempt, or permanently), or its kind
    always fails (the poison tasks)."""
    cancelled: bool = False
    """Its last life ended by an operator's cancel (cancel_requested, or its last_error)."""
    result: object = None


@dataclass(frozen=True, kw_only=True)
class HistoryFigures:
    changes: int = 0
    claims: int = 0
    heartbeats: int = 0
    requeues: int = 0
    operator_requeues: int = 0
    """Changes an operator's requeue made (a refused requeue makes none)."""
    operator_sweeps: int = 0
    """Burials an operator's sweep made."""
    effect_requests: int = 0
    overlapping: Count = field(default_factory=Count)
    early: Count = field(default_factory=Count)
    over_attempts: Count = field(default_factory=Count)
    requeued_not_dead: Count = field(default_factory=Count)
    """Requeues (H3) that revived a task that was not dead: live (pending, leased or waiting,
    cancel-marked) or done."""
    epochs_back: Count = field(default_factory=Count)
    stale_decisions: Count = field(default_factory=Count)
    """Decisions applied under an epoch the row no longer held (F2: a stale write applied)."""
    bad_answers: Count = field(default_factory=Count)
    dead_not_designed: Count = field(default_factory=Count)
    recorded: bool = True
    """False when the run left no history (a database no run recorded): nothing judged."""


@dataclass
class _Task:
    lease: tuple[int, str | None, datetime] | None = None
    """The live lease: (epoch, owner, deadline) as its last claim or heartbeat wrote it."""
    ready_at: datetime | None = None
    """When a task with no live lease may run: its enqueue's, retry's or requeue's visible_at."""
    max_epoch: int = 0
    claims_in_life: int = 0
    life: int = 1
    acked_at: datetime | None = None
    max_attempts: int = 0
    extended_after_lapse: bool = False
    """A heartbeat of the live lease was written once the lease had lapsed (its row's deadline
    passed by the time it was written; no claim came between): a claim that met the lease
    lapsed before that write may still bury it (see _ended_without_holder)."""


def _t(value: datetime) -> str:
    return value.strftime("%H:%M:%S.%f")


def judge_history(
    changes: Iterable[Change],
    ends: Mapping[int, TaskEnd],
    *,
    effects: Mapping[int, str] | None = None,
    requests: list[EffectRequest] | None = None,
    effect_kinds: tuple[str, ...] = ("chaos.effect",),
    retry_delays: Mapping[tuple[int, int], float] | None = None,
    lease_ttl: float | None = None,
) -> HistoryFigures:
    """H1-H5 and D1 over ``changes`` (in seq order). ``ends``: each task's final row;
    ``effects``: the effect service's own record (effect id -> key; None: not read);
    ``requests``: the proxy's record (None when no proxy recorded); ``retry_delays``: the
    backoff each worker decided for a retry, by (task, epoch), from its own log (the decision
    is not in the row: a store that drops it writes a visible_at that looks like any other);
    ``lease_ttl``: the workers' lease, which each claim and heartbeat must grant from its own
    transaction's now() (None: only that the deadline is after it)."""
    figures = HistoryFigures()
    tasks: dict[int, _Task] = {}
    claims = heartbeats = requeues = operator_requeues = operator_sweeps = count = 0
    for change in changes:
        count += 1
        task = tasks.setdefault(change.task, _Task())
        task.max_attempts = change.max_attempts
        what = change.what
        old, new = change.old, change.new
        epochs = [new.epoch] + ([old.epoch] if old is not None else [])
        if old is not None and new.epoch < old.epoch:
            figures.epochs_back.add(
                f"task {change.task}: a {what} lowered its epoch from {old.epoch} to {new.epoch}"
            )
        if old is not None and old.state != "pending" and what not in (CLAIM, REQUEUE):
            figures.over_attempts.add(
                f"task {change.task}: changed while {old.state} ({what}: "
                f"{_difference(old, new)}), not requeued"
            )
        if old is not None and _stale_decision(old, new):
            figures.stale_decisions.add(
                f"task {change.task}: a {what} by {new.settled_by or 'no worker'} naming epoch "
                f"{new.settled_epoch} was applied at {_t(change.tx_now)} while the task held "
                f"epoch {old.epoch} ({_difference(old, new)})"
            )
        if change.actor == REQUEUE:
            operator_requeues += 1
        elif change.actor == SWEEP_ACTOR:
            operator_sweeps += 1
        if what != CLAIM:  # a claim's own check (_claim) judges the lease it takes
            _ended_without_holder(figures, change, task)
        if what == ENQUEUE:
            task.ready_at = new.visible_at
        elif what == CLAIM:
            claims += 1
            _claim(figures, change, task)
            _granted(figures, change, lease_ttl)
        elif what == HEARTBEAT:
            heartbeats += 1
            if old is not None and (change.clock or change.tx_now) >= old.visible_at:
                task.extended_after_lapse = True  # written after the lease lapsed
            _granted(figures, change, lease_ttl)
            if task.lease is not None and task.lease[0] == new.epoch:
                task.lease = (new.epoch, new.owner, new.visible_at)
        elif what == RETRY:
            _ended_by_holder(figures, change, task)
            if new.owner is not None:
                figures.overlapping.add(
                    f"task {change.task}: {new.settled_by}'s retry left {new.owner} as its "
                    "holder: a task waiting for its retry must be held by nobody"
                )
            task.lease, task.ready_at = None, new.visible_at
            decided = (retry_delays or {}).get((change.task, new.settled_epoch or 0))
            if decided is not None:
                due = change.tx_now + timedelta(seconds=decided - DELAY_ROUNDING_SECS)
                if new.visible_at < due:
                    figures.early.add(
                        f"task {change.task}: its retry (epoch {new.settled_epoch}) was made "
                        f"ready at {_t(new.visible_at)}, {decided:.3f} s backoff decided at "
                        f"{_t(change.tx_now)}"
                    )
                task.ready_at = max(new.visible_at, due)
        elif what in (ACK, BURY):
            _ended_by_holder(figures, change, task)
            task.lease = None
            if what == ACK:
                task.acked_at = change.tx_now
        elif what == REQUEUE:
            requeues += 1
            if old is not None and old.state != "dead":
                figures.requeued_not_dead.add(
                    f"task {change.task}: {_by(change)}requeued from {_state(old, change)}, not "
                    f"from dead ({_difference(old, new)})"
                )
            task.lease, task.ready_at = None, new.visible_at
            task.claims_in_life, task.life = 0, task.life + 1
        task.max_epoch = max(task.max_epoch, *epochs)
    _judge_ends(figures, tasks, ends)
    if effects is not None:
        _judge_answers(figures, tasks, ends, effects, requests, effect_kinds)
    return HistoryFigures(
        changes=count,
        claims=claims,
        heartbeats=heartbeats,
        requeues=requeues,
        operator_requeues=operator_requeues,
        operator_sweeps=operator_sweeps,
        effect_requests=len(requests or ()),
        overlapping=figures.overlapping,
        early=figures.early,
        over_attempts=figures.over_attempts,
        requeued_not_dead=figures.requeued_not_dead,
        epochs_back=figures.epochs_back,
        stale_decisions=figures.stale_decisions,
        bad_answers=figures.bad_answers,
        dead_not_designed=figures.dead_not_designed,
    )


def _granted(figures: HistoryFigures, change: Change, lease_ttl: float | None) -> None:
    """A claim or a heartbeat grants its lease from its own transaction's now(): a deadline
    of now() + the lease (to the microsecond the store writes), or at least after now()."""
    if change.old is not None and change.old.state != "pending":
        return  # a claim of a finished task: H3's
    granted = (change.new.visible_at - change.tx_now).total_seconds()
    short = granted <= 0 if lease_ttl is None else granted < lease_ttl - DELAY_ROUNDING_SECS
    if short:
        wanted = f"{lease_ttl:g} s" if lease_ttl is not None else "a lease"
        figures.overlapping.add(
            f"task {change.task}: {change.new.owner}'s {change.what} at {_t(change.tx_now)} "
            f"granted a lease of {granted:.3f} s, not {wanted}: another claim may take it while "
            "its holder works"
        )


def _difference(old: Image, new: Image) -> str:
    changed = [
        f"{name} {getattr(old, name)!s} -> {getattr(new, name)!s}"
        for name in ("state", "attempts", "epoch", "owner", "visible_at", "cancel_requested")
        if getattr(old, name) != getattr(new, name)
    ]
    return ", ".join(changed) or "no lease field"


def _claim(figures: HistoryFigures, change: Change, task: _Task) -> None:
    old, new, now = change.old, change.new, change.tx_now
    assert old is not None
    if new.epoch <= task.max_epoch:
        figures.epochs_back.add(
            f"task {change.task}: claimed by {new.owner} at epoch {new.epoch}, but it had "
            f"epoch {task.max_epoch} before (life {task.life})"
        )
    if old.state != "pending":
        figures.over_attempts.add(
            f"task {change.task}: claimed by {new.owner} while {old.state} (life {task.life}, "
            "not requeued)"
        )
    elif old.cancel_requested:
        figures.over_attempts.add(
            f"task {change.task}: claimed by {new.owner} after an operator cancelled it (a "
            "claim buries a cancelled task, it never runs it again)"
        )
    task.claims_in_life += 1
    if task.claims_in_life > change.max_attempts:
        figures.over_attempts.add(
            f"task {change.task}: claim {task.claims_in_life} of its life {task.life} by "
            f"{new.owner}, max_attempts {change.max_attempts}"
        )
    if task.lease is not None:
        epoch, owner, deadline = task.lease
        until = max(deadline, old.visible_at)
        if now < until:
            figures.overlapping.add(
                f"task {change.task}: claimed by {new.owner} (epoch {new.epoch}) at {_t(now)}, "
                f"while {owner}'s lease (epoch {epoch}) ran until {_t(until)}"
            )
    elif old.state == "pending":
        ready = max(filter(None, (task.ready_at, old.visible_at)))
        if now < ready:
            figures.early.add(
                f"task {change.task}: claimed by {new.owner} at {_t(now)}, "
                f"{(ready - now).total_seconds():.3f} s before it was ready ({_t(ready)})"
            )
    task.lease = (new.epoch, new.owner, new.visible_at)
    task.extended_after_lapse = False


def _stale_decision(old: Image, new: Image) -> bool:
    """A decision was applied (the row's settled epoch and owner changed) under another epoch
    than the one the row held: the settle statement's epoch guard let a stale write through."""
    decided = (new.settled_epoch, new.settled_by) != (old.settled_epoch, old.settled_by)
    return decided and new.settled_epoch is not None and new.settled_epoch != old.epoch


def _by(change: Change) -> str:
    return f"an operator's {change.actor} " if change.actor else ""


def _state(old: Image, change: Change) -> str:
    """A task's state before a change, with its lease: 'pending, leased by w1 (epoch 3)'."""
    if old.state != "pending":
        return old.state
    marked = ", cancel-marked" if old.cancel_requested else ""
    if old.owner is not None and change.tx_now < old.visible_at:
        return f"pending, leased by {old.owner} (epoch {old.epoch}){marked}"
    return f"pending, not leased{marked}"


def _ended_without_holder(figures: HistoryFigures, change: Change, task: _Task) -> None:
    """A change that names no worker (no decision's settled_by: an operator's sweep, requeue or
    cancel, a claim's burial) must not end a lease that was live by the change's own clock:
    the row's own deadline (visible_at, which the store's statements compare with now()) not
    yet passed, with an owner. Ending it is the task leaving pending, or its epoch or owner
    changing. (A worker's decision is _ended_by_holder's; a claim is _claim's.)

    An operator's action (the history names it) reads and writes the row in one transaction
    (a sweep picks the lapsed leases FOR UPDATE and buries them before it commits), so the rule
    holds for it as it stands. A claim's burial is written by the statement after the one that
    picked the task lapsed (on PostgreSQL each commits by itself): the holder's heartbeat may
    extend the lapsed lease between the two (a heartbeat checks the epoch and the state, not
    the deadline), and the burial then meets a lease its row calls live. So a burial by no
    operator is allowed when a heartbeat of the lease was written after the lease had lapsed
    (by the server's clock at that write: the claim's pick may have come just before it), and
    only then."""
    old, new = change.old, change.new
    if old is None or old.state != "pending" or old.owner is None:
        return
    if change.tx_now >= old.visible_at:
        return  # lapsed by the clock the store's own statement compared it with
    if not change.actor and change.what == BURY and task.extended_after_lapse:
        return  # a claim's burial of the lease it found lapsed, after the late heartbeat
    decided = (new.settled_epoch, new.settled_by) != (old.settled_epoch, old.settled_by)
    if decided and new.settled_by:
        return  # a worker's decision
    if new.state == "pending" and (new.epoch, new.owner) == (old.epoch, old.owner):
        return  # the lease goes on (a heartbeat, a cancel mark)
    who = f"an operator's {change.actor}" if change.actor else f"a {change.what} naming no worker"
    figures.overlapping.add(
        f"task {change.task}: {who} at {_t(change.tx_now)} ended {old.owner}'s live lease "
        f"(epoch {old.epoch}, until {_t(old.visible_at)}): {_difference(old, new)}"
    )


def _ended_by_holder(figures: HistoryFigures, change: Change, task: _Task) -> None:
    """A live lease ends only by its holder's decision: a worker's decision (settled_by names
    a worker) written while another lease was live, or under another epoch, took the task from
    the holder. (A claim's or the sweep's burial names no worker: it meets lapsed leases.)"""
    if task.lease is None or not change.new.settled_by:
        return
    epoch, owner, deadline = task.lease
    new = change.new
    live = change.tx_now < max(deadline, change.old.visible_at if change.old else deadline)
    if live and (new.settled_epoch != epoch or new.settled_by != owner):
        figures.overlapping.add(
            f"task {change.task}: {new.settled_by}'s {change.what} at epoch {new.settled_epoch} "
            f"ended {owner}'s live lease (epoch {epoch}, until {_t(deadline)}) at "
            f"{_t(change.tx_now)}"
        )


def _judge_ends(
    figures: HistoryFigures,
    tasks: Mapping[int, _Task],
    ends: Mapping[int, TaskEnd],
) -> None:
    for task_id, end in sorted(ends.items()):
        if end.state != "dead" or end.designed_to_fail or end.cancelled:
            continue
        task = tasks.get(task_id)
        if task is None:
            continue  # no history of it: nothing to judge by
        claims, max_attempts = task.claims_in_life, task.max_attempts
        if claims < max_attempts:
            figures.dead_not_designed.add(
                f"task {task_id} ({end.kind}) died after {claims} claim(s) of its life "
                f"{task.life}, max_attempts {max_attempts}, not cancelled, not designed to fail"
            )


def _judge_answers(
    figures: HistoryFigures,
    tasks: Mapping[int, _Task],
    ends: Mapping[int, TaskEnd],
    effects: Mapping[int, str],
    requests: list[EffectRequest] | None,
    effect_kinds: tuple[str, ...],
) -> None:
    by_key: dict[str, list[EffectRequest]] = {}
    for request in requests or ():
        by_key.setdefault(request.key, []).append(request)
        named = {a[2] for a in request.answers if a[0] in SUCCESS and a[2] is not None}
        if len(named) > 1:
            figures.bad_answers.add(
                f"key {request.key}: one request answered with effects {sorted(named)}"
            )
    for key, sent in by_key.items():
        named = {a[2] for r in sent for a in r.answers if a[0] in SUCCESS and a[2] is not None}
        if len(named) > 1:
            figures.bad_answers.add(f"key {key}: answered with effects {sorted(named)}")
    for task_id, end in sorted(ends.items()):
        if end.state != "done" or end.kind not in effect_kinds:
            continue
        known = by_key if requests is not None else None
        problem = _answer_problem(end, effects, known, tasks.get(task_id))
        if problem:
            figures.bad_answers.add(f"task {task_id} ({end.key}): {problem}")


def _answer_problem(
    end: TaskEnd,
    effects: Mapping[int, str],
    by_key: Mapping[str, list[EffectRequest]] | None,
    task: _Task | None,
) -> str:
    result = end.result
    if not isinstance(result, dict):
        return f"done with result {result!r}, not the effect service's answer"
    status, replay, effect = result.get("status"), result.get("replay"), result.get("effect_id")
    if status not in SUCCESS or replay is not (status == 200) or not isinstance(effect, int):
        return f"done with result {result!r}: not 201, or 200 replaying, with the effect's id"
    if effects.get(effect) != end.key:
        found = effects.get(effect)
        where = f"is under key {found}" if found is not None else "does not exist"
        return f"its result names effect {effect}, which in the effect service's own table {where}"
    if by_key is None:
        return ""
    delivered = [
        r
        for r in by_key.get(end.key, [])
        if r.delivered_status in SUCCESS and r.delivered_effect == effect
    ]
    if not delivered:
        return (
            f"its result names effect {effect}, but no worker was delivered an answer naming it "
            f"({len(by_key.get(end.key, []))} request(s) for the key, none answered so)"
        )
    acked = task.acked_at if task is not None else None
    first = min(r.delivered_at or r.sent_at for r in delivered)
    if acked is not None and acked < first:
        return (
            f"acked at {_t(acked)}, before any worker was delivered its effect's answer "
            f"(first at {_t(first)})"
        )
    return ""
