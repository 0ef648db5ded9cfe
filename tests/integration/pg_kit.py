"""Helpers the PostgreSQL store tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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
