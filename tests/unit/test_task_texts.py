"""The texts every store writes are composed once, in rivet.values and rivet.decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from rivet.decisions import cancelled, failed, failed_permanently, succeeded
from rivet.values import (
    CANCELLED_SUFFIX,
    HANDLER_ERROR_SUFFIX,
    PERMANENT_SUFFIX,
    WORKER_LOST_SUFFIX,
    Claimed,
    claim_burial,
    error_at,
    history_entry,
)


def claimed(attempt: int = 1, max_attempts: int = 3) -> Claimed:
    return Claimed(
        task_id=7, queue="q", kind="k", payload=None, idem_key=None, attempt=attempt,
        max_attempts=max_attempts, epoch=2, owner="w",
    )  # fmt: skip


def test_error_at_has_one_shape_whatever_the_instant():
    whole_second = datetime(2026, 1, 1, tzinfo=UTC)
    assert error_at(whole_second) == "2026-01-01T00:00:00.000000+00:00"
    paris = timezone(timedelta(hours=1))
    assert error_at(datetime(2026, 1, 1, 1, 0, 0, 123000, paris)) == (
        "2026-01-01T00:00:00.123000+00:00"
    )
    entry = history_entry(2, whole_second, "E")
    assert entry == {"attempt": 2, "at": "2026-01-01T00:00:00.000000+00:00", "error": "E"}


def test_each_decision_carries_the_text_a_cancel_mark_turns_it_into():
    assert succeeded(claimed(), 1).cancelled_error == CANCELLED_SUFFIX
    assert failed(claimed(), "E: flaky", 1.0).cancelled_error == CANCELLED_SUFFIX
    last = failed(claimed(attempt=3), "E: flaky", 1.0)
    assert last.cancelled_error == last.error == f"E: flaky; {HANDLER_ERROR_SUFFIX}"
    permanent = failed_permanently(claimed(), "E: bad")
    assert permanent.cancelled_error == f"E: bad; {PERMANENT_SUFFIX}"
    assert cancelled(claimed()).cancelled_error == CANCELLED_SUFFIX


def test_a_claim_burial_keeps_the_earlier_reason():
    assert claim_burial("", False) == WORKER_LOST_SUFFIX
    assert claim_burial("E: one", False) == f"E: one; {WORKER_LOST_SUFFIX}"
    assert claim_burial("E: one", True) == f"E: one; {CANCELLED_SUFFIX}"
