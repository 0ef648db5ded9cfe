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
    """A value given to rivet is out of bounds or malformed; nothing was written."""

    code = "invalid_input"
    """The stable machine-readable name of the kind of error (the HTTP API's ``code``); each
    subclass has its own."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        """The input that was wrong, when one is to blame (the HTTP API reports it as a field
        error), else None."""


class InvalidName(InvalidInput):
    """A queue or kind name is empty, too long or has characters outside the allowed set."""

    code = "invalid_name"
    """This error's ``code`` (``InvalidInput.code``)."""


class InvalidKey(InvalidInput):
    """An idempotency key is empty, too long, or holds a character outside visible ASCII."""

    code = "idempotency_key_invalid"
    """This error's ``code`` (``InvalidInput.code``)."""


class BatchKeyClash(InvalidInput):
    """Two items of one enqueue_many give one idempotency key to different work."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, field="idem_key")
        self.index = index
        """The later of the two items, counted from 0."""


class MixedDatabases(InvalidInput):
    """One enqueue_many batch holds queues that live on different databases."""

    code = "mixed_databases"
    """This error's ``code`` (``InvalidInput.code``)."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, field="queue")
        self.index = index
        """The first item whose queue lives on another database than item 0's, counted
        from 0."""


class PayloadTooLarge(InvalidInput):
    """The encoded payload is larger than RIVET['MAX_PAYLOAD_BYTES']."""

    code = "payload_too_large"
    """This error's ``code`` (``InvalidInput.code``)."""


class UnknownKind(InvalidInput):
    """No installed app registers the kind being enqueued (RIVET['ALLOW_UNKNOWN_KINDS'] is off)."""

    code = "unknown_kind"
    """This error's ``code`` (``InvalidInput.code``)."""


class IdempotencyMismatch(RivetError):
    """An idempotency key was reused for different work (a producer bug)."""

    def __init__(self, idem_key: str, existing_id: int) -> None:
        self.idem_key = idem_key
        """The key that was reused."""
        self.existing_id = existing_id
        """The task the key already names."""
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
