"""A second PostgreSQL cluster for the multi-database tests: ``second_database``.

A session fixture starts a throwaway cluster of its own (``chaos_project.chaos.pgcluster``:
the local ``initdb`` and ``pg_ctl``, a free port) beside the tests' server, creates the
database ``rivet_b`` on it, registers it in this process as the Django alias ``queues_b``
(``SECOND_ALIAS``), migrates it, and stops and removes the cluster at the end of the run. When
no cluster can be started the tests that ask for it fail with the reason; none is skipped.

Child processes reach it through ``tests.settings_two_databases`` (the tests' settings with the
alias, the queue mapping ``TWO_DATABASES`` and ``rivet.routers.QueueRouter``), reading its URL
from ``SECOND_DATABASE_URL``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from chaos_project.chaos.pgcluster import Cluster, ClusterError
from effect_project.dbconfig import database_from_url
from tests.settings_two_databases import SECOND_ALIAS, TWO_DATABASES

__all__ = ["SECOND_ALIAS", "TWO_DATABASES", "SecondDatabase", "register_alias"]


@dataclass(frozen=True)
class SecondDatabase:
    """The second cluster and the alias this process reaches its ``rivet_b`` database by."""

    cluster: Cluster
    alias: str
    url: str

    def create_database(self, name: str) -> str:
        """Create (afresh) a database on the second cluster; its URL."""
        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.cluster.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def register_alias(alias: str, url: str | dict) -> Iterator[None]:
    """``alias`` (a database URL or a DATABASES entry) in Django's connections for the ``with``
    block (``settings.DATABASES`` is left alone: ``connections`` read it once, at start)."""
    config = database_from_url(url) if isinstance(url, str) else url
    connections.settings[alias] = connections.configure_settings(
        {"default": settings.DATABASES["default"], alias: dict(config)}
    )[alias]
    try:
        yield
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


@pytest.fixture(scope="session")
def second_database(django_db_setup, django_db_blocker) -> Iterator[SecondDatabase]:
    """A second PostgreSQL cluster, its database ``rivet_b`` migrated, as alias ``queues_b``."""
    try:
        cluster = Cluster.create(prefix="rivet-test-second-")
    except ClusterError as exc:
        pytest.fail(
            "the multi-database tests need a second PostgreSQL cluster, and none could be "
            f"started with the local initdb/pg_ctl: {exc}\nInstall the PostgreSQL server "
            "binaries (pg_config --bindir names where they are), as `make test` does.",
            pytrace=False,
        )
    try:
        second = SecondDatabase(cluster=cluster, alias=SECOND_ALIAS, url=cluster.url("rivet_b"))
        second.create_database("rivet_b")
        with register_alias(SECOND_ALIAS, second.url), django_db_blocker.unblock():
            call_command("migrate", database=SECOND_ALIAS, verbosity=0)
            yield second
    finally:
        cluster.remove()
