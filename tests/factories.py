"""factory-boy factories for rivet's models, for tests that need rows in a given state."""

from __future__ import annotations

import factory
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
