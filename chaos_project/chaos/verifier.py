"""The verifier: reads the queue database and the effect database and checks five invariants.

- S1 no duplicate effects: no task has more than one effect row. A chaos task's effect names
  its task in its body (``chaos_task``), so a duplicate counts even when the worker sent a
  wrong key with it; any other effect is known by its key.
- S2 no task done without its effect: every done effect task's key has an effect row.
- L1 nothing left pending: every task ended done or dead.
- C1 a cancel is never overruled: no task an operator's cancel marked (``cancel_requested``)
  ended done, nor dead with the result of the ack the cancel turned into a burial. The harness
  cancels leased tasks during the run; their worker may decide an ack before its heartbeat sees
  the mark, and the store must bury the task anyway.
- F2 the fence fired and was handled, in three parts:
  - per task: for every task a stopped worker held and another worker claimed while it slept,
    that worker's late write to it was refused and recorded (every such task, not any one;
    the run's zombie watch reads ``rivet_fenced_write`` and hands over the count that was not);
  - no stale write applied: every finished task carries, in ``settled_epoch`` and
    ``settled_by``, the epoch and owner of the decision that finished it, and they are the
    epoch (and owner) the task held. A stale ack that went through the fence shows here even
    when something else was fenced;
  - at least one fenced write was recorded. Zero fails the run: no worker ever wrote with a
    lease it had lost, so the fencing token was never tested and the other lines describe a
    system that was not under the pressure claimed.
- T1 no tick fired twice and T2 no due tick missing, with schedules (``rivet_chaos
  --schedules N``): see ``chaos_project.chaos.ticks``.
- F2's history part: no decision applied under an epoch the row no longer held (a stale retry
  leaves its task pending, where the row check above cannot see it).
- H1 leases never overlap, H2 nothing runs early, H3 attempts are bounded, H4 epochs only grow,
  H5 every done effect task's answer was a success, D1 no task died unless designed to: read
  from the run's history, not its end state (``chaos_project.chaos.leases``).

Every figure is read from the two databases; none comes from what the harness intended.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.db import connections

from chaos_project.chaos import history as run_history
from chaos_project.chaos.leases import HistoryFigures, TaskEnd, judge_history
from chaos_project.chaos.ticks import TickFigures, read_ticks
from chaos_project.kit import queries
from chaos_project.kit.services import effect_connection
from rivet.values import CANCELLED_SUFFIX, HANDLER_ERROR_SUFFIX, WORKER_LOST_SUFFIX

#: Kinds whose handler makes an effect through the effect service, keyed by the task's key.
EFFECT_KINDS = ("chaos.effect", "effect")


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What the two databases hold after a run (one queue; the whole effect database)."""

    tasks_enqueued: int
    effects_written: int
    tasks_done: int
    duplicate_effects: int
    done_without_effect: int
    still_pending: int
    dead_worker_lost: int
    dead_poison: int
    dead_other: int
    fenced_writes: int
    dead_cancelled: int = 0
    done_cancelled: int = 0
    dead_not_designed: int = 0
    """Dead chaos tasks not designed to die (no designed failure, more than one attempt, not
    cancelled): reported, not a violation (ten lost attempts are possible, if unlikely)."""
    """Tasks an operator's cancel marked that ended done: C1."""
    stale_settled: int = 0
    """Finished tasks whose finishing write named another epoch or owner than the task held."""
    stale_samples: tuple[str, ...] = ()

    @property
    def dead_lettered(self) -> int:
        return self.dead_worker_lost + self.dead_poison + self.dead_cancelled + self.dead_other


@dataclass(frozen=True)
class Violation:
    code: str
    message: str
    part: str = ""
    """Which check of the invariant (F2: ``stale``, ``per task`` or ``none``)."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    figures: Figures
    violations: tuple[Violation, ...] = field(default=())
    ticks: TickFigures | None = None
    """T1 and T2, when the queue has chaos schedules."""
    history: HistoryFigures | None = None
    """H1-H5 and D1, when the run recorded its history."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def failed_codes(self) -> list[str]:
        return list(dict.fromkeys(v.code for v in self.violations))


def read_figures(*, queue: str, effect_database_url: str, using: str = "default") -> Figures:
    """Both databases' figures for ``queue``."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            queries.QUEUE_FIGURES,
            {
                "queue": queue,
                "lost": WORKER_LOST_SUFFIX,
                "poison": HANDLER_ERROR_SUFFIX,
                "cancelled": CANCELLED_SUFFIX,
            },
        )
        row = cursor.fetchone()
        enqueued, done, pending, lost, poison, dead, fenced, _, cancelled, done_cancelled = row[:10]
        dead_not_designed = row[10]
        cursor.execute(queries.DONE_EFFECT_KEYS, {"queue": queue, "kinds": list(EFFECT_KINDS)})
        done_keys = {row[0] for row in cursor.fetchall()}
        cursor.execute(queries.STALE_SETTLED, {"queue": queue})
        stale, samples = cursor.fetchone()
    with effect_connection(effect_database_url) as effect_db:
        written, duplicates = effect_db.execute(queries.EFFECT_FIGURES).fetchone()
        effect_keys = {row[0] for row in effect_db.execute(queries.EFFECT_KEYS)}
    return Figures(
        tasks_enqueued=enqueued,
        effects_written=written,
        tasks_done=done,
        duplicate_effects=duplicates,
        done_without_effect=len(done_keys - effect_keys),
        still_pending=pending,
        dead_worker_lost=lost,
        dead_poison=poison,
        dead_other=dead - lost - poison - cancelled,
        fenced_writes=fenced,
        dead_cancelled=cancelled,
        done_cancelled=done_cancelled,
        dead_not_designed=dead_not_designed,
        stale_settled=stale,
        stale_samples=tuple(samples),
    )


def judge(
    figures: Figures,
    *,
    drain_note: str = "",
    unfenced_zombies: int = 0,
    ticks: TickFigures | None = None,
    history: HistoryFigures | None = None,
) -> Verdict:
    """The violations of S1, S2, L1, F2 and C1 in ``figures`` (T1, T2 in ``ticks``; H1-H5 and
    D1 in ``history``), each with a message saying why."""
    found = []
    if figures.duplicate_effects:
        found.append(
            Violation(
                "S1",
                f"{figures.duplicate_effects} duplicate effect(s): a key has more than one "
                "effect row, so a redelivery made the effect again",
            )
        )
    if figures.done_without_effect:
        found.append(
            Violation(
                "S2",
                f"{figures.done_without_effect} task(s) are done but the effect database has "
                "no effect for their key: an ack was written for an effect that never happened",
            )
        )
    if figures.still_pending:
        found.append(
            Violation(
                "L1",
                f"{figures.still_pending} task(s) still pending: the queue did not drain"
                + (f" ({drain_note})" if drain_note else ""),
            )
        )
    if figures.done_cancelled:
        found.append(
            Violation(
                "C1",
                f"{figures.done_cancelled} task(s) an operator cancelled while they were leased "
                "ended done, or dead with the result of an ack: a decision of their worker "
                "overruled the cancel",
            )
        )
    if figures.stale_settled:
        found.append(
            Violation(
                "F2",
                f"{figures.stale_settled} finished task(s) were finished by a write naming "
                "another epoch or owner than the task held: a stale write went through the "
                "fence (" + "; ".join(figures.stale_samples) + ")",
                part="stale",
            )
        )
    if unfenced_zombies:
        found.append(
            Violation(
                "F2",
                f"{unfenced_zombies} zombie(s) woke after another worker had claimed their "
                "tasks, and for at least one of those tasks no refused write of theirs was "
                "recorded: a stale write went through the fence, or the woken worker never "
                "wrote",
                part="per task",
            )
        )
    elif figures.fenced_writes == 0:
        found.append(
            Violation(
                "F2",
                "no fenced write was recorded: no worker ever wrote with a lease it had lost, "
                "so the fencing token was never tested and the lines above describe a run "
                "without the pressure it claims to survive",
                part="none",
            )
        )
    found += tick_violations(ticks)
    found += history_violations(history)
    return Verdict(figures=figures, violations=tuple(found), ticks=ticks, history=history)


#: Each history invariant: its code, the HistoryFigures field, and what a violation means.
HISTORY_INVARIANTS = (
    (
        "H1",
        "overlapping",
        "claim(s) took a task while another worker's lease on it was live (by the claiming "
        "transaction's clock), or a live lease was ended by someone other than its holder "
        "(another worker's decision, an operator's sweep or requeue): two workers held one "
        "lease at once, or a worker lost one it still held",
    ),
    (
        "H2",
        "early",
        "claim(s) took a task before it was ready (its delay, run_at or retry backoff)",
    ),
    (
        "H3",
        "over_attempts",
        "claim(s) went past max_attempts in one life or took a cancelled task, or a done or "
        "dead task was claimed or changed",
    ),
    (
        "H3",
        "requeued_not_dead",
        "requeue(s) revived a task that was not dead (live: pending, leased or cancel-marked; "
        "or done): only a dead task is requeued",
    ),
    (
        "H4",
        "epochs_back",
        "change(s) gave a task an epoch not above every epoch it had before: a stale write "
        "of an earlier lease could match the new one",
    ),
    (
        "F2",
        "stale_decisions",
        "decision(s) were applied under an epoch the task no longer held (read from the "
        "history: an ack, retry or burial of a lease another claim had replaced, or a finished "
        "task's): a stale write went through the fence",
    ),
    (
        "H5",
        "bad_answers",
        "done effect task(s) have no successful answer from the effect service behind their "
        "ack (the result, the service's own record and what the worker was delivered)",
    ),
    (
        "D1",
        "dead_not_designed",
        "task(s) died that were neither cancelled nor designed to fail and still had "
        "attempts left in their life",
    ),
)


def history_violations(history: HistoryFigures | None) -> list[Violation]:
    """H1-H5, D1 and F2's history part (none when no history was recorded)."""
    if history is None:
        return []
    found = []
    for code, name, meaning in HISTORY_INVARIANTS:
        count = getattr(history, name)
        if count.n:
            part = "stale" if code == "F2" else ""
            text = f"{count.n} {meaning}{_named(tuple(count.samples))}"
            found.append(Violation(code, text, part=part))
    return found


def read_history(
    *,
    queue: str,
    effect_database_url: str,
    using: str = "default",
    log_dir: Path | None = None,
    lease_ttl: float | None = None,
) -> HistoryFigures | None:
    """The history invariants' figures, or None when the run recorded no history
    (``log_dir``: the run's worker logs, for the retries' decided backoffs; ``lease_ttl``: the
    workers' lease)."""
    changes = run_history.read_changes(queue=queue, using=using)
    if not changes:
        return None
    with connections[using].cursor() as cursor:
        cursor.execute(queries.TASK_ENDS, {"queue": queue, "cancelled": CANCELLED_SUFFIX})
        ends = {
            task_id: TaskEnd(
                state=state,
                kind=kind,
                key=key,
                designed_to_fail=designed,
                cancelled=cancelled,
                result=run_history.parse_json(result),
            )
            for task_id, state, kind, key, designed, cancelled, result in cursor.fetchall()
        }
    with effect_connection(effect_database_url) as effect_db:
        effects = dict(effect_db.execute(queries.EFFECT_IDS).fetchall())
    requests = run_history.read_effect_requests(using=using)
    delays = retry_delays(log_dir) if log_dir is not None else None
    return judge_history(
        changes,
        ends,
        effects=effects,
        requests=requests,
        retry_delays=delays,
        lease_ttl=lease_ttl,
    )


def retry_delays(log_dir: Path) -> dict[tuple[int, int], float]:
    """The backoff of every retry the workers logged (``retry`` lines), by (task, epoch)."""
    found: dict[tuple[int, int], float] = {}
    for log_path in sorted(log_dir.glob("chaos-w*.log")):
        with log_path.open("rb") as log:
            for raw in log:
                if b'"retry"' not in raw:
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(record, dict) or record.get("event") != "retry":
                    continue
                task, epoch, delay = record.get("task"), record.get("epoch"), record.get("retry_in")
                if isinstance(task, int) and isinstance(epoch, int) and isinstance(delay, float):
                    found[(task, epoch)] = delay
    return found


def tick_violations(ticks: TickFigures | None) -> list[Violation]:
    """T1 and T2 (none without schedules)."""
    if ticks is None:
        return []
    found = []
    if ticks.fired_twice or ticks.not_due:
        found.append(
            Violation(
                "T1",
                f"{ticks.fired_twice} tick(s) fired more than once and {ticks.not_due} task(s) "
                "are for a tick that was never due: a schedule's tick must be one task, "
                f"whoever enqueues it and however often{_named(ticks.t1_samples)}",
            )
        )
    if ticks.missing:
        found.append(
            Violation(
                "T2",
                f"{ticks.missing} of {ticks.due} tick(s) due during the chaos have no task: a "
                f"due tick was lost{_named(ticks.t2_samples)}",
            )
        )
    return found


def _named(samples: tuple[str, ...]) -> str:
    return f" ({'; '.join(samples)})" if samples else ""


def verify(
    *,
    queue: str,
    effect_database_url: str,
    using: str = "default",
    drain_note: str = "",
    unfenced_zombies: int = 0,
    ticks_until: datetime | None = None,
    log_dir: Path | None = None,
    lease_ttl: float | None = None,
) -> Verdict:
    """Read both databases and judge them (``unfenced_zombies``: from the run's own watch;
    ``ticks_until``: the end of the chaos, where T2's window ends)."""
    figures = read_figures(queue=queue, effect_database_url=effect_database_url, using=using)
    ticks = read_ticks(queue=queue, until=ticks_until, using=using)
    history = read_history(
        queue=queue,
        effect_database_url=effect_database_url,
        using=using,
        log_dir=log_dir,
        lease_ttl=lease_ttl,
    )
    return judge(
        figures,
        drain_note=drain_note,
        unfenced_zombies=unfenced_zombies,
        ticks=ticks,
        history=history,
    )
