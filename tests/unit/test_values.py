"""The values a worker makes per task, and a producer per enqueue, made without their
dataclass ``__init__``.

``Claimed.from_row``, ``JobContext.for_claimed`` and ``build_spec`` build their frozen
dataclasses with ``rivet.values.frozen_instance`` (one dict update instead of one
``object.__setattr__`` per field); these tests hold them to what the generated ``__init__``
makes.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading

import pytest

from rivet.jobs import JobContext, StopSignal
from rivet.validation import build_spec
from rivet.values import Claimed, Lease, TaskSpec, frozen_instance

ROW = {
    "id": 41,
    "queue": "mail",
    "kind": "billing.invoice",
    "payload": {"invoice_id": 42},
    "idem_key": "invoice-42",
    "attempts": 2,
    "max_attempts": 5,
    "lease_epoch": 7,
    "priority": -3,
    "trace_context": {"traceparent": "00-ab-cd-01"},
}


def made_by_init(claimed: Claimed) -> Claimed:
    return Claimed(**{f.name: getattr(claimed, f.name) for f in dataclasses.fields(Claimed)})


@pytest.mark.parametrize("trace_context", [{"traceparent": "00-ab-cd-01"}, None, "absent"])
def test_from_row_makes_what_the_dataclass_init_makes(trace_context):
    row = dict(ROW)
    if trace_context == "absent":
        del row["trace_context"]  # a row from a store without the column: None
    else:
        row["trace_context"] = trace_context
    claimed = Claimed.from_row(row, "host:1")
    expected = Claimed(
        task_id=41,
        queue="mail",
        kind="billing.invoice",
        payload={"invoice_id": 42},
        idem_key="invoice-42",
        attempt=2,
        max_attempts=5,
        epoch=7,
        owner="host:1",
        priority=-3,
        trace_context=None if trace_context == "absent" else trace_context,
    )
    assert claimed == expected == made_by_init(claimed)
    assert repr(claimed) == repr(expected)
    assert hash(claimed.lease) == hash(expected.lease)
    assert {f.name for f in dataclasses.fields(Claimed)} <= set(vars(claimed))
    with pytest.raises(dataclasses.FrozenInstanceError):
        claimed.epoch = 8  # type: ignore[misc]


def test_for_claimed_makes_what_the_dataclass_init_makes():
    claimed = Claimed.from_row(ROW, "host:1")
    stop = StopSignal()
    context = JobContext.for_claimed(claimed, stop)
    expected = JobContext(
        task_id=41,
        queue="mail",
        kind="billing.invoice",
        payload={"invoice_id": 42},
        attempt=2,
        max_attempts=5,
        idem_key="invoice-42",
        epoch=7,
        owner="host:1",
    )
    assert context == expected
    assert repr(context) == repr(expected)
    assert {f.name for f in dataclasses.fields(JobContext)} == set(vars(context))
    assert not context.should_stop
    stop.set("cancelled")
    assert context.should_stop and context.stop_reason == "cancelled"
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.attempt = 3  # type: ignore[misc]


def test_the_lease_is_built_once_and_equals_a_new_one():
    claimed = Claimed.from_row(ROW, "host:1")
    lease = claimed.lease
    assert lease is claimed.lease
    assert lease == Lease(task_id=41, epoch=7, owner="host:1")
    assert {lease: "held"}[Lease(task_id=41, epoch=7, owner="host:1")] == "held"
    # The kept lease rides along where the instance goes; equality ignores it.
    copied = pickle.loads(pickle.dumps(claimed))
    assert copied == claimed and copied.lease == lease
    assert claimed == made_by_init(claimed)  # a fresh instance has no lease kept yet


def test_threads_racing_to_the_first_lease_read_get_equal_leases():
    claimed = Claimed.from_row(ROW, "host:1")
    start = threading.Barrier(4)
    seen: list[Lease] = []

    def read() -> None:
        start.wait()
        seen.append(claimed.lease)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 and len(set(seen)) == 1
    assert claimed.lease == Lease(task_id=41, epoch=7, owner="host:1")


def test_frozen_instance_is_equal_to_the_init_for_any_frozen_dataclass_given_every_field():
    made = frozen_instance(Lease, task_id=1, epoch=2, owner="w")
    assert made == Lease(task_id=1, epoch=2, owner="w")
    assert hash(made) == hash(Lease(task_id=1, epoch=2, owner="w"))
    assert repr(made) == "Lease(task_id=1, epoch=2, owner='w')"


def test_build_spec_makes_what_the_task_spec_init_makes():
    # build_spec builds its TaskSpec with frozen_instance (an enqueue_many makes one per item).
    built = build_spec(queue="mail", kind="billing.invoice", payload={"b": 1, "a": [2]})
    by_init = TaskSpec(**{f.name: getattr(built, f.name) for f in dataclasses.fields(TaskSpec)})
    assert built == by_init and repr(built) == repr(by_init)
    assert built.payload_json == '{"a":[2],"b":1}'
    assert pickle.loads(pickle.dumps(built)) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.queue = "other"  # type: ignore[misc]
