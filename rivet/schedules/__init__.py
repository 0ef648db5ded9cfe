"""Periodic jobs: cron schedules declared in code or stored in the Schedule table.

- ``cron``: expressions, zones and the ticks of a span (cronsim does the cron arithmetic);
- ``declare``: ``rivet.cron(...)`` and the schedules jobs declare in code;
- ``models``: the Schedule table (definition, watermark, next tick);
- ``scheduler``: the pass every worker runs, and its thread;
- ``operate``: list, run now, pause, resume (the command, the admin and the API call these).

docs/schedules.md is the user's guide.
"""
