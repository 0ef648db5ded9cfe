"""rivet in the Django admin: tasks (cancel), dead letters (requeue, purge, sweep), fences,
schedules (edit, run now, pause, resume).

``INSTALLED_APPS += ["rivet"]`` is all it takes: the admin's autodiscovery imports this package.
"""

from rivet.admin.dead_letters import DeadLetterAdmin
from rivet.admin.schedules import ScheduleAdmin
from rivet.admin.tasks import FencedWriteAdmin, TaskAdmin

__all__ = ["DeadLetterAdmin", "FencedWriteAdmin", "ScheduleAdmin", "TaskAdmin"]
