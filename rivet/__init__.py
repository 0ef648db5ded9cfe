"""rivet: a Django task queue with effectively-once side effects.

The public API is imported lazily, so ``import rivet`` works before Django is set up. The
rest of rivet's errors are in ``rivet.errors``; the test fake is ``rivet.testing``.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("django-rivet")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "enqueue": "rivet.producer",
    "enqueue_many": "rivet.producer",
    "get_task": "rivet.producer",
    "cancel": "rivet.producer",
    "aenqueue": "rivet.producer",
    "aenqueue_many": "rivet.producer",
    "aget_task": "rivet.producer",
    "acancel": "rivet.producer",
    "job": "rivet.jobs",
    "cron": "rivet.schedules.declare",
    "JobContext": "rivet.jobs",
    "EnqueueResult": "rivet.values",
    "TaskRecord": "rivet.values",
    "CancelOutcome": "rivet.values",
    "RivetError": "rivet.errors",
    "InvalidInput": "rivet.errors",
    "IdempotencyMismatch": "rivet.errors",
    "LeaseLost": "rivet.errors",
    "Permanent": "rivet.errors",
}

__all__ = [
    "__version__",
    "enqueue",
    "enqueue_many",
    "get_task",
    "cancel",
    "aenqueue",
    "aenqueue_many",
    "aget_task",
    "acancel",
    "job",
    "cron",
    "JobContext",
    "EnqueueResult",
    "TaskRecord",
    "CancelOutcome",
    "RivetError",
    "InvalidInput",
    "IdempotencyMismatch",
    "LeaseLost",
    "Permanent",
]

if TYPE_CHECKING:
    from rivet.errors import IdempotencyMismatch, InvalidInput, LeaseLost, Permanent, RivetError
    from rivet.jobs import JobContext, job
    from rivet.producer import (
        acancel,
        aenqueue,
        aenqueue_many,
        aget_task,
        cancel,
        enqueue,
        enqueue_many,
        get_task,
    )
    from rivet.schedules.declare import cron
    from rivet.values import CancelOutcome, EnqueueResult, TaskRecord

else:  # a type checker sees the imports above; a name that is not one is a type error

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'rivet' has no attribute {name!r}")
        value = getattr(import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
