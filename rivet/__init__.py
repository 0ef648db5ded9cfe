"""rivet: a Django task queue with effectively-once side effects.

The public API is imported lazily, so ``import rivet`` works before Django is set up.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("django-rivet")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

#: Public name -> the module that defines it. Every error class lives in rivet.errors.
_EXPORTS = {
    "enqueue": "rivet.producer",
    "enqueue_many": "rivet.producer",
    "get_task": "rivet.producer",
    "cancel": "rivet.producer",
    "job": "rivet.jobs",
    "JobContext": "rivet.jobs",
    "EnqueueResult": "rivet.values",
    "TaskRecord": "rivet.values",
    "CancelOutcome": "rivet.values",
    "RivetError": "rivet.errors",
    "InvalidInput": "rivet.errors",
    "InvalidName": "rivet.errors",
    "PayloadTooLarge": "rivet.errors",
    "IdempotencyMismatch": "rivet.errors",
    "UnknownJob": "rivet.errors",
    "UnknownKind": "rivet.errors",
    "StoreError": "rivet.errors",
    "StoreUnavailable": "rivet.errors",
    "LeaseLost": "rivet.errors",
    "Permanent": "rivet.errors",
    "RivetConfigError": "rivet.errors",
    "OptionError": "rivet.errors",
    "FailpointConfigError": "rivet.errors",
    "NotAFake": "rivet.errors",
    "EffectError": "rivet.errors",
    "EffectRejected": "rivet.errors",
    "EffectUnavailable": "rivet.errors",
    "DjangoTaskFailed": "rivet.errors",
    "DjangoTaskAbandoned": "rivet.errors",
}

__all__ = [
    "__version__",
    "enqueue",
    "enqueue_many",
    "get_task",
    "cancel",
    "job",
    "JobContext",
    "EnqueueResult",
    "TaskRecord",
    "CancelOutcome",
    "RivetError",
    "InvalidInput",
    "InvalidName",
    "PayloadTooLarge",
    "IdempotencyMismatch",
    "UnknownJob",
    "UnknownKind",
    "StoreError",
    "StoreUnavailable",
    "LeaseLost",
    "Permanent",
    "RivetConfigError",
    "OptionError",
    "FailpointConfigError",
    "NotAFake",
    "EffectError",
    "EffectRejected",
    "EffectUnavailable",
    "DjangoTaskFailed",
    "DjangoTaskAbandoned",
]

if TYPE_CHECKING:
    from rivet.errors import (
        DjangoTaskAbandoned,
        DjangoTaskFailed,
        EffectError,
        EffectRejected,
        EffectUnavailable,
        FailpointConfigError,
        IdempotencyMismatch,
        InvalidInput,
        InvalidName,
        LeaseLost,
        NotAFake,
        OptionError,
        PayloadTooLarge,
        Permanent,
        RivetConfigError,
        RivetError,
        StoreError,
        StoreUnavailable,
        UnknownJob,
        UnknownKind,
    )
    from rivet.jobs import JobContext, job
    from rivet.producer import cancel, enqueue, enqueue_many, get_task
    from rivet.values import CancelOutcome, EnqueueResult, TaskRecord


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rivet' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
