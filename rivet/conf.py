"""rivet's settings: one namespaced dict, ``settings.RIVET``, read through ``rivet_settings``.

Unknown keys are refused by name (system check rivet.E001) rather than silently ignored: a
setting that is read, believed and then dropped is worse than one that is rejected.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Queue a job goes to when neither the job nor the enqueue names one.
    "QUEUE": "default",
    # Store implementation: "auto" picks by the database vendor of DATABASE_ALIAS.
    "STORE": "auto",
    "DATABASE_ALIAS": "default",
    # Queues that live on another database: {"emails": "mail_db"} (exact queue names to Django
    # database aliases); a queue not named here lives on DATABASE_ALIAS. Routers of
    # DATABASE_ROUTERS with a db_for_queue(queue) method are asked first (rivet.routing).
    "QUEUE_DATABASES": {},
    "MAX_ATTEMPTS": 3,
    # Priority aging: seconds of waiting worth one priority point (None: no aging, priority
    # first). A claim takes the highest priority + seconds waited / PRIORITY_AGING_SECS.
    "PRIORITY_AGING_SECS": 60.0,
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "MAX_NAME_LENGTH": 100,
    "MAX_IDEM_KEY_LENGTH": 200,
    "MAX_ERROR_LENGTH": 4000,
    # Failed attempts kept in a task's errors list (oldest dropped first).
    "MAX_ERRORS_KEPT": 20,
    "LEASE_TTL_SECS": 30.0,
    "CONCURRENCY": 4,
    "ASYNC_CONCURRENCY": 100,
    # Claimed tasks a worker may hold waiting for a free slot: "auto" sets it from the handlers'
    # run times (rivet.worker.prefetch); 0 claims only into free slots.
    "PREFETCH": "auto",
    "RETRY_BACKOFF_SECS": 1.0,
    "RETRY_BACKOFF_CAP_SECS": 300.0,
    # Most connections a worker process holds (its psycopg pool on PostgreSQL).
    "POOL_SIZE": 10,
    "POLL_INTERVAL_SECS": 1.0,
    # How long a worker waits at start for the database to answer before it exits 1.
    "CONNECT_TIMEOUT_SECS": 5.0,
    "JOB_TIMEOUT_SECS": None,
    "SHUTDOWN_TIMEOUT_SECS": 30.0,
    # PostgreSQL ends the session of a transaction rivet opened (a scheduler pass, an operator's
    # requeue or cancel) that sits idle longer than this, so a stalled process frees its locks
    # (rivet.stores.idle); 0: no bound.
    "IDLE_IN_TRANSACTION_TIMEOUT_SECS": 30.0,
    # Level of the routine per-task worker lines (claimed, acked, retry): "info" or "debug".
    "TASK_LOG_LEVEL": "info",
    # Modules imported at worker start so their @rivet.job functions register.
    "JOB_MODULES": [],
    # Whether an enqueue may name a kind no installed app registers: for a producer whose
    # workers run elsewhere, with the job code this process does not import.
    "ALLOW_UNKNOWN_KINDS": False,
    "NOTIFY_CHANNEL": "rivet_task",
    # A PostgreSQL URL for the worker's LISTEN connection that bypasses a transaction pooler
    # (its keys replace the alias's: "postgres://db-primary:5432"); None: the alias's own way,
    # and polling when the alias goes through a transaction pooler (docs/pgbouncer.md).
    "LISTEN_DATABASE_URL": None,
    # Retention: workers delete done tasks and fenced-write records older than this duration
    # ("7d", "12h" or seconds); None keeps them forever. Pruning releases idempotency keys.
    "RETENTION": None,
    "PRUNE_EVERY_SECS": 300.0,
    "PRUNE_BATCH_SIZE": 1000,
    # Most tasks one POST to the HTTP API's tasks/bulk/ may carry.
    "API_BULK_MAX": 1000,
    # A bearer token that may read rivet/metrics/ without a user (None: users only).
    "METRICS_TOKEN": None,
    # Whether workers honour RIVET_FAILPOINT (rivet.failpoints): only for tests and chaos runs.
    "FAILPOINTS": False,
    # Whether workers enqueue the due ticks of schedules (rivet.schedules): every worker may;
    # turn it off for workers that should only run tasks.
    "SCHEDULER": True,
}
"""Every key of ``settings.RIVET`` with its default; a key not here is refused (rivet.E001)."""


class RivetSettings:
    """Lazy view of settings.RIVET with defaults; re-reads Django settings on each access."""

    def _user(self) -> dict[str, Any]:
        return dict(_rivet_dict())

    def unknown_keys(self) -> list[str]:
        """The keys of ``settings.RIVET`` that rivet does not know, sorted."""
        return sorted(set(self._user()) - set(DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown rivet setting {name!r}; known: {', '.join(DEFAULTS)}")
        # No copy of the dict: an enqueue reads several settings, each on every call.
        return _rivet_dict().get(name, DEFAULTS[name])

    def values(self, *names: str) -> tuple[Any, ...]:
        """Several settings at once, ``settings.RIVET`` read once for them all: each read of
        Django's lazy settings costs more than the rest of a lookup, and an enqueue needs
        several on every call."""
        user = _rivet_dict()
        return tuple([user.get(name, DEFAULTS[name]) for name in names])


_UNREAD = object()


def _rivet_dict() -> dict[str, Any]:
    """``settings.RIVET`` (``{}`` when unset or None), as read now.

    Django's ``LazySettings`` keeps each setting it has read in its own ``__dict__`` and empties
    that whenever a setting changes (``override_settings``, an assignment, a deletion), so the
    value found there is the value now. It is read there first, past ``LazyObject``'s
    ``__getattribute__``, which on each ``settings.RIVET`` also looks the dict up for a
    ``_mask_wrapped`` attribute and catches the AttributeError: an enqueue reads the setting
    five times. Not kept there yet: the usual read, which keeps it.
    """
    user = object.__getattribute__(settings, "__dict__").get("RIVET", _UNREAD)
    if user is _UNREAD:
        user = getattr(settings, "RIVET", None)
    return user or {}


#: The aging step rivet ranks with when PRIORITY_AGING_SECS is None: one point per ten years,
#: longer than any task waits, so the order is priority first, then the task ready first. It is
#: also the largest step a setting may name (a rank stays within 100 steps of its ready time).
AGING_OFF_SECS = 10 * 365.25 * 24 * 3600.0


def priority_aging_secs() -> float:
    """Seconds of waiting worth one priority point, as the stores rank with it now."""
    return aging_step(rivet_settings.PRIORITY_AGING_SECS)


def aging_step(setting: Any) -> float:
    """The aging step of a PRIORITY_AGING_SECS value (None: aging off, AGING_OFF_SECS)."""
    return AGING_OFF_SECS if setting is None else float(setting)


rivet_settings = RivetSettings()
"""The settings as rivet reads them: ``rivet_settings.LEASE_TTL_SECS`` and so on."""
