"""rivet's benchmark (``manage.py rivet_chaos bench``, ``make bench``): throughput and latency.

It writes its results beside this package (``results.md``, ``results.json``, ``throughput.png``).

- ``runner``: the grid of runs (workers x concurrency x kind), the soak, the rate-limited runs.
- ``enqueue``: the producer's side: enqueue latency, one by one and in batches.
- ``ceiling``: the store's own ceiling, claim and ack with no handler in between.
- ``report``: the figures read from the task rows, and the results.md / results.json text.
- ``plot``: the throughput figure (matplotlib, the ``bench`` dependency group).

It starts its processes with the host project's process kit (``chaos_project.kit``), which the
chaos harness uses too; the two never import each other.
"""
