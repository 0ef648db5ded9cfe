"""WorkerConfig: a worker's settings in one frozen value, built from the option table
(``rivet.worker.options``, drawn from ``rivet.settings_table``).

Every field but ``once`` and ``max_abandoned`` is an option of ``rivet.worker.options``
(same name as its ``dest``) and goes through that option's parser, whether it came from a
flag, a RIVET_* variable, settings.RIVET (``from_sources``) or a test's keyword argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rivet.errors import InvalidInput
from rivet.retry import RetryPolicy
from rivet.validation import check_name
from rivet.worker.options import BY_DEST, checked, resolve


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """What a worker does and how; see each option's help in ``rivet.worker.options``."""

    queues: tuple[str, ...]
    owner: str | None = None  # None: hostname:pid
    lease_ttl: float = 30.0
    concurrency: int = 4
    async_concurrency: int = 100
    prefetch: int | str | None = None  # None: RIVET['PREFETCH']; "auto" or an integer
    retry_backoff: float = 1.0
    retry_backoff_cap: float = 300.0
    pool_size: int = 10
    poll_interval: float = 1.0
    job_timeout: float | None = None
    shutdown_timeout: float = 30.0
    connect_timeout: float = 5.0
    idle_in_transaction_timeout: float = 30.0  # 0: no bound
    retention: float | None = None
    prune_every: float = 300.0
    prune_batch_size: int = 1000
    max_jobs: int | None = None
    metrics_port: int | None = None
    task_log_level: str = "info"
    log_format: str = "text"
    once: bool = False  # run what is runnable now, then stop
    max_abandoned: int | None = None  # None: half the slots, at least one

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in BY_DEST and field.name != "queues" and value is not None:
                object.__setattr__(self, field.name, checked(field.name, value))
        queues = (self.queues,) if isinstance(self.queues, str) else self.queues
        object.__setattr__(self, "queues", tuple(check_name("queue", q) for q in queues))
        if not self.queues:
            raise InvalidInput("a worker needs at least one queue")

    @classmethod
    def from_sources(
        cls, flags: Mapping[str, Any], environ: Mapping[str, str], **extra: Any
    ) -> WorkerConfig:
        """Each option from its flag, else its variable, else settings.RIVET (OptionError)."""
        values = resolve(flags, environ)
        return cls(**{dest: value for dest, value in values.items() if value is not None}, **extra)

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(backoff_secs=self.retry_backoff, cap_secs=self.retry_backoff_cap)

    @property
    def abandon_limit(self) -> int:
        """How many abandoned handler threads make the worker stop and exit 3."""
        return self.max_abandoned or max(1, self.concurrency // 2)

    @property
    def async_abandon_limit(self) -> int:
        """How many abandoned coroutines (that ignored their cancel) make the worker exit 3."""
        return self.max_abandoned or max(1, self.async_concurrency // 2)
