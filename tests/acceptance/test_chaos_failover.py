"""The failover fault on real clusters: a primary and its synchronous standby, a real SIGKILL.

- The pair: a row committed on the primary is on the standby after the primary's postmaster
  and every server process it started were SIGKILLed; the promoted standby takes writes, and the
  multi-host URL finds it without being told.
- An asynchronous standby whose WAL sender is stopped misses commits that returned; after the
  kill and the promotion the failover's counting names exactly those (enqueues lost, an ack
  and a claim rolled back), read from the real standby.
- A short chaos run with ``--faults failover`` holds every invariant, and its report names the
  failover, its stall and its losses (none, with a synchronous standby).
"""

from __future__ import annotations

import os
import re
import signal

import psycopg
import pytest

from chaos_project.chaos.failover import (
    STANDBY_NAME,
    losses,
    multi_host_url,
    read_snapshot,
    wait_streaming,
)
from chaos_project.chaos.pgcluster import Cluster, pid_alive
from chaos_project.chaos.queuecluster import CLUSTER_PREFIX, wait_until_answers
from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.topology]

PAIR = "-c synchronous_commit=on"


def test_a_synchronous_standby_keeps_a_commit_through_a_sigkill_and_takes_over():
    primary = Cluster.create(prefix=CLUSTER_PREFIX, options=PAIR)
    standby = None
    try:
        standby = Cluster.standby_of(
            primary, prefix=CLUSTER_PREFIX, name=STANDBY_NAME, options=PAIR
        )
        with psycopg.connect(primary.url("postgres"), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("SELECT pg_reload_conf()")
        assert wait_streaming(primary, "sync") == "streaming, sync"
        url = multi_host_url([primary.port, standby.port], "postgres")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE acked (n int)")
            conn.execute("INSERT INTO acked VALUES (1)")  # returned: the standby flushed it

        killed = primary.crash()

        assert killed["processes"] > 1  # the postmaster and its server processes
        assert not pid_alive(killed["postmaster"])
        with pytest.raises(psycopg.OperationalError):  # the standby alone takes no writes
            psycopg.connect(url, connect_timeout=3)
        standby.promote()
        wait_until_answers(url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.info.port == standby.port
            assert conn.execute("SELECT n FROM acked").fetchall() == [(1,)]
            conn.execute("INSERT INTO acked VALUES (2)")  # no standby to wait for any more
    finally:
        if standby is not None:
            standby.remove()
        primary.remove()
    assert not primary.root.exists()


#: The columns of rivet_task the failover's snapshot reads, and nothing else.
TASKS = """
CREATE TABLE rivet_task (id int PRIMARY KEY, idem_key text, queue text, state text,
                         lease_epoch int NOT NULL DEFAULT 0)
"""


def test_an_asynchronous_standby_loses_what_it_had_not_received_and_the_count_names_it():
    primary = Cluster.create(prefix=CLUSTER_PREFIX, options=PAIR)
    standby = None
    try:
        with psycopg.connect(primary.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE q")
        with psycopg.connect(primary.url("q"), autocommit=True) as conn:
            conn.execute(TASKS)
            for n in range(1, 4):
                conn.execute(
                    "INSERT INTO rivet_task VALUES (%s, %s, 'chaos', 'pending', 1)", (n, f"k{n}")
                )
        standby = Cluster.standby_of(
            primary, prefix=CLUSTER_PREFIX, name=STANDBY_NAME, options=PAIR
        )
        assert wait_streaming(primary, "async") == "streaming, async"
        with psycopg.connect(primary.url("postgres"), autocommit=True) as conn:
            (sender,) = conn.execute("SELECT pid FROM pg_stat_replication").fetchone()
        # The WAL sender stopped: every commit from here returns on the primary alone.
        sender_fd = os.pidfd_open(sender)
        try:
            signal.pidfd_send_signal(sender_fd, signal.SIGSTOP)
        finally:
            os.close(sender_fd)
        with psycopg.connect(primary.url("q"), autocommit=True) as conn:
            conn.execute("INSERT INTO rivet_task VALUES (4, 'k4', 'chaos', 'pending', 0)")
            conn.execute("UPDATE rivet_task SET state = 'done' WHERE id = 1")  # an ack
            conn.execute("UPDATE rivet_task SET lease_epoch = 2 WHERE id = 2")  # a claim

        primary.crash()  # the stopped sender too: SIGKILL ends a stopped process

        snapshot = read_snapshot(standby, "q", "chaos")
        lost = losses(
            snapshot,
            enqueued=["k1", "k2", "k3", "k4"],
            acked=[1],
            claimed={1: 1, 2: 2, 3: 1},
        )
        assert (lost.enqueues, lost.acks, lost.claims) == (["k4"], [1], [2])
        standby.promote()
        with psycopg.connect(standby.url("q"), autocommit=True) as conn:
            rows = conn.execute("SELECT id, state, lease_epoch FROM rivet_task ORDER BY id")
            assert rows.fetchall() == [(1, "pending", 1), (2, "pending", 1), (3, "pending", 1)]
    finally:
        if standby is not None:
            standby.remove()
        primary.remove()


@pytest.mark.django_db(transaction=True)
def test_a_short_chaos_run_with_a_failover_holds_and_reports_it(run_manage, effect_database_url):
    env = child_environ(postgres_url(), EFFECT_DATABASE_URL=effect_database_url)
    run = ("--tasks", "150", "--workers", "4", "--duration-secs", "8", "--seed", "7")
    done = run_manage("rivet_chaos", *run, "--faults", "failover", "--own-effect-service", env=env)
    output = done.stdout + done.stderr

    assert done.returncode == 0, output
    assert "every invariant held: S1, S2, L1, F2, C1" in done.stdout, output
    assert re.search(r"^faults\s+1\s+\(failover 1\)", done.stdout, flags=re.MULTILINE), output
    assert re.search(
        r"^failover\s+1\s+\(synchronous standby: primary SIGKILLed at [\d.]+ s of the chaos, "
        r"\d+ server processes; standby promoted after",
        done.stdout,
        flags=re.MULTILINE,
    ), output
    assert re.search(r"^no ack for\s+[\d.]+ s\s+\(the last ack", done.stdout, re.MULTILINE), output
    for label in ("enqueues lost", "acks rolled back", "claims rolled back"):
        assert re.search(rf"^{label}\s+0\s+<- L1", done.stdout, flags=re.MULTILINE), output
    assert re.search(r"^ids reused\s+0\s+\(reported\)", done.stdout, flags=re.MULTILINE), output
    assert "runs on a primary" in done.stdout and "target_session_attrs=read-write" in output
