"""Django @task functions for tests/integration/test_tasks_backend.py.

Import this module only once TASKS points "default" at RivetBackend: @task validates the
task against the backend when the module is imported.
"""

import django

if django.VERSION >= (6, 0):
    from django.tasks import task
else:
    from django_tasks import task


@task()
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def shout(text):
    return {"shouted": text.upper()}


@task()
def explode(message):
    raise ValueError(message)


@task(takes_context=True)
def which_attempt(context, label):
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task()
async def double_async(n):
    return n * 2


@task()
def returns_a_set():
    return {1, 2}


def not_a_task():
    return "plain"
