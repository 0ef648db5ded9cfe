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
