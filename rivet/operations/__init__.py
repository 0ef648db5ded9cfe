"""What an operator does to tasks: requeue, purge and sweep dead letters, and cancel a task.

The admin, ``manage.py rivet_dlq`` and the HTTP API all call these, as they call
``rivet.schedules.operate`` for schedules, so each action means the same wherever it is taken
and says so in the same words. An action looks its task up, calls the store, and tells a race
with another operator (or a worker) from a plain refusal; it answers with an
:class:`~rivet.operations.outcome.Outcome`: a machine ``code`` and one ``message`` for people.
Each surface shows that message as it is (the admin in its report, the command on stdout or in
its error, the API in the error's ``detail``) and maps the code to its own signal (an exit
code, an HTTP status).

- :mod:`rivet.operations.outcome`: the outcome, its codes, and the lookups;
- :mod:`rivet.operations.dead_letters`: requeue, purge (one task or a queue), sweep, and the
  notes shown beside them;
- :mod:`rivet.operations.cancel`: cancel, and what each of its outcomes says.
"""
