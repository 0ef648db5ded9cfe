"""The worker: claim into free slots, run handlers, heartbeat their leases, settle attempts.

- ``loop``: the Worker (claims, runs handlers on threads, hands outcomes to settle);
- ``attempt``: one claimed task in this worker and its one state;
- ``guard``: heartbeats, the local lease deadline, job timeouts, cancel marks;
- ``settle``: how an attempt ends (decided by ``rivet.decisions``, applied by the store);
- ``ending``: the typed end of each attempt the settler returns, and its report;
- ``options``: the option table the command, its variables and the system checks share;
- ``config``: ``WorkerConfig``, the worker's settings in one value built from that table;
- ``pool``, ``process``: the worker as a process (connection pool, owner name, signals).
"""

from rivet.worker.config import WorkerConfig
from rivet.worker.loop import EXIT_ABANDONED, EXIT_OK, EXIT_STORE_ERROR, Worker, WorkerStats

__all__ = [
    "EXIT_ABANDONED",
    "EXIT_OK",
    "EXIT_STORE_ERROR",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
]
