"""The one exception tree of rivet, rooted in RivetError.

Every error rivet raises on purpose is defined here (and exported by ``rivet``); the modules
that raise them (rivet.testing, rivet.effect_client, rivet.backends, rivet.worker.options,
rivet.failpoints) import them from here.
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
    """The database behind a store failed; the driver error is the __cause__."""


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


class OptionError(RivetConfigError):
    """A worker option has a bad value; the message names the flag, variable or setting."""


class FailpointConfigError(RivetConfigError):
    """RIVET_FAILPOINT or RIVET_FAILPOINT_SEED is malformed; the message names the variable."""


class NotAFake(RivetError, AssertionError):
    """An enqueue assertion was made where no rivet.testing fake records enqueues."""


class EffectError(RivetError):
    """The effect service did not confirm the effect."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        self.status = status
        self.body = body
        super().__init__(message)


class EffectRejected(EffectError):
    """The service refused the request (4xx, e.g. 422: key reused with another body); final."""


class EffectUnavailable(EffectError):
    """No usable answer (connection error, timeout, 5xx); retry with the same key."""


class DjangoTaskFailed(RivetError):
    """A Django task raised; the message ends naming the exception's class."""


class DjangoTaskAbandoned(RivetError):
    """A Django task used up its attempts without any handler error (its worker was lost)."""
