"""Several Workers in one process: one claim/settle loop per database that holds its queues.

``rivet_worker --queue emails,default`` with ``emails`` on one database and ``default`` on
another runs two Workers (``rivet.worker.loop``), each on its own thread, its own store and its
own queues (in the order given), with everything per store unchanged: leases, heartbeats,
fencing, retries, dead letters, LISTEN, retention. The group is what the process's signals stop
and what ``--metrics-port`` serves: the Workers share one ``WorkerMetrics``. When any Worker
stops (a signal, ``--max-jobs``, too many abandoned handlers), the others are stopped too, so
the process exits and its supervisor sees one exit code: the highest of theirs. Under
``--once`` each Worker runs what is runnable on its database, then the process exits. A Worker
that raises stops the others, and ``run`` raises its exception once all have returned.
"""

from __future__ import annotations

import dataclasses
import threading

from rivet.worker.loop import Worker
from rivet.worker.stats import WorkerStats

#: How often the main thread looks up from joining its Workers (signals run between looks).
JOIN_STEP_SECS = 0.2


class WorkerGroup:
    """Runs its Workers on threads until all have stopped; ``stop`` stops every one."""

    def __init__(self, workers: list[Worker]) -> None:
        if not workers:
            raise ValueError("a WorkerGroup needs at least one Worker")
        self.workers = workers
        self.owner = workers[0].owner
        self.metrics = workers[0].metrics
        self._stats: dict[int, WorkerStats] = {}
        self._errors: list[BaseException] = []

    @property
    def stopping(self) -> bool:
        return any(worker.stopping for worker in self.workers)

    def stop(self) -> None:
        """Every Worker stops claiming and drains (run() returns once all have)."""
        for worker in self.workers:
            worker.stop()

    def run(self) -> WorkerStats:
        """Run every Worker on a thread of its own; the counts of all, the worst exit code."""
        threads = [
            threading.Thread(target=self._run_one, args=(index,), name=f"rivet-loop-{index}")
            for index in range(len(self.workers))
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(JOIN_STEP_SECS)
        if self._errors:
            raise self._errors[0]
        return combined(list(self._stats.values()))

    def close(self) -> None:
        for worker in self.workers:
            worker.store.close()

    def _run_one(self, index: int) -> None:
        worker = self.workers[index]
        try:
            self._stats[index] = worker.run()
        except BaseException as exc:  # re-raised by run(), in the main thread, as one Worker would
            self._errors.append(exc)
        finally:
            if not worker.config.once or self._errors:
                self.stop()


def combined(stats: list[WorkerStats]) -> WorkerStats:
    """The sum of every count, with the highest exit code."""
    counts = {
        field.name: sum(getattr(one, field.name) for one in stats)
        for field in dataclasses.fields(WorkerStats)
        if field.name != "exit_code"
    }
    return WorkerStats(**counts, exit_code=max(one.exit_code for one in stats))
