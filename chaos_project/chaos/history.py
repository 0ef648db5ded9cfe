"""The history of a chaos run: every change to every task row, and every effect request.

The verifier's first invariants (S1, S2, L1, C1, F2) judge the end state. An extra, early or
overlapping execution leaves no trace there: the idempotency key turns it into a replay. So the
harness records the whole history of the run in the queue database and judges that too.

Task rows. For the run, the harness installs a trigger on ``rivet_task`` (``install``) that
copies every insert and update of a row of the run's queue into ``chaos_task_history``, with
the row before and after the change, the writing transaction's ``now()`` (the time the store's
own statements compare ``visible_at`` with) and ``clock_timestamp()``; the trigger is dropped
when the run ends (``remove``), so nothing is added to the store's statements or to a
production database. For one task, the rows' ``seq`` order is the order of the changes: each
change holds the task's row lock from its update to its commit, and the sequence value is
drawn under that lock. What each change was (an enqueue, a claim, a heartbeat, an ack, a
retry, a burial, a cancel mark, a requeue) is read from the before and after images
(``classify``), not from what the store meant to do, so a store that writes the wrong thing is
seen writing it.

Operator actions. The harness acts on the queue as an operator would (a cancel, a requeue, a
sweep, through the store's public methods) on its own connection, and names the action for the
duration in the session setting ``chaos.actor`` (``acting``); the trigger copies it into the
row's ``actor`` (empty for the workers' changes). So the history knows which change an
operator's requeue made, whatever the store wrote, and what the task was before it: a requeue
of a task that was not dead is seen even when its row looks like a heartbeat's.

Effect requests. The workers reach the effect service through the harness's proxy
(``chaos_project.chaos.proxy``), which records every ``POST /effects``: its key, each answer the
service gave (two for a duplicated request), and what the worker got (the answer, or a broken
connection). The harness writes them to ``chaos_effect_history`` after the chaos.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, connections

HISTORY_TABLE = "chaos_task_history"
EFFECT_TABLE = "chaos_effect_history"
TRIGGER = "chaos_task_history_trigger"
FUNCTION = "chaos_task_history_record"

#: The columns copied from the row before (old_*) and after (new_*) each change.
COPIED = (
    ("state", "text"),
    ("attempts", "integer"),
    ("lease_epoch", "bigint"),
    ("lease_owner", "text"),
    ("visible_at", "timestamptz"),
    ("settled_epoch", "bigint"),
    ("settled_by", "text"),
    ("cancel_requested", "boolean"),
)

_COLUMNS = ",\n    ".join(
    f"{side}_{name} {kind}" for side in ("old", "new") for name, kind in COPIED
)
CREATE_TABLES = f"""
CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (
    seq bigserial PRIMARY KEY,
    task_id bigint NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    max_attempts integer NOT NULL,
    inserted boolean NOT NULL,
    tx_now timestamptz NOT NULL,
    clock timestamptz NOT NULL,
    new_result jsonb,
    actor text NOT NULL DEFAULT '',
    {_COLUMNS}
);
ALTER TABLE {HISTORY_TABLE} ADD COLUMN IF NOT EXISTS actor text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS {HISTORY_TABLE}_task ON {HISTORY_TABLE} (task_id, seq);
CREATE TABLE IF NOT EXISTS {EFFECT_TABLE} (
    seq bigserial PRIMARY KEY,
    key text NOT NULL,
    sent_at timestamptz NOT NULL,
    fault text NOT NULL,
    answers jsonb NOT NULL,
    delivered_status integer,
    delivered_effect bigint,
    delivered_at timestamptz
)
"""
EMPTY_TABLES = f"TRUNCATE {HISTORY_TABLE}, {EFFECT_TABLE} RESTART IDENTITY"
#: The session setting naming the operator action under way (see ``acting``).
ACTOR_SETTING = "chaos.actor"
_ACTOR = f"coalesce(current_setting('{ACTOR_SETTING}', true), '')"

_OLD = ", ".join(f"OLD.{name}" for name, _ in COPIED)
_NEW = ", ".join(f"NEW.{name}" for name, _ in COPIED)
_NULLS = ", ".join("NULL" for _ in COPIED)
_TARGETS = ", ".join(f"{side}_{name}" for side in ("old", "new") for name, _ in COPIED)
CREATE_TRIGGER = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.queue = TG_ARGV[0] THEN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {HISTORY_TABLE} (
                task_id, queue, kind, max_attempts, inserted, tx_now, clock, new_result, actor,
                {_TARGETS}
            ) VALUES (
                NEW.id, NEW.queue, NEW.kind, NEW.max_attempts, true, now(), clock_timestamp(),
                NULL, {_ACTOR}, {_NULLS}, {_NEW}
            );
        ELSE
            INSERT INTO {HISTORY_TABLE} (
                task_id, queue, kind, max_attempts, inserted, tx_now, clock, new_result, actor,
                {_TARGETS}
            ) VALUES (
                NEW.id, NEW.queue, NEW.kind, NEW.max_attempts, false, now(), clock_timestamp(),
                CASE WHEN NEW.state = 'done' AND OLD.state <> 'done' THEN NEW.result END,
                {_ACTOR}, {_OLD}, {_NEW}
            );
        END IF;
    END IF;
    RETURN NULL;
END
$body$;
DROP TRIGGER IF EXISTS {TRIGGER} ON rivet_task;
CREATE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE ON rivet_task
    FOR EACH ROW EXECUTE FUNCTION {FUNCTION}(%(queue)s)
"""
DROP_TRIGGER = f"""
DROP TRIGGER IF EXISTS {TRIGGER} ON rivet_task;
DROP FUNCTION IF EXISTS {FUNCTION}()
"""


def install(queue: str, *, using: str = "default") -> None:
    """Create the history tables (emptied) and the trigger that fills the task history."""
    with connections[using].cursor() as cursor:
        cursor.execute(CREATE_TABLES)
        cursor.execute(EMPTY_TABLES)
        # A trigger's arguments are literals in its definition, not parameters: quoted here.
        quoted = "'" + queue.replace("'", "''") + "'"
        cursor.execute(CREATE_TRIGGER.replace("%(queue)s", quoted))


@contextmanager
def acting(actor: str, *, using: str = "default") -> Iterator[None]:
    """Name the operator action ``actor`` in the history of every change this connection makes
    meanwhile (the session setting, set before and cleared after; a connection the server lost
    meanwhile loses it with its session)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, false)", [ACTOR_SETTING, actor])
    try:
        yield
    finally:
        try:
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT set_config(%s, '', false)", [ACTOR_SETTING])
        except DatabaseError:
            pass  # the session is gone, and its setting with it


def remove(*, using: str = "default") -> None:
    """Drop the trigger (the tables stay, for the verifier and a later look, until the next
    run empties them)."""
    with connections[using].cursor() as cursor:
        cursor.execute(DROP_TRIGGER)


def installed(*, using: str = "default") -> bool:
    """Whether the history tables exist (a database no run recorded has none)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [HISTORY_TABLE])
        return bool(cursor.fetchone()[0])


# -- reading -----------------------------------------------------------------------------------

CLAIM = "claim"
HEARTBEAT = "heartbeat"
ACK = "ack"
RETRY = "retry"
BURY = "bury"
CANCEL = "cancel"
REQUEUE = "requeue"
ENQUEUE = "enqueue"
OTHER = "other"
#: The operator's sweep: an actor (``acting``), not a kind of change (it buries).
SWEEP = "sweep"


@dataclass(frozen=True, kw_only=True)
class Image:
    """A task row's lease fields at one moment."""

    state: str
    attempts: int
    epoch: int
    owner: str | None
    visible_at: datetime
    settled_epoch: int | None = None
    settled_by: str | None = None
    cancel_requested: bool = False


@dataclass(frozen=True, kw_only=True)
class Change:
    """One change of one task row: before (None for the insert) and after."""

    seq: int
    task: int
    kind: str
    max_attempts: int
    tx_now: datetime
    """The writing transaction's now(): what its statement compared visible_at with."""
    old: Image | None
    new: Image
    result: object = None
    """The row's result when this change made it done."""
    actor: str = ""
    """The operator action that made the change (``acting``: "cancel", "requeue", "sweep");
    empty for a worker's."""
    clock: datetime | None = None
    """clock_timestamp() when the change was written (after any wait for a row lock); None
    where not known (then tx_now stands for it)."""

    @property
    def what(self) -> str:
        return classify(self)


def classify(change: Change) -> str:
    """What a change did, read from the row before and after it (see the module's docstring);
    a change an operator's requeue made is a requeue, whatever it wrote.

    A claim is a change that leaves or makes a task leased under another lease than before:
    a new epoch, a new owner or one more attempt, with an owner. A claim of a finished task
    (its state unchanged) is a claim too: the attempts invariant refuses it.
    """
    old, new = change.old, change.new
    if old is None:
        return ENQUEUE
    if change.actor == REQUEUE or (old.state != "pending" and new.state == "pending"):
        return REQUEUE
    settled = (new.settled_epoch, new.settled_by) != (old.settled_epoch, old.settled_by)
    leased_again = new.owner is not None and (
        new.epoch != old.epoch or new.owner != old.owner or new.attempts != old.attempts
    )
    if old.state == "pending" and new.state == "done":
        return ACK
    if old.state == "pending" and new.state == "dead":
        return BURY
    if old.state == "pending" and settled:
        return RETRY
    if leased_again:
        return CLAIM
    if new.cancel_requested and not old.cancel_requested:
        return CANCEL
    if old.state == "pending" and (new.visible_at != old.visible_at or new.owner is not None):
        return HEARTBEAT  # under the same lease: its deadline moved (or, wrongly, did not)
    return OTHER


def read_changes(*, queue: str, using: str = "default") -> list[Change]:
    """Every recorded change of the queue's tasks, in order (none when no history exists)."""
    if not installed(using=using):
        return []
    names = [name for name, _ in COPIED]
    columns = ", ".join(f"{side}_{name}" for side in ("old", "new") for name in names)
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT seq, task_id, kind, max_attempts, inserted, tx_now, new_result, actor, clock, "
            f"{columns} "
            f"FROM {HISTORY_TABLE} WHERE queue = %s ORDER BY seq",
            [queue],
        )
        rows = cursor.fetchall()
    changes = []
    width = len(names)
    for row in rows:
        seq, task, kind, max_attempts, inserted, tx_now, result, actor, clock = row[:9]
        old_values, new_values = row[9 : 9 + width], row[9 + width :]
        old = None if inserted else Image(**dict(_image_fields(old_values)))
        new = Image(**dict(_image_fields(new_values)))
        changes.append(
            Change(
                seq=seq,
                task=task,
                kind=kind,
                max_attempts=max_attempts,
                tx_now=tx_now,
                old=old,
                new=new,
                result=parse_json(result),
                actor=actor or "",
                clock=clock,
            )
        )
    return changes


def _image_fields(values: Iterable) -> Iterable[tuple[str, object]]:
    names = ("state", "attempts", "epoch", "owner", "visible_at", "settled_epoch", "settled_by")
    values = list(values)
    yield from zip(names, values[:7], strict=True)
    yield "cancel_requested", bool(values[7])


def parse_json(value: object) -> object:
    """A jsonb value as Python (Django's cursor may hand it over as text)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True, kw_only=True)
class EffectRequest:
    """One ``POST /effects`` a worker sent through the proxy."""

    key: str
    sent_at: datetime
    fault: str
    """The proxy's action: "" (forwarded), delay, drop, reset or dup."""
    answers: tuple[tuple[int, bool, int | None], ...]
    """Each answer the service gave: (status, replay, effect id)."""
    delivered_status: int | None
    """The status the worker got; None when its connection broke instead."""
    delivered_effect: int | None = None
    delivered_at: datetime | None = None


def write_effect_requests(records: Iterable[EffectRequest], *, using: str = "default") -> int:
    """Store the proxy's records beside the task history; how many."""
    rows = [
        (
            r.key,
            r.sent_at,
            r.fault,
            json.dumps([list(a) for a in r.answers]),
            r.delivered_status,
            r.delivered_effect,
            r.delivered_at,
        )
        for r in records
    ]
    if not rows:
        return 0
    with connections[using].cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {EFFECT_TABLE} (key, sent_at, fault, answers, delivered_status, "
            "delivered_effect, delivered_at) VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s)",
            rows,
        )
    return len(rows)


def read_effect_requests(*, using: str = "default") -> list[EffectRequest] | None:
    """The recorded effect requests; None when none were recorded (no proxy in front)."""
    if not installed(using=using):
        return None
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"SELECT key, sent_at, fault, answers, delivered_status, delivered_effect, "
            f"delivered_at FROM {EFFECT_TABLE} ORDER BY seq"
        )
        rows = cursor.fetchall()
    if not rows:
        return None
    return [
        EffectRequest(
            key=key,
            sent_at=sent_at,
            fault=fault,
            answers=tuple(tuple(a) for a in parse_json(answers)),  # type: ignore[misc]
            delivered_status=status,
            delivered_effect=effect,
            delivered_at=delivered_at,
        )
        for key, sent_at, fault, answers, status, effect, delivered_at in rows
    ]
