"""What one run of a worker did (``WorkerStats``), and the exit codes it ends with.

``rivet.worker.loop.Worker.run`` returns the stats; the ``rivet_worker`` command exits with
their ``exit_code``.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_STORE_ERROR = 1  # --once could not claim: the database failed
EXIT_ABANDONED = 3


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """What one run of a worker did."""

    claimed: int = 0
    acked: int = 0
    failed: int = 0  # attempts that ended in an error, a timeout or an unknown kind
    retried: int = 0
    dead: int = 0
    cancelled: int = 0  # attempts an operator cancelled, buried without an ack
    fenced: int = 0
    lost: int = 0  # attempts left to lapse: no heartbeat could confirm the lease, or a write failed
    abandoned: int = 0
    buried: int = 0  # exhausted tasks a claim buried on the way
    exit_code: int = EXIT_OK

    @property
    def processed(self) -> int:
        """Attempts this worker settled, whatever the outcome."""
        return self.acked + self.retried + self.dead + self.cancelled + self.fenced + self.lost


def log_counts(stats: WorkerStats) -> dict[str, int]:
    """The counts the ``worker_stopped`` log line carries."""
    fields: tuple[str, ...] = ("claimed", "acked", "failed", "retried", "dead", "cancelled")
    fields += ("fenced", "lost", "abandoned")
    return {name: getattr(stats, name) for name in fields}
