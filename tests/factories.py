"""factory-boy factories for rivet's models, for tests that need rows in a given state."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from rivet.models import FencedWrite, Task


class TaskFactory(DjangoModelFactory):
    class Meta:
        model = Task

    queue = "default"
    kind = "noop"
    payload = factory.Sequence(lambda n: {"n": n})
    max_attempts = 3

    class Params:
        dead = factory.Trait(
            state="dead",
            attempts=factory.SelfAttribute("max_attempts"),
            last_error="boom; max attempts exceeded (handler error)",
        )
        done = factory.Trait(state="done", attempts=1, result={"ok": True})


class FencedWriteFactory(DjangoModelFactory):
    class Meta:
        model = FencedWrite

    task_id = factory.SelfAttribute("task.id")
    queue = factory.SelfAttribute("task.queue")
    op = FencedWrite.Op.ACK
    owner = "worker-1"
    epoch = 1

    class Params:
        task = factory.SubFactory(TaskFactory)


class UserFactory(DjangoModelFactory):
    """A user; ``perms=["rivet.add_task", ...]`` grants permissions by their dotted names."""

    class Meta:
        model = "auth.User"
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")

    @factory.post_generation
    def perms(self, create: bool, names, **kwargs) -> None:
        from django.contrib.auth.models import Permission

        for name in names or ():
            app_label, codename = name.split(".")
            self.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


def task_in(alias: str, **fields) -> Task:
    """A task row saved on a given database alias (factory-boy's own create uses 'default').

    visible_at defaults to an hour ago: inside a test's transaction PostgreSQL's now() is the
    transaction's start, earlier than a row's default (the statement's time).
    """
    fields.setdefault("visible_at", timezone.now() - timedelta(hours=1))
    task = TaskFactory.build(**fields)
    task.save(using=alias)
    task.refresh_from_db(using=alias)
    return task
