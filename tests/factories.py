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
        # Runnable a second ago. The column's default, Now(), is the statement's time on
        # PostgreSQL: later than the now() a store query sees in the same test transaction.
        runnable = factory.Trait(
            visible_at=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=1))
        )


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
    """A staff user; ``permissions=["rivet.view_task", ...]`` grants model permissions."""

    class Meta:
        model = "auth.User"
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"operator{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.django.Password("rivet-operator")
    is_staff = True

    @factory.post_generation
    def permissions(self, create, extracted, **kwargs):
        if not create or not extracted:
            return
        from django.contrib.auth.models import Permission

        for name in extracted:
            app_label, codename = name.split(".")
            permission = Permission.objects.get(
                content_type__app_label=app_label, codename=codename
            )
            self.user_permissions.add(permission)


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
