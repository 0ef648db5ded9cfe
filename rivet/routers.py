"""``QueueRouter``: a database router that migrates rivet's tables where its queues live.

::

    DATABASE_ROUTERS = ["rivet.routers.QueueRouter"]

``allow_migrate`` says yes to rivet's models on every alias that may hold queues
(``rivet.routing.queue_aliases``: RIVET['DATABASE_ALIAS'], the aliases of
RIVET['QUEUE_DATABASES'] and those a router lists) and no on every other alias; it has no
opinion on other apps' models. rivet's reads and writes name their alias themselves, so the
router leaves ``db_for_read`` and ``db_for_write`` to the next router.
"""

from __future__ import annotations

from typing import Any

from rivet.routing import queue_aliases

RIVET_APP_LABEL = "rivet"


class QueueRouter:
    """Migrate rivet's models on the aliases that hold queues, and nowhere else."""

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != RIVET_APP_LABEL:
            return None
        return db in queue_aliases()
