"""The queue database of a chaos run on a throwaway cluster of its own (the db-restart fault).

``queue_on_cluster`` moves the harness's queue database, and so the workers', to a new cluster
(``pgcluster``) for the length of a ``with`` block; the effect database stays where it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from django.core.management import call_command
from django.db import connections
from psycopg import sql

from chaos_project.chaos.pgcluster import Cluster, ClusterError

CLUSTER_PREFIX = "rivet-chaos-pg-"
ANSWER_TIMEOUT_SECS = 60.0


@contextmanager
def queue_on_cluster(say: Callable[[str], None]) -> Iterator[Cluster]:
    """Point the harness's queue database (and so the workers') at a new throwaway cluster.

    The database keeps its name; it is created there and migrated. Afterwards the harness's
    connection settings are put back and the cluster is stopped and deleted. The effect
    database stays where it is.
    """
    connection = connections["default"]
    db = connection.settings_dict
    cluster = Cluster.create(prefix=CLUSTER_PREFIX, say=say)
    saved = {key: db.get(key) for key in ("HOST", "PORT", "USER", "PASSWORD")}
    try:
        create_database(cluster, db["NAME"])
        connection.close()
        db.update(HOST="127.0.0.1", PORT=str(cluster.port), USER="postgres", PASSWORD="")
        call_command("migrate", database="default", verbosity=0, interactive=False)
        say(
            f"db-restart: the queue database {db['NAME']!r} runs on a throwaway cluster of the "
            f"harness's own at 127.0.0.1:{cluster.port} (migrated; removed after the run)"
        )
        yield cluster
    finally:
        connection.close()
        db.update(saved)
        cluster.remove()


def create_database(cluster: Cluster, name: str) -> None:
    with psycopg.connect(cluster.url("postgres"), autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def wait_until_answers(url: str, timeout: float = ANSWER_TIMEOUT_SECS) -> None:
    """Until a new connection to ``url`` runs a query; ClusterError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the restarted cluster did not answer in {timeout:g} s: {exc}"
                ) from exc
            time.sleep(0.1)
