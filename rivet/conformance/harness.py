"""The Harness a test suite builds per store, the check registry, and helpers the checks share."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from rivet.stores.base import Store
from rivet.validation import build_spec
from rivet.values import HANDLER_ERROR_SUFFIX, ClaimBatch, Claimed, TaskRecord, ending

Check = Callable[["Harness"], None]

#: Lease time-to-live the checks claim with; every clock step they take is far from it.
TTL = 30.0
#: Longer lease for checks with real threads, so no lease lapses while they run.
LONG_TTL = 600.0

CHECKS: dict[str, Check] = {}
NEEDS: dict[str, frozenset[str]] = {}


def _close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


@dataclass(frozen=True, kw_only=True)
class Harness:
    """One store under test and the levers the checks need around it.

    ``advance(secs)`` moves the store's notion of now forward (a fake clock, or every stored
    timestamp shifted back). ``atomic()`` opens the caller's transaction that an enqueue joins,
    or is None when the store does not join one. ``thread_exit`` runs at the end of every
    thread a check starts (the default closes that thread's Django connections).
    """

    store: Store
    advance: Callable[[float], None]
    concurrent: bool = True
    atomic: Callable[[], AbstractContextManager[Any]] | None = None
    thread_exit: Callable[[], None] = field(default=_close_django_connections)

    @property
    def capabilities(self) -> frozenset[str]:
        """The optional abilities this harness offers: "atomic", "concurrent"."""
        offered = {"atomic": self.atomic is not None, "concurrent": self.concurrent}
        return frozenset(name for name, present in offered.items() if present)


def check(*needs: str) -> Callable[[Check], Check]:
    """Register ``check_<name>`` under ``<name>``; ``needs`` are capabilities it requires."""

    def register(fn: Check) -> Check:
        name = fn.__name__.removeprefix("check_")
        CHECKS[name] = fn
        NEEDS[name] = frozenset(needs)
        return fn

    return register


def names_for(capabilities: frozenset[str] | set[str]) -> list[str]:
    """Names of the checks a store with these capabilities must pass, in registry order."""
    return [name for name in CHECKS if NEEDS[name] <= set(capabilities)]


def checks_for(h: Harness) -> Iterator[tuple[str, Check]]:
    """(name, check) for every check that applies to this harness."""
    for name in names_for(h.capabilities):
        yield name, CHECKS[name]


# -- helpers the checks share ------------------------------------------------------------------


def fresh_queue() -> str:
    """A queue name no other check uses, so checks can share one store."""
    return f"cf-{uuid.uuid4().hex[:12]}"


def enqueue(h: Harness, queue: str, kind: str = "cf.noop", **fields: Any) -> int:
    """Validate and enqueue one task; return its id."""
    return h.store.task_enqueue(build_spec(queue=queue, kind=kind, **fields)).task_id


def claim_batch(
    h: Harness, *queues: str, owner: str = "w1", limit: int = 10, ttl: float = TTL
) -> ClaimBatch:
    return h.store.task_claim(queues=list(queues), owner=owner, limit=limit, lease_ttl=ttl)


def claim(
    h: Harness, *queues: str, owner: str = "w1", limit: int = 10, ttl: float = TTL
) -> list[Claimed]:
    """Claim from the queues in order; return the tasks leased."""
    return claim_batch(h, *queues, owner=owner, limit=limit, ttl=ttl).claimed


def claim_one(h: Harness, queue: str, owner: str = "w1", ttl: float = TTL) -> Claimed:
    """Claim exactly one task, failing the check when there is none."""
    got = claim(h, queue, owner=owner, limit=1, ttl=ttl)
    expect_eq(len(got), 1, f"tasks leased by a claim of limit 1 on {queue!r}")
    return got[0]


def get(h: Harness, task_id: int) -> TaskRecord:
    """A task that must exist."""
    task = h.store.task_get(task_id)
    expect(task is not None, f"task {task_id} should exist, task_get returned None")
    assert task is not None  # expect() raised otherwise
    return task


def ids(tasks: list[Claimed] | list[TaskRecord]) -> list[int]:
    return [t.task_id if isinstance(t, Claimed) else t.id for t in tasks]


def count_all(h: Harness, queue: str | None = None) -> int:
    return len(h.store.task_list(queue=queue, limit=1_000_000))


def expect(condition: bool, message: str) -> None:
    """Fail the check with ``message`` unless ``condition`` holds (never stripped by -O)."""
    if not condition:
        raise AssertionError(message)


def expect_eq(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise AssertionError(f"{what}: expected {expected!r}, got {actual!r}")


def expect_raises(exc_type: type[BaseException], fn: Callable[[], Any], what: str) -> Any:
    """Call ``fn``; it must raise ``exc_type``. Return the exception."""
    try:
        fn()
    except exc_type as exc:
        return exc
    raise AssertionError(f"{what}: expected {exc_type.__name__} to be raised, nothing was")


def in_threads(h: Harness, count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads released together; return results by index."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[index] = work(index)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(exc)
        finally:
            h.thread_exit()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    expect(not any(t.is_alive() for t in threads), f"{count} threads did not finish in 300s")
    if errors:
        raise errors[0]
    return results


def bury(h: Harness, queue: str, **fields: Any) -> int:
    """Enqueue a one-attempt task into an otherwise idle queue and bury it; return its id."""
    task_id = enqueue(h, queue, max_attempts=1, **fields)
    leased = claim_one(h, queue)
    expect_eq(leased.task_id, task_id, "the task claimed to be buried")
    h.store.task_bury(leased.lease, ending("poison", HANDLER_ERROR_SUFFIX))
    expect_eq(get(h, task_id).state, "dead", "state after burying the only attempt")
    return task_id
