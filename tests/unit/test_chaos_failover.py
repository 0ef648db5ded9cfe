"""The failover fault's pure parts: its names, the multi-host URLs, the seeded kill, counting
what a promotion lost, the stall in acks, and the verdict each mode gets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connections

from chaos_project.chaos.failover import (
    WINDOW,
    Failover,
    Losses,
    Snapshot,
    ids_present,
    kill_time,
    losses,
    multi_host_url,
    replayed_all,
    reused_ids,
    stall,
    worker_writes,
)
from chaos_project.chaos.faults import FaultSet, parse_faults
from chaos_project.chaos.verifier import Figures, Verdict, Violation
from chaos_project.kit.services import database_url, host_list, libpq_url
from effect_project.dbconfig import database_from_url
from rivet.errors import RivetConfigError

URL = "postgresql://postgres@127.0.0.1:5433,127.0.0.1:5434/q?target_session_attrs=read-write"


@pytest.mark.parametrize(
    "text, refused",
    [
        ("failover,failover-async", "failover and failover-async cannot be combined"),
        ("failover,db-restart", "db-restart and failover cannot be combined"),
        ("all,failover-async", "db-restart and failover-async cannot be combined"),
    ],
)
def test_two_faults_that_each_own_the_queue_cluster_are_refused(text: str, refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        parse_faults(text)


def test_the_failover_names_parse_alone_and_beside_the_effect_faults() -> None:
    assert parse_faults("failover") == {"failover"}
    assert parse_faults("failover-async,effect-restart") == {"failover-async", "effect-restart"}


def test_keep_is_refused_with_a_failover() -> None:
    faults = FaultSet(["failover"], seed=1, duration=15.0)
    with pytest.raises(Exception, match="--keep .* failover runs the queue on new throwaway"):
        faults.check(keep=True, effect_url=None)


def test_the_multi_host_url_names_every_node_and_asks_for_the_writable_one() -> None:
    assert multi_host_url([5433, 5434], "q") == (
        "postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/q?target_session_attrs=read-write"
    )


def test_a_multi_host_url_reaches_django_and_libpq_whole() -> None:
    config = database_from_url(URL)
    assert config["HOST"] == "127.0.0.1,127.0.0.1"
    assert config["PORT"] == "5433,5434"
    assert config["OPTIONS"] == {"target_session_attrs": "read-write"}
    assert libpq_url(URL) == URL  # libpq's own parameter is kept for psycopg


def test_host_list_pairs_hosts_with_ports() -> None:
    assert host_list("a,b", "1,2") == "a:1,b:2"
    assert host_list("a,b", "5432") == "a:5432,b:5432"
    assert host_list("a", 5432) == "a:5432"
    with pytest.raises(RivetConfigError, match="2 host.*3 ports"):
        host_list("a,b", "1,2,3")


def test_a_worker_gets_the_multi_host_url_back_from_the_harness_settings() -> None:
    # The harness hands its workers database_url() of its own alias; with a failover that
    # alias has two hosts and target_session_attrs, and the URL must keep both.
    connections.settings["failover_test"] = {
        **database_from_url(URL),
        "NAME": "q",
    }
    try:
        url = database_url("failover_test")
    finally:
        del connections.settings["failover_test"]
    assert (
        url == "postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/q?target_session_attrs=read-write"
    )
    back = database_from_url(url)
    assert (back["HOST"], back["PORT"], back["OPTIONS"]) == (
        "127.0.0.1,127.0.0.1",
        "5433,5434",
        {"target_session_attrs": "read-write"},
    )


def test_the_kill_is_seeded_inside_its_window() -> None:
    assert kill_time(7, 15.0) == kill_time(7, 15.0)
    assert kill_time(7, 15.0) != kill_time(8, 15.0)
    for seed in range(50):
        assert 15.0 * WINDOW[0] <= kill_time(seed, 15.0) <= 15.0 * WINDOW[1]


SNAPSHOT = Snapshot(keys=frozenset({"k1", "k2"}), done=frozenset({1}), epochs={1: 2, 2: 1})


def test_losses_are_what_clients_were_told_and_the_standby_lacks() -> None:
    found = losses(
        SNAPSHOT,
        enqueued=["k1", "k2", "k3"],
        acked=[1, 2],
        claimed={1: 2, 2: 2},
    )
    assert (found.enqueues, found.acks, found.claims) == (["k3"], [2], [2])
    assert losses(SNAPSHOT, enqueued=["k1"], acked=[1], claimed={1: 1}).total() == 0


def test_reused_ids_are_ids_claimed_on_the_old_primary_that_the_standby_lacked_and_now_exist():
    # 1 and 2 reached the standby; 3, 4 and 5 were claimed on the old primary only; after the
    # run the new primary has tasks 3 and 5 (its sequence handed them out again), not 4.
    assert reused_ids(SNAPSHOT, claimed_before=[1, 2, 3, 4, 5], now=[1, 2, 3, 5, 9]) == [3, 5]
    assert reused_ids(SNAPSHOT, claimed_before=[1, 2], now=[1, 2, 3]) == []
    record = Losses(reused=[3, 5]).record()
    assert (record["ids_reused"], record["samples"]["ids_reused"]) == (2, [3, 5])
    assert Losses(reused=[3, 5]).total() == 0  # a consequence of lost enqueues, reported


@pytest.mark.django_db(transaction=True)
def test_ids_present_reads_which_ids_name_a_task_on_a_real_database() -> None:
    from rivet.stores import store_for_alias
    from rivet.values import TaskSpec

    if connections["default"].vendor != "postgresql":
        pytest.fail("ids_present reads a PostgreSQL database: run with DATABASE_URL set to one")
    store = store_for_alias("default")
    made = [
        store.task_enqueue(TaskSpec(queue="fo", kind="noop", payload=n)).task_id for n in (1, 2)
    ]
    url = libpq_url(database_url("default"))
    assert ids_present(url, [*made, max(made) + 1000]) == set(made)
    assert ids_present(url, []) == set()


def _line(ts: float, event: str, **fields) -> str:
    stamp = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return json.dumps({"ts": stamp, "level": "info", "event": event, **fields})


def test_worker_writes_reads_acks_and_claims_logged_before_the_promotion(tmp_path: Path) -> None:
    lines = [
        _line(100.0, "claimed", task=1, epoch=1),
        _line(100.5, "acked", task=1, epoch=1),
        _line(101.0, "claimed", task=2, epoch=3),
        _line(101.0, "claimed", task=2, epoch=2),
        _line(103.0, "acked", task=2, epoch=3),  # after the promotion: the new primary's
        _line(103.0, "claimed", task=4, epoch=1),
        '{"ts": "2026-12-03T07:00:00.0',  # cut by a SIGKILL
    ]
    (tmp_path / "chaos-w0-g1.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "effect-service.log").write_text(_line(100.0, "acked", task=9, epoch=1))
    acked, claimed = worker_writes(tmp_path, before=102.0)
    assert acked == {1}
    assert claimed == {1: 1, 2: 3}


def test_the_stall_runs_from_the_last_ack_on_the_old_primary_to_the_first_on_the_new() -> None:
    # killed at 10, promoted at 10.5: the ack at 10.1 was committed by the old primary
    gap, first = stall([9.0, 9.8, 10.1, 12.0, 12.5], killed=10.0, promoted=10.5)
    assert (round(gap, 3), round(first, 3)) == (1.9, 2.0)
    assert stall([9.0, 10.1], killed=10.0, promoted=10.5) is None


def _failover(name: str, loss: Losses) -> FaultSet:
    faults = FaultSet([name], seed=1, duration=15.0)
    fault = Failover.__new__(Failover)
    fault.name, fault.loss, fault.waived, fault.record = name, loss, [], {"planned_at": 5.0}
    faults.faults[name] = fault
    return faults


F2_PARTS = (
    Violation("F2", "stale", part="stale"),
    Violation("F2", "per task", part="per task"),
    Violation("F2", "none", part="none"),
)


def _verdict(*violations: Violation) -> Verdict:
    figures = Figures(
        tasks_enqueued=1,
        effects_written=1,
        tasks_done=1,
        duplicate_effects=0,
        done_without_effect=0,
        still_pending=0,
        dead_worker_lost=0,
        dead_poison=0,
        dead_other=0,
        fenced_writes=1,
    )
    return Verdict(figures=figures, violations=violations)


def test_a_synchronous_failover_that_lost_an_acknowledged_write_fails_l1() -> None:
    faults = _failover("failover", Losses(enqueues=["chaos-1-7"]))
    verdict = faults.judge(_verdict())
    assert verdict.failed_codes() == ["L1"]
    assert "1 enqueue(s) lost (chaos-1-7)" in verdict.violations[0].message
    assert faults.judge(_verdict(*F2_PARTS)).failed_codes() == ["F2", "L1"]
    assert _failover("failover", Losses()).judge(_verdict()).ok


def test_an_asynchronous_failover_reports_its_losses_and_waives_only_what_they_explain() -> None:
    faults = _failover("failover-async", Losses(claims=[3]))
    verdict = faults.judge(_verdict(*F2_PARTS))
    assert [v.part for v in verdict.violations] == ["none"]  # F2 = 0 is still judged
    assert faults.failover().waived == ["F2: stale", "F2: per task"]
    # Nothing lost: nothing waived.
    assert _failover("failover-async", Losses()).judge(_verdict(*F2_PARTS)).violations == F2_PARTS


@pytest.mark.parametrize(
    ("received", "replayed", "done"),
    [
        ("0/30A8000", "0/30A8000", True),
        ("0/30A7FF0", "0/30A7FF8", True),
        ("0/30A8000", "0/30A7FF0", True),  # the page's last 16 bytes: no record fits there
        ("0/30A8000", "0/30A7FE0", False),  # 32 bytes: a record could have started there
        ("0/30A7FF8", "0/30A7FF0", False),  # not at a page boundary: a record is still to come
        ("1/0", "0/FFFFFFF0", True),
    ],
)
def test_the_standby_has_replayed_all_it_received(received: str, replayed: str, done: bool) -> None:
    assert replayed_all(received, replayed) is done
