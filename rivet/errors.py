"""The one exception tree of rivet, rooted in RivetError.

The library's errors are defined here; the most used are exported by ``rivet`` too. The errors
of the pieces around the library live with them, still under RivetError: the test fake's
``rivet.testing.NotAFake``, ``rivet.failpoints.FailpointConfigError`` and the worker options'
``rivet.worker.options.OptionError`` (the repository's effect client, which is not shipped, roots
its errors here too).
"""

from django.core.exceptions import ImproperlyConfigured


class RivetError(Exception):
    """Base of every error rivet raises on purpose."""


class InvalidInput(RivetError, ValueError):
    """A value given to rivet is out of bounds or malformed; nothing was written.

    ``field`` names the input that was wrong when one is to blame (the HTTP API reports it as
    a field error); ``code`` is the stable machine-readable name of the kind of error.
    """

    code = "invalid_input"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidName(InvalidInput):
    """A queue or kind name is empty, too long or has characters outside the allowed set."""

    code = "invalid_name"


class InvalidKey(InvalidInput):
    """An idempotency key is empty, too long, or holds a character outside visible ASCII."""

    code = "idempotency_key_invalid"


class BatchKeyClash(InvalidInput):
    """Two items of one enqueue_many give one idempotency key to different work."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, field="idem_key")
        self.index = index


class MixedDatabases(InvalidInput):
    """One enqueue_many batch holds queues that live on different databases."""

    code = "mixed_databases"

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, field="queue")
        self.index = index


class PayloadTooLarge(InvalidInput):
    """The encoded payload is larger than RIVET['MAX_PAYLOAD_BYTES']."""

    code = "payload_too_large"


class UnknownKind(InvalidInput):
    """No installed app registers the kind being enqueued (RIVET['ALLOW_UNKNOWN_KINDS'] is off)."""

    code = "unknown_kind"


class IdempotencyMismatch(RivetError):
    """An idempotency key was reused for different work (a producer bug)."""

    def __init__(self, idem_key: str, existing_id: int) -> None:
        self.idem_key = idem_key
        self.existing_id = existing_id
        super().__init__(
            f"idempotency key {idem_key!r} is already used by task {existing_id} with different "
            "work (queue, kind or payload differ); use a new key for new work"
        )


class UnknownJob(RivetError, LookupError):
    """A task names a job kind that no registered job has."""


class StoreError(RivetError):
    """The database behind a store failed; the driver error is the ``__cause__``."""


class StoreUnavailable(StoreError):
    """The database could not be reached or dropped the connection; a retry may succeed."""


class LeaseLost(RivetError):
    """The handler was told to stop (lease lost, deadline, cancel, shutdown); do not go on."""


class Permanent(RivetError):
    """Raised by a handler when retrying cannot help: the task is buried at once.

    ``raise rivet.Permanent("card declined")``: last_error is
    ``Permanent: card declined; permanent failure (retrying cannot help)``.
    """


class RivetConfigError(RivetError, ImproperlyConfigured):
    """rivet's settings are wrong; the message names the setting."""


class DjangoTaskFailed(RivetError):
    """A Django task raised; the message ends naming the exception's class."""


class DjangoTaskAbandoned(RivetError):
    """A Django task used up its attempts without any handler error (its worker was lost)."""
