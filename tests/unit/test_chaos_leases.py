"""The history invariants (chaos_project.chaos.leases) on hand-made histories: a clean one holds
every invariant, and each of the others breaks exactly one, which must fail it and no other."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from chaos_project.chaos.history import (
    ACK,
    BURY,
    CANCEL,
    CLAIM,
    ENQUEUE,
    HEARTBEAT,
    REQUEUE,
    RETRY,
    Change,
    EffectRequest,
    Image,
    classify,
)
from chaos_project.chaos.leases import HistoryFigures, TaskEnd, judge_history
from chaos_project.chaos.verifier import Figures, history_violations, judge

T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)
TTL = 2.0
KEY = "chaos-1-7"
EFFECT = 41


def at(secs: float) -> datetime:
    return T0 + timedelta(seconds=secs)


class Task:
    """Builds one task's history change by change, as the trigger would record it."""

    def __init__(self, task: int = 7, *, max_attempts: int = 3, delay: float = 0.0) -> None:
        self.task = task
        self.max_attempts = max_attempts
        self.changes: list[Change] = []
        self.row = Image(state="pending", attempts=0, epoch=0, owner=None, visible_at=at(delay))
        self._add(None, self.row, at(0))

    def _add(
        self, old: Image | None, new: Image, now: datetime, result: object = None, actor: str = ""
    ) -> None:
        self.changes.append(
            Change(
                seq=len(self.changes) + 1,
                task=self.task,
                kind="chaos.effect",
                max_attempts=self.max_attempts,
                tx_now=now,
                old=old,
                new=new,
                result=result,
                actor=actor,
            )
        )
        self.row = new

    def change(self, secs: float, result: object = None, actor: str = "", **fields) -> Task:
        self._add(self.row, dataclasses.replace(self.row, **fields), at(secs), result, actor)
        return self

    def claim(self, secs: float, owner: str, *, epoch: int | None = None) -> Task:
        r = self.row
        return self.change(
            secs,
            attempts=r.attempts + 1,
            epoch=r.epoch + 1 if epoch is None else epoch,
            owner=owner,
            visible_at=at(secs + TTL),
        )

    def beat(self, secs: float) -> Task:
        return self.change(secs, visible_at=at(secs + TTL))

    def ack(self, secs: float, owner: str | None = None, epoch: int | None = None) -> Task:
        r = self.row
        result = {"status": 201, "replay": False, "effect_id": EFFECT}
        return self.change(
            secs,
            result=result,
            state="done",
            settled_epoch=r.epoch if epoch is None else epoch,
            settled_by=owner or r.owner,
        )

    def retry(self, secs: float, delay: float) -> Task:
        r = self.row
        return self.change(
            secs,
            owner=None,
            settled_epoch=r.epoch,
            settled_by=r.owner,
            visible_at=at(secs + delay),
        )

    def bury(self, secs: float, by: str = "", actor: str = "") -> Task:
        r = self.row
        return self.change(secs, actor=actor, state="dead", settled_epoch=r.epoch, settled_by=by)

    def requeue(self, secs: float, *, new_epoch: bool = True, actor: str = "") -> Task:
        """What dead_requeue writes (whatever the task was before it)."""
        r = self.row
        epoch = r.epoch + 1 if new_epoch else r.epoch
        return self.change(
            secs,
            actor=actor,
            state="pending",
            attempts=0,
            epoch=epoch,
            owner=None,
            visible_at=at(secs),
            cancel_requested=False,
        )


def delivered(secs: float, effect: int = EFFECT, status: int = 201) -> EffectRequest:
    return EffectRequest(
        key=KEY,
        sent_at=at(secs - 0.05),
        fault="",
        answers=((status, status == 200, effect),),
        delivered_status=status,
        delivered_effect=effect,
        delivered_at=at(secs),
    )


def done_end(result: object = None) -> TaskEnd:
    result = result or {"status": 201, "replay": False, "effect_id": EFFECT}
    return TaskEnd(state="done", kind="chaos.effect", key=KEY, result=result)


def judged(
    task: Task,
    end: TaskEnd | None = None,
    *,
    effects: dict[int, str] | None = None,
    requests: list[EffectRequest] | None = None,
) -> HistoryFigures:
    return judge_history(
        task.changes,
        {task.task: end or done_end()},
        effects={EFFECT: KEY} if effects is None else effects,
        requests=[delivered(3.0)] if requests is None else requests,
    )


def failed(figures: HistoryFigures) -> list[str]:
    return [v.code for v in history_violations(figures)]


def clean() -> Task:
    """Enqueued with a delay, claimed when ready, a retry after its backoff, its worker lost
    and the lease claimed after it expired, a heartbeat, an ack."""
    t = Task(delay=0.5)
    t.claim(0.6, "w1").retry(0.9, delay=0.5)
    t.claim(1.5, "w2")  # w2 stops: its lease runs out at 3.5
    t.claim(3.6, "w3").beat(4.0).ack(4.5)
    return t


def test_a_clean_history_holds_every_invariant():
    figures = judged(clean(), requests=[delivered(4.2)])
    assert failed(figures) == []
    assert (figures.claims, figures.heartbeats) == (3, 1)


def test_the_changes_are_classified_from_the_row_before_and_after():
    t = clean()
    whats = [classify(c) for c in t.changes]
    assert whats == [ENQUEUE, CLAIM, RETRY, CLAIM, CLAIM, HEARTBEAT, ACK]
    t2 = Task().claim(0, "w1").bury(1.0, by="w1").requeue(2.0)
    t2.change(2.1, cancel_requested=True)
    assert [classify(c) for c in t2.changes][-3:] == [BURY, REQUEUE, CANCEL]


def test_h1_a_claim_of_a_live_lease_fails():
    t = Task()
    t.claim(0.1, "w1").claim(1.0, "w2").ack(1.5)  # w1's lease ran until 2.1
    assert failed(judged(t, requests=[delivered(1.4)])) == ["H1"]


def test_h1_a_heartbeat_extends_the_lease_that_must_not_be_taken():
    t = Task()
    t.claim(0.1, "w1").beat(1.5).claim(2.5, "w2").ack(3.0)  # the beat moved it to 3.5
    assert failed(judged(t, requests=[delivered(2.9)])) == ["H1"]


def test_h1_another_workers_decision_on_a_live_lease_fails():
    t = Task()
    t.claim(0.1, "w1").claim(2.5, "w2")
    t.ack(3.0, owner="w1", epoch=1)  # w1's stale ack landed on w2's live lease
    assert failed(judged(t, requests=[delivered(2.9)])) == ["H1", "F2"]  # F2: a stale write


def test_h1_a_retry_that_keeps_its_holder_fails():
    t = Task()
    t.claim(0.1, "w1")
    t.change(0.5, settled_epoch=1, settled_by="w1", visible_at=at(0.7))  # a retry, owner kept
    t.claim(1.0, "w2").ack(1.5)
    assert failed(judged(t, requests=[delivered(1.4)])) == ["H1"]


def test_h1_a_lease_granted_short_of_its_ttl_fails():
    t = Task()
    t.claim(0.1, "w1").change(0.5, visible_at=at(0.5 + TTL)).ack(1.0)  # claim and beat: 2 s
    ok = judge_history(t.changes, {t.task: done_end()}, effects={EFFECT: KEY},
                       requests=[delivered(0.9)], lease_ttl=TTL)  # fmt: skip
    assert failed(ok) == []
    short = Task()
    short.claim(0.1, "w1").change(0.5, visible_at=at(0.6)).ack(1.0)  # a beat of 0.1 s
    figures = judge_history(short.changes, {short.task: done_end()}, effects={EFFECT: KEY},
                            requests=[delivered(0.9)], lease_ttl=TTL)  # fmt: skip
    assert (
        failed(figures) == ["H1"] and "granted a lease of 0.100 s" in figures.overlapping.samples[0]
    )
    unmoved = Task()
    unmoved.claim(0.1, "w1").change(0.9, owner="w1").ack(1.0)  # a beat that moved nothing
    figures = judge_history(unmoved.changes, {unmoved.task: done_end()}, effects={EFFECT: KEY},
                            requests=[delivered(0.95)], lease_ttl=TTL)  # fmt: skip
    assert failed(figures) == ["H1"]


def test_h2_a_claim_before_the_delay_fails():
    t = Task(delay=1.0)
    t.claim(0.5, "w1").ack(0.9)
    assert failed(judged(t, requests=[delivered(0.8)])) == ["H2"]


def test_h2_a_claim_before_the_retry_backoff_fails():
    t = Task()
    t.claim(0.1, "w1").retry(0.5, delay=1.0).claim(0.6, "w2").ack(1.0)
    assert failed(judged(t, requests=[delivered(0.9)])) == ["H2"]


def test_h2_a_retry_made_ready_before_its_decided_backoff_fails():
    """The store wrote visible_at = now for a retry its worker decided to delay 1 s: the claim
    that follows at once looks ready by the row, and is early by the decision."""
    t = Task()
    t.claim(0.1, "w1").retry(0.5, delay=0.0).claim(0.6, "w2").ack(1.0)
    delays = {(t.task, 1): 1.0}
    figures = judge_history(
        t.changes,
        {t.task: done_end()},
        effects={EFFECT: KEY},
        requests=[delivered(0.9)],
        retry_delays=delays,
    )
    assert failed(figures) == ["H2"]
    assert figures.early.n == 2  # the retry's write, and the claim before the decided time
    honest = Task()
    honest.claim(0.1, "w1").retry(0.5, delay=1.0).claim(1.6, "w2").ack(2.0)
    figures = judge_history(
        honest.changes,
        {honest.task: done_end()},
        effects={EFFECT: KEY},
        requests=[delivered(1.9)],
        retry_delays=delays,
    )
    assert failed(figures) == []


def test_h3_one_claim_too_many_in_a_life_fails():
    t = Task(max_attempts=2)
    t.claim(0.1, "w1").claim(2.2, "w2").claim(4.3, "w3").ack(5.0)
    assert failed(judged(t, requests=[delivered(4.9)])) == ["H3"]


def test_h3_a_requeue_starts_a_new_life():
    t = Task(max_attempts=1)
    t.claim(0.1, "w1").bury(2.2).requeue(3.0).claim(3.1, "w2").ack(3.5)
    assert failed(judged(t, requests=[delivered(3.4)])) == []


def test_h3_a_claim_of_a_done_task_fails():
    t = Task()
    t.claim(0.1, "w1").ack(0.5)
    t.change(0.6, attempts=2, epoch=2, owner="w2", visible_at=at(2.6))  # state stays done
    assert failed(judged(t, requests=[delivered(0.4)])) == ["H3"]


def test_h3_a_claim_of_a_cancelled_task_fails():
    t = Task()
    t.claim(0.1, "w1").change(0.5, cancel_requested=True)  # marked; w1 is lost
    t.claim(2.2, "w2").bury(2.5, by="w2")  # a claim must bury it, not lease it
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY, cancelled=True)
    assert failed(judged(t, end, requests=[])) == ["H3"]


def test_h3_a_heartbeat_of_a_done_task_fails():
    t = Task()
    t.claim(0.1, "w1").ack(0.5).change(0.6, visible_at=at(2.6))  # extended after its ack
    figures = judged(t, requests=[delivered(0.4)])
    assert failed(figures) == ["H3"]
    assert "changed while done" in figures.over_attempts.samples[0]


def test_h3_an_operator_requeue_of_a_dead_task_holds():
    t = Task(max_attempts=1)
    t.claim(0.1, "w1").bury(2.2).requeue(3.0, actor="requeue").claim(3.1, "w2").ack(3.5)
    figures = judged(t, requests=[delivered(3.4)])
    assert failed(figures) == []
    assert (figures.requeues, figures.operator_requeues) == (1, 1)


def requeued_while(seen: str) -> Task:
    """A task an operator's requeue revived while it was ``seen`` (leased, waiting for its
    retry, cancel-marked and leased, or done), as a store without the requeue's state guard
    writes it; then claimed and acked in its new life."""
    t = Task()
    if seen == "leased":
        t.claim(0.1, "w1")
    elif seen == "waiting":
        t.claim(0.1, "w1").retry(0.2, delay=1.0)
    elif seen == "cancel-marked":
        t.claim(0.1, "w1").change(0.2, actor="cancel", cancel_requested=True)
    else:
        t.claim(0.1, "w1").ack(0.2)
    return t.requeue(0.5, actor="requeue").claim(0.6, "w2").ack(1.0)


@pytest.mark.parametrize(
    ("seen", "codes"),
    [
        ("leased", ["H1", "H3"]),  # the requeue also took w1's live lease from it
        ("waiting", ["H3"]),
        ("cancel-marked", ["H1", "H3"]),
        ("done", ["H3"]),
    ],
)
def test_h3_an_operator_requeue_of_a_task_not_dead_fails(seen: str, codes: list[str]):
    t = requeued_while(seen)
    # the row a requeue of a pending task writes reads like a heartbeat's; the actor says what
    assert classify(t.changes[-3]) == REQUEUE
    figures = judged(t, requests=[delivered(0.9)])
    assert failed(figures) == codes
    assert figures.requeued_not_dead.n == 1 and figures.over_attempts.n == 0
    before = {"leased": "leased by w1", "waiting": "not leased", "done": "from done"}
    sample = figures.requeued_not_dead.samples[0]
    assert "an operator's requeue requeued from" in sample and before.get(seen, seen) in sample


def test_h1_a_burial_naming_no_worker_of_a_live_lease_fails():
    """An operator's sweep (or a claim's burial) that buries a task whose lease is live by its
    own transaction's clock: on its last attempt, or cancel-marked."""
    last = Task(max_attempts=1)
    last.claim(0.1, "w1").bury(1.0, actor="sweep")  # w1's lease runs until 2.1
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY)
    figures = judged(last, end, requests=[])
    assert failed(figures) == ["H1"]
    assert "an operator's sweep" in figures.overlapping.samples[0]
    assert figures.operator_sweeps == 1
    marked = Task()
    marked.claim(0.1, "w1").change(0.2, actor="cancel", cancel_requested=True).bury(1.0)
    cancelled = dataclasses.replace(end, cancelled=True)
    figures = judged(marked, cancelled, requests=[])
    assert failed(figures) == ["H1"]
    assert "a bury naming no worker" in figures.overlapping.samples[0]


def test_h1_a_burial_naming_no_worker_once_the_lease_lapsed_holds():
    """The sweep's and a claim's burial of a lapsed lease (last attempt, or cancel-marked), and
    the holder's own burial of its live lease."""
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY)
    last = Task(max_attempts=1)
    last.claim(0.1, "w1").bury(2.1, actor="sweep")  # at the deadline: lapsed
    assert failed(judged(last, end, requests=[])) == []
    marked = Task()
    marked.claim(0.1, "w1").change(0.2, cancel_requested=True).bury(2.5)
    assert failed(judged(marked, dataclasses.replace(end, cancelled=True), requests=[])) == []
    own = Task()
    own.claim(0.1, "w1").change(0.2, cancel_requested=True).bury(0.5, by="w1")
    assert failed(judged(own, dataclasses.replace(end, cancelled=True), requests=[])) == []


def test_h1_a_claims_burial_after_a_late_heartbeat_holds_and_a_sweeps_fails():
    """A claim picks a lapsed lease and buries it in its next statement; the holder's late
    heartbeat may extend the lapsed lease between the two. A sweep picks and buries in one
    transaction: the same burial by it took a live lease."""
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY, cancelled=True)
    claimed = Task()
    claimed.claim(0.1, "w1").change(0.2, cancel_requested=True)
    claimed.beat(2.5).bury(2.6)  # lapsed at 2.1, extended at 2.5 to 4.5
    assert failed(judged(claimed, end, requests=[])) == []
    swept = Task()
    swept.claim(0.1, "w1").change(0.2, cancel_requested=True)
    swept.beat(2.5).bury(2.6, actor="sweep")
    assert failed(judged(swept, end, requests=[])) == ["H1"]
    on_time = Task()  # a beat before the lease lapsed: nothing may bury it until 3.5
    on_time.claim(0.1, "w1").change(0.2, cancel_requested=True).beat(1.5).bury(2.6)
    assert failed(judged(on_time, end, requests=[])) == ["H1"]


def test_h1_a_heartbeat_written_after_the_lapse_lets_a_claims_burial_follow():
    """A heartbeat whose statement began while the lease was live (now() 2.0, before the 2.1
    deadline) but was written after it lapsed (at 2.3, after waiting for another row's lock):
    a claim may have picked the lease lapsed at 2.2, before that write, and buries it after."""
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY, cancelled=True)
    for written, codes in ((2.3, []), (2.05, ["H1"])):
        t = Task()
        t.claim(0.1, "w1").change(0.2, cancel_requested=True).beat(2.0)
        t.changes[-1] = dataclasses.replace(t.changes[-1], clock=at(written))
        t.bury(2.4)
        assert failed(judged(t, end, requests=[])) == codes


def test_f2_a_stale_retry_applied_to_a_task_nobody_holds_fails():
    """w1 was lost; w2 claimed the task and retried it (no lease now); w1's late retry under
    epoch 1 is applied by a store without the retry's epoch guard. The task is pending again,
    so the end state shows nothing: the history does."""
    t = Task()
    t.claim(0.1, "w1").claim(2.2, "w2").retry(2.5, delay=0.4)
    t.change(3.0, settled_epoch=1, settled_by="w1", visible_at=at(3.4))  # w1's stale retry
    t.claim(3.5, "w3").ack(4.0)
    figures = judged(t, requests=[delivered(3.9)])
    assert failed(figures) == ["F2"]
    assert "naming epoch 1 was applied" in figures.stale_decisions.samples[0]
    fenced = Task()  # the store refused it: no change recorded
    fenced.claim(0.1, "w1").claim(2.2, "w2").retry(2.5, delay=0.4).claim(3.5, "w3").ack(4.0)
    assert failed(judged(fenced, requests=[delivered(3.9)])) == []


def test_h4_an_epoch_that_does_not_grow_after_a_requeue_fails():
    t = Task(max_attempts=1)
    t.claim(0.1, "w1").bury(2.2).requeue(3.0, new_epoch=False)
    t.claim(3.1, "w2", epoch=1).ack(3.5)  # epoch from attempts: 1 again
    assert failed(judged(t, requests=[delivered(3.4)])) == ["H4"]


def test_h5_a_done_task_whose_answer_never_reached_a_worker_fails():
    t = clean()
    dropped = dataclasses.replace(delivered(4.2), delivered_status=None, delivered_effect=None)
    assert failed(judged(t, requests=[dropped])) == ["H5"]


def test_h5_an_ack_before_the_answer_was_delivered_fails():
    assert failed(judged(clean(), requests=[delivered(4.8)])) == ["H5"]


def test_h5_a_result_naming_no_effect_of_the_service_fails():
    assert failed(judged(clean(), effects={}, requests=[delivered(4.2)])) == ["H5"]
    fake = done_end({"status": 201, "replay": False, "effect_id": None})
    assert failed(judged(clean(), fake, requests=[delivered(4.2)])) == ["H5"]


def test_h5_two_effects_answered_for_one_key_fail():
    twice = [delivered(4.2), delivered(4.3, effect=EFFECT + 1)]
    assert failed(judged(clean(), requests=twice)) == ["H5"]


def test_h5_a_replay_of_the_same_effect_is_a_success():
    replayed = done_end({"status": 200, "replay": True, "effect_id": EFFECT})
    assert failed(judged(clean(), replayed, requests=[delivered(4.2, status=200)])) == []


def test_d1_a_task_dead_with_attempts_left_fails():
    t = Task(max_attempts=3)
    t.claim(0.1, "w1").bury(2.2)  # buried after one claim of three: not designed, not cancelled
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY)
    assert failed(judged(t, end, requests=[])) == ["D1"]
    designed = dataclasses.replace(end, designed_to_fail=True)
    cancelled = dataclasses.replace(end, cancelled=True)
    assert failed(judged(t, designed, requests=[])) == []
    assert failed(judged(t, cancelled, requests=[])) == []


def test_d1_a_task_dead_after_every_attempt_holds():
    t = Task(max_attempts=2)
    t.claim(0.1, "w1").claim(2.2, "w2").bury(4.3)
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY)
    assert failed(judged(t, end, requests=[])) == []


@pytest.mark.parametrize("code", ["H1", "H2", "H3", "H4", "H5", "D1"])
def test_each_history_invariant_fails_the_verdict(code: str):
    figures = Figures(
        tasks_enqueued=1,
        effects_written=1,
        tasks_done=1,
        duplicate_effects=0,
        done_without_effect=0,
        still_pending=0,
        dead_worker_lost=0,
        dead_poison=0,
        dead_other=0,
        fenced_writes=1,
    )
    histories = {
        "H1": (Task().claim(0.1, "w1").claim(1.0, "w2").ack(1.5), [delivered(1.4)]),
        "H2": (Task(delay=1.0).claim(0.5, "w1").ack(0.9), [delivered(0.8)]),
        "H3": (
            Task(max_attempts=1).claim(0.1, "w1").claim(2.2, "w2").ack(2.5),
            [delivered(2.4)],
        ),
        "H4": (
            Task(max_attempts=1)
            .claim(0.1, "w1")
            .bury(2.2)
            .requeue(3.0, new_epoch=False)
            .claim(3.1, "w2", epoch=1)
            .ack(3.5),
            [delivered(3.4)],
        ),
        "H5": (clean(), []),
        "D1": (Task().claim(0.1, "w1").bury(2.2), []),
    }
    task, requests = histories[code]
    end = TaskEnd(state="dead", kind="chaos.effect", key=KEY) if code == "D1" else None
    verdict = judge(figures, history=judged(task, end, requests=requests))
    assert verdict.failed_codes() == [code]
