"""The process kit the chaos harness and the benchmark share, below both of them.

- ``services``: the child processes: the effect service, workers, their environment, free
  ports, and the verifier's connection to the effect database.
- ``pidfd``: the child processes (forked or executed), signalled only through a pidfd.
- ``queries``: the SQL the verifier and the benchmark read both databases with.
- ``progress``: the progress line of the long runs.

Nothing here imports ``chaos_project.chaos`` or ``bench``.
"""
