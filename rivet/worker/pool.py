"""The worker's database connection pool: ``--pool-size`` connections at most, on PostgreSQL.

Django (5.1+) pools PostgreSQL connections through psycopg_pool when the alias has
``OPTIONS["pool"]``. A worker process sets it, sized by ``pool_size``, unless the alias already
configures its own pool. The loop thread, the heartbeat thread and every handler thread that
uses the ORM then take connections from one pool of at most ``pool_size``, and a handler that
finishes returns its connection instead of closing it, so the next task does not reconnect.

SQLite has no server connections to bound; the option is accepted and ignored there.
"""

from __future__ import annotations

import logging

from django.db import connections

from rivet import logs

POOL_TIMEOUT_SECS = 30.0


def configure_pool(alias: str, pool_size: int, concurrency: int) -> bool:
    """Give ``alias`` a pool of ``pool_size`` connections; False when nothing was changed."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return False
    options = connection.settings_dict.setdefault("OPTIONS", {})
    if options.get("pool"):
        logs.event("pool_external", alias=alias, note="the alias configures its own pool")
        return False
    connection.close()
    options["pool"] = {"min_size": 1, "max_size": pool_size, "timeout": POOL_TIMEOUT_SECS}
    if pool_size < concurrency + 2:
        logs.event(
            "pool_undersized",
            logging.WARNING,
            pool_size=pool_size,
            concurrency=concurrency,
            note="below concurrency + 2 (loop and heartbeat): handlers that use the database "
            "wait for a connection, and a heartbeat that waits too long loses its lease",
        )
    return True
