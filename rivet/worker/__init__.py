"""The worker: claim into free slots, run handlers, heartbeat their leases, settle attempts.

- ``loop``: the Worker (its run, its events, the drain, the handler threads it abandons);
- ``slots``: the Worker's slots (the flush that settles and claims into them, the handler run);
- ``stats``: what a run of the Worker did (``WorkerStats``) and its exit codes;
- ``listen``: the wake-up thread (enqueue notifications wake the loop instead of its poll);
- ``attempt``: one claimed task in this worker and its one state;
- ``guard``: heartbeats, the local lease deadline, job timeouts, cancel marks;
- ``settle``: how an attempt ends (decided by ``rivet.decisions``, applied by the store);
- ``ending``: the typed end of each attempt the settler returns, and its report;
- ``options``: the option table the command, its variables and the system checks share;
- ``config``: ``WorkerConfig``, the worker's settings in one value built from that table;
- ``pool``, ``process``: the worker as a process (connection pool, owner name, signals).
"""

from rivet.worker.config import WorkerConfig
from rivet.worker.loop import Worker
from rivet.worker.stats import EXIT_ABANDONED, EXIT_OK, EXIT_STORE_ERROR, WorkerStats

__all__ = [
    "EXIT_ABANDONED",
    "EXIT_OK",
    "EXIT_STORE_ERROR",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
]
