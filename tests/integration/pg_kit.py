"""Helpers the PostgreSQL store tests share."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
from django.db import connections

from rivet.validation import build_spec
from rivet.values import TaskSpec


def spec(queue: str, kind: str = "pg.noop", **fields: Any) -> TaskSpec:
    return build_spec(queue=queue, kind=kind, **fields)


def on_other_connection(work: Callable[[], Any]) -> Any:
    """Run ``work`` on a thread of its own, hence on its own database connection."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "work on the other connection did not finish"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@contextlib.contextmanager
def a_waiting_worker(queues: Sequence[str], alias: str = "default") -> Iterator[None]:
    """A session of its own that waits on ``queues`` (the wake-up gate's waiter locks, as an
    idle worker's loop holds them) for the ``with`` block: enqueues on them notify. A session
    never conflicts with its own locks, so it cannot be the producer's."""
    params = connections[alias].get_connection_params()
    for django_only in ("cursor_factory", "context"):
        params.pop(django_only, None)
    with psycopg.connect(**params, autocommit=True) as waiter:
        waiter.execute("SELECT rivet_wait_hold(%s::text[], true)", [list(queues)])
        yield
