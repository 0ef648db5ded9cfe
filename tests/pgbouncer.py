"""PgBouncer in front of the test server: session fixtures, one bouncer per pooling mode.

``pgbouncer_transaction`` and ``pgbouncer_session`` each start Debian's ``pgbouncer``
(scripts/find_pgbouncer.py finds it; ``make test`` installs it) on a free port, with its
config in a temporary folder, in front of the server ``DATABASES['default']`` names, and stop
it at the end of the run. Without pgbouncer the tests that ask for one fail with how to get it;
none is skipped. ``through(bouncer)`` points the 'default' alias at a bouncer for a while, so
the real code (the store, Django's connections, every thread's) goes through it.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from bench.pooler import PoolerError, running_pooler
from tests.tools import required_tool

#: Server connections per (database, user) pair in transaction pooling: few, so a test sees
#: every one of them. In session pooling each client holds one for its whole session: a worker
#: (its pool and its LISTEN connection) and a producer beside it need more.
POOL_SIZE = 2
SESSION_POOL_SIZE = 10


@dataclass(frozen=True)
class Bouncer:
    mode: str
    host: str
    port: int
    user: str

    def url(self, dbname: str) -> str:
        """A DATABASE_URL through this bouncer; a transaction pooler says so to Django."""
        flag = "?disable_server_side_cursors=True" if self.mode == "transaction" else ""
        return f"postgres://{self.user}@{self.host}:{self.port}/{dbname}{flag}"

    def connect(self, dbname: str, **kwargs) -> psycopg.Connection:
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname=dbname, **kwargs
        )


@contextmanager
def running_bouncer(mode: str, pool: int | None = None) -> Iterator[Bouncer]:
    """bench.pooler's bouncer in front of the server DATABASES['default'] names, with ``pool``
    server connections (POOL_SIZE or SESSION_POOL_SIZE by the mode unless given); one that
    does not start fails the test that asked for it, with its log."""
    db = settings.DATABASES["default"]
    user = db.get("USER") or getpass.getuser()
    server = {
        "host": db.get("HOST") or "127.0.0.1",
        "port": str(db.get("PORT") or 5432),
        "user": user,
        "password": db.get("PASSWORD") or "",
    }
    if pool is None:
        pool = POOL_SIZE if mode == "transaction" else SESSION_POOL_SIZE
    binary = required_tool("pgbouncer")
    try:
        with running_pooler(server=server, server_pool=pool, pool_mode=mode, binary=binary) as p:
            yield Bouncer(mode=mode, host="127.0.0.1", port=p.port, user=user)
    except PoolerError as exc:  # only the pooler raises it: it did not start
        pytest.fail(f"pgbouncer ({mode} pooling): {exc}", pytrace=False)


# Both ask for django_db_setup: a bouncer stops (and its server connections end) before the test
# databases are dropped.
@pytest.fixture(scope="session")
def pgbouncer_transaction(django_db_setup) -> Iterator[Bouncer]:
    """PgBouncer in transaction pooling in front of the test server."""
    with running_bouncer("transaction") as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_session(django_db_setup) -> Iterator[Bouncer]:
    """PgBouncer in session pooling in front of the test server."""
    with running_bouncer("session") as bouncer:
        yield bouncer


@contextmanager
def through(bouncer: Bouncer, alias: str = "default", flag: bool = True) -> Iterator[None]:
    """Point ``alias`` at ``bouncer`` (every thread's connection: they share its settings).

    In transaction pooling the alias also gets DISABLE_SERVER_SIDE_CURSORS, Django's own switch
    for a transaction pooler, which rivet reads too (unless ``flag`` is False: an alias that
    does not say so).
    """
    db = connections[alias].settings_dict
    keys = ("HOST", "PORT", "DISABLE_SERVER_SIDE_CURSORS")
    saved = {key: db.get(key) for key in keys}
    connections[alias].close()
    db.update(
        HOST=bouncer.host,
        PORT=str(bouncer.port),
        DISABLE_SERVER_SIDE_CURSORS=flag and bouncer.mode == "transaction",
    )
    try:
        yield
    finally:
        connections[alias].close()
        db.update(saved)
