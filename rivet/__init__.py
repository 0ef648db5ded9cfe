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

_EXPORTS = {
    "enqueue": "rivet.producer",
    "enqueue_many": "rivet.producer",
    "job": "rivet.jobs",
    "JobContext": "rivet.jobs",
    "LeaseLost": "rivet.errors",
    "Permanent": "rivet.errors",
    "cancel": "rivet.producer",
    "EnqueueResult": "rivet.values",
    "RivetError": "rivet.errors",
    "InvalidInput": "rivet.errors",
    "PayloadTooLarge": "rivet.errors",
    "IdempotencyMismatch": "rivet.errors",
    "UnknownJob": "rivet.errors",
    "StoreError": "rivet.errors",
    "RivetConfigError": "rivet.errors",
}

__all__ = [
    "__version__",
    "enqueue",
    "enqueue_many",
    "job",
    "JobContext",
    "LeaseLost",
    "Permanent",
    "cancel",
    "EnqueueResult",
    "RivetError",
    "InvalidInput",
    "PayloadTooLarge",
    "IdempotencyMismatch",
    "UnknownJob",
    "StoreError",
    "RivetConfigError",
]

if TYPE_CHECKING:
    from rivet.errors import (
        IdempotencyMismatch,
        InvalidInput,
        LeaseLost,
        PayloadTooLarge,
        Permanent,
        RivetConfigError,
        RivetError,
        StoreError,
        UnknownJob,
    )
    from rivet.jobs import JobContext, job
    from rivet.producer import cancel, enqueue, enqueue_many
    from rivet.values import EnqueueResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rivet' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
