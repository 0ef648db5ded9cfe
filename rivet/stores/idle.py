"""A bound on how long a transaction rivet opens may sit idle, so a stalled process frees its locks.

A process that stops between two statements of a transaction (SIGSTOP, a paused VM, a debugger,
a long swap storm) keeps its locks until its connection dies, and TCP keepalive may take hours
to notice. A scheduler pass holds its schedules' rows that way; an operator's cancel or requeue
holds a task's row. Every transaction rivet opens itself on PostgreSQL therefore starts with
``set_config('idle_in_transaction_session_timeout', …, true)``: local to that transaction, so it
never touches the caller's own transactions, the session, or a pooled server connection. When
the process sits idle in it longer than ``RIVET['IDLE_IN_TRANSACTION_TIMEOUT_SECS']``, the
server ends its session and rolls the transaction back; the locks go with it. The stalled
process finds its connection closed when it wakes and starts again from a new one.

Inside a caller's ``transaction.atomic()`` nothing is set: that transaction is the caller's.
SQLite has no server to end a session; its write lock is bounded by the other side's
``timeout`` (busy timeout) only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction

from rivet.conf import rivet_settings

__all__ = ["bounded_atomic", "bound_transaction", "idle_timeout_secs", "set_idle_timeout"]

SET_BOUND = "SELECT set_config('idle_in_transaction_session_timeout', %s, true)"

_override: list[float] = []


def idle_timeout_secs() -> float:
    """The bound in force: the worker's option if it set one, else the setting (0: none)."""
    if _override:
        return _override[-1]
    return float(rivet_settings.IDLE_IN_TRANSACTION_TIMEOUT_SECS or 0)


def set_idle_timeout(secs: float) -> None:
    """Make ``secs`` this process's bound (the worker's ``--idle-in-transaction-timeout-secs``)."""
    _override[:] = [secs]


def bound_transaction(cursor: Any, vendor: str) -> None:
    """Put the bound on the transaction ``cursor`` has just begun (PostgreSQL only)."""
    secs = idle_timeout_secs()
    if vendor == "postgresql" and secs:
        cursor.execute(SET_BOUND, [f"{max(1, round(secs * 1000))}ms"])


@contextmanager
def bounded_atomic(using: str) -> Iterator[None]:
    """``transaction.atomic(using=…)`` with the idle bound when it is the outermost block."""
    connection = connections[using]
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=using):
        if outermost:
            with connection.cursor() as cursor:
                bound_transaction(cursor, connection.vendor)
        yield
