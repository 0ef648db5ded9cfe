"""rivet's chaos harness and its verifier (``manage.py rivet_chaos``; the benchmark is ``bench``).

- ``plan``: the seeded schedule of a run (task work, chaos events), from one seed.
- ``fleet``: the worker slots: start, restart, break, reap, and the event log of what happened.
- ``pacing``: releasing tasks as the workers claim them, so the backlog stays short.
- ``zombies``: one zombie from SIGSTOP to its verdict (fenced, not fenced, not bitten).
- ``loop``: the chaos loop: each tick reaps, releases, follows zombies, applies due events and
  ticks the opt-in faults (``faults``).
- ``harness``: one chaos run from empty databases to the verdict.
- ``campaign``: many seeds back to back, one table, one JSON file.
- ``verifier``: reads both databases and checks S1, S2, L1, F2 and C1 (and T1, T2).
- ``ticks``: the run's schedules (``--schedules``) and T1, T2 from their own history.
- ``report``: the report text.
- ``faults``: the opt-in faults (``--faults``): db-restart, effect-restart, effect-net.
- ``pgcluster``: a throwaway PostgreSQL cluster (also scripts/find_postgres.py's);
  ``queuecluster`` moves a run's queue database onto one.
- ``proxy``: the seeded faulty TCP proxy between workers and the effect service.

The processes are started with the shared kit, ``chaos_project.kit``.
"""
