"""Django ``@task`` functions of the host project: they run on rivet through RivetBackend."""

from __future__ import annotations

import django

if django.VERSION >= (6, 0):
    from django.tasks import task
else:  # the django-tasks backport
    from django_tasks import task


@task(queue_name="default")
def add(a: int, b: int) -> int:
    """Adds two numbers on a rivet worker; the sum comes back through get_result."""
    return a + b


@task(queue_name="default")
def count_tasks_slowly(ms: int) -> int:
    """Holds a database connection for ``ms`` milliseconds: shows the worker's pool at work."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM rivet_task, pg_sleep(%s)", [ms / 1000])
        return cursor.fetchone()[0]


@task(queue_name="default")
def session_settings() -> dict[str, str]:
    """The planner settings of the connection a handler gets: a user's ORM queries run on it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_sort'), current_setting('enable_seqscan'), "
            "current_setting('plan_cache_mode'), pg_backend_pid()"
        )
        sort, seqscan, plans, pid = cursor.fetchone()
    return {
        "enable_sort": sort,
        "enable_seqscan": seqscan,
        "plan_cache_mode": plans,
        "backend": str(pid),
    }
