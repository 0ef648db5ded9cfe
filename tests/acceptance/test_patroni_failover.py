"""rivet through a Patroni failover: two nodes in synchronous mode, the leader's host SIGKILLed.

scripts/patroni_pair.py starts etcd and two Patroni nodes (``synchronous_mode: true``) on free
ports. The queue database is migrated and filled through libpq's multi-host URL; a worker runs
on the same URL. The leader's Patroni, postmaster and server processes are SIGKILLed at once;
Patroni promotes the synchronous standby once the leader key expires. Every task enqueued
before the kill is there, the same worker process goes on and finishes tasks enqueued after it,
and nothing was told where the new primary is.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.processes import child_environ, manage
from tests.tools import required_tool, script

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.topology]

QUEUE = "patroni"
BEFORE, AFTER = 30, 30
PRODUCE = """
from rivet.producer import enqueue_many
items = [{{"kind": "noop", "payload": n, "queue": "{queue}", "idem_key": f"{prefix}-{{n}}"}}
         for n in range({count})]
print(len(enqueue_many(items)))
"""


def _counts(url: str) -> dict[str, int]:
    with psycopg.connect(url, connect_timeout=3) as conn:
        rows = conn.execute(
            "SELECT state, count(*) FROM rivet_task WHERE queue = %s GROUP BY state", (QUEUE,)
        ).fetchall()
    return dict(rows)


def _produce(env: dict[str, str], prefix: str, count: int) -> None:
    code = PRODUCE.format(queue=QUEUE, prefix=prefix, count=count)
    done = manage("shell", "-c", code, env=env)
    assert (done.returncode, done.stdout.split()[-1:]) == (0, [str(count)]), done.stderr


def test_a_worker_and_a_producer_carry_on_through_a_patroni_failover(workers):
    required_tool("patroni")
    patroni = script("patroni_pair")
    pair = patroni.PatroniPair(say=lambda _: None)
    try:
        pair.start()
        with psycopg.connect(pair.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE rivet")
        url = pair.url("rivet")
        env = child_environ(url)
        migrated = manage("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        _produce(env, "before", BEFORE)
        worker = workers.start(
            "--queue", QUEUE, "--log-format", "json", "--poll-interval", "0.2",
            "--lease-ttl-secs", "2", env=env,
        )  # fmt: skip
        workers.wait_for(lambda: _counts(url) == {"done": BEFORE}, "the first tasks done")
        leader = pair.leader()
        assert leader.name == "node1"

        started = time.monotonic()
        assert pair.kill_host(leader) >= 3  # Patroni, the postmaster, its server processes
        secs = patroni.writable_after(url, started)

        assert pair.leader().name == "node2"
        # Patroni promotes once the dead leader's key expires (its ttl), not before.
        assert patroni.TTL / 2 <= secs <= 60, secs
        assert _counts(url) == {"done": BEFORE}  # the synchronous standby had every commit
        _produce(env, "after", AFTER)
        workers.wait_for(
            lambda: _counts(url) == {"done": BEFORE + AFTER},
            "the tasks enqueued after the failover done by the same worker",
            limit=60,
        )
        assert worker.running, worker.log
        assert worker.events("claim_failed") or worker.events("heartbeat_failed"), worker.log
    finally:
        for started_worker in workers.started:
            started_worker.kill()
        pair.close()
    assert not pair.root.exists()
