"""Django signals a worker sends for each attempt of a task.

Every signal is sent with ``sender`` = the Worker class and these keyword arguments:

- ``context``: the handler's ``JobContext`` (task id, queue, kind, attempt, epoch, owner...);
- ``claimed``: the ``Claimed`` value the claim returned;
- ``worker``: the Worker instance.

``task_processed`` adds ``result``; ``task_released`` adds ``error`` (text) and ``retry_delay``
(seconds); ``task_failed`` adds ``error`` (text) and ``exception``; ``task_fenced`` adds ``op``
("ack" or "fail": the write the fence refused) and ``reason``.

Receivers run in the worker: ``task_processing`` in the handler's thread, the others in the
worker's loop thread. An exception in a receiver is logged and does not stop the worker.
"""

from django.dispatch import Signal

task_processing = Signal()
"""A handler is about to run (a new attempt started under a fresh lease)."""

task_processed = Signal()
"""The attempt succeeded and the ack was accepted: the task is done."""

task_released = Signal()
"""The attempt failed and the task will be retried after ``retry_delay`` seconds."""

task_failed = Signal()
"""The attempt failed and it was the last one: the task is dead (in the dead-letter queue)."""

task_fenced = Signal()
"""The lease was lost to another claim; the store refused this worker's write and recorded it."""

__all__ = ["task_fenced", "task_failed", "task_processed", "task_processing", "task_released"]
