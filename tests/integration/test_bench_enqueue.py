"""measure_enqueue, the bench's enqueue figure: it measures, and leaves the queue as it found it."""

import subprocess
import sys

import pytest
from django.db import ProgrammingError, connection

from bench import enqueue as enqueue_bench
from bench.enqueue import (
    first_fsync_table,
    fsync_rate,
    measure_enqueue,
    measure_producers,
    settle_server,
    statement_rate,
)
from rivet.models import Task


@pytest.mark.django_db(transaction=True)
def test_measure_enqueue_reports_both_rates_and_leaves_nothing_behind() -> None:
    Task.objects.create(queue="eb-bench", kind="noop", payload={"left": "over"})
    Task.objects.create(queue="eb-other", kind="noop")
    figures = measure_enqueue(single=12, bulk=30, batch=8, queue="eb-bench", runs=2, keyed=True)
    assert figures["single_per_s"] > 0 and figures["bulk_per_s"] > 0
    assert figures["single_store_per_s"] > 0 and figures["bulk_store_per_s"] > 0
    assert len(figures["single_runs"]) == len(figures["bulk_runs"]) == 2
    assert (figures["single"], figures["bulk"], figures["batch"]) == (12, 30, 8)
    assert list(Task.objects.values_list("queue", flat=True)) == ["eb-other"]


def test_measure_enqueue_refuses_a_negative_count_or_nothing_to_measure() -> None:
    with pytest.raises(ValueError, match="single=-1"):
        measure_enqueue(single=-1)
    with pytest.raises(ValueError, match="not both 0"):
        measure_enqueue(single=0, bulk=0)
    with pytest.raises(ValueError, match="runs=0"):
        measure_enqueue(runs=0)


@pytest.mark.django_db(transaction=True)
def test_measure_enqueue_skips_a_count_of_zero() -> None:
    figures = measure_enqueue(single=0, bulk=20, batch=8, queue="eb-bench")
    assert figures["single_per_s"] == 0.0 and figures["single_secs"] == 0.0
    assert figures["single_store_per_s"] == 0.0 and figures["bulk_store_per_s"] > 0
    assert figures["bulk_per_s"] > 0 and figures["bulk_secs"] > 0


@pytest.mark.django_db(transaction=True)
def test_the_producers_share_the_single_enqueues_and_leave_nothing_behind() -> None:
    Task.objects.create(queue="eb-other", kind="noop")
    figures = measure_enqueue(single=10, bulk=0, queue="eb-bench", runs=2, producers=3)
    assert figures["producers"] == 3 and len(figures["producers_runs"]) == 2
    assert figures["producers_per_s"] > 0 and figures["producers_client_us"] > 0
    # None when the server is not on this machine; CPU is counted in clock ticks (10 ms).
    server = figures["producers_server_us"]
    assert server is None or server >= 0
    assert figures["commit_rate"] is None  # fsync not asked for
    assert list(Task.objects.values_list("queue", flat=True)) == ["eb-other"]


@pytest.mark.django_db(transaction=True)
def test_one_producer_process_enqueues_every_task_it_was_given() -> None:
    figures = measure_producers(1, 7, "eb-bench", "x")
    assert figures["per_s"] > 0
    # Its 7, and the one it connected with (outside the timing).
    assert Task.objects.filter(queue="eb-bench").count() == 8
    Task.objects.filter(queue="eb-bench").delete()


@pytest.mark.django_db(transaction=True)
def test_the_statement_ceiling_runs_the_producers_statement_from_pgbench() -> None:
    found = statement_rate(3, 10, "eb-bench", "x" * 5)
    assert found["per_s"] > 0 and found["clients"] == 3
    assert found["note"] == "pgbench -M prepared, 3 clients, 12 statements"
    # Four each (10 shared among 3, rounded up), each the task a producer would have written.
    tasks = Task.objects.filter(queue="eb-bench")
    assert tasks.count() == 12
    assert set(tasks.values_list("kind", "state", "max_attempts", "priority", "idem_key")) == {
        ("noop", "pending", 3, 0, None)
    }
    assert {task.payload["pad"] for task in tasks} == {"xxxxx"}
    tasks.delete()


@pytest.mark.django_db(transaction=True)
def test_the_producers_ceiling_is_measured_each_round_and_leaves_nothing_behind() -> None:
    figures = measure_enqueue(single=6, bulk=0, queue="eb-bench", runs=2, producers=2)
    assert len(figures["producers_ceiling_runs"]) == 2
    assert figures["producers_ceiling_per_s"] > 0
    assert figures["producers_ceiling_note"].startswith("pgbench -M prepared, 2 clients")
    assert not Task.objects.filter(queue="eb-bench").exists()


@pytest.mark.django_db
def test_without_pgbench_the_statement_ceiling_says_why(monkeypatch) -> None:
    monkeypatch.setattr(enqueue_bench, "_pg_program", lambda name: None)
    found = statement_rate(8, 100, "eb-bench", "x")
    assert found == {"per_s": None, "clients": 8, "note": "pgbench not found"}


@pytest.mark.django_db
def test_a_failing_pgbench_is_named_with_its_words(monkeypatch, tmp_path) -> None:
    program = tmp_path / "pgbench"
    program.write_text("#!/bin/sh\necho 'connection to server failed' >&2\nexit 1\n")
    program.chmod(0o755)
    monkeypatch.setattr(enqueue_bench, "_pg_program", lambda name: str(program))
    found = statement_rate(8, 100, "eb-bench", "x")
    assert found["per_s"] is None
    assert found["note"] == "pgbench failed (exit 1): connection to server failed"


def test_measure_enqueue_refuses_negative_producers() -> None:
    with pytest.raises(ValueError, match="producers=-1"):
        measure_enqueue(producers=-1)


PG_TEST_FSYNC = """\
5 seconds per test
O_DIRECT supported on this platform for open_datasync and open_sync.

Compare file sync methods using one 8kB write:
(in wal_sync_method preference order, except fdatasync is Linux's default)
        open_datasync                      7007.450 ops/sec     143 usecs/op
        fdatasync                          5936.813 ops/sec     168 usecs/op
        fsync                              8281.843 ops/sec     121 usecs/op
        fsync_writethrough                              n/a
        open_sync                          9894.411 ops/sec     101 usecs/op

Compare file sync methods using two 8kB writes:
(in wal_sync_method preference order, except fdatasync is Linux's default)
        open_datasync                      4324.840 ops/sec     231 usecs/op
        fdatasync                          7206.053 ops/sec     139 usecs/op
"""


def test_the_commit_rate_is_read_for_the_servers_sync_method_from_one_write() -> None:
    assert fsync_rate(PG_TEST_FSYNC, "fdatasync") == 5936.813
    assert fsync_rate(PG_TEST_FSYNC, "open_sync") == 9894.411
    assert fsync_rate(PG_TEST_FSYNC, "fsync_writethrough") is None
    assert fsync_rate("pg_test_fsync: could not open output file", "fdatasync") is None


#: A stand-in for pg_test_fsync: prints PG_TEST_FSYNC a line at a time, then waits as the real
#: one goes on testing; on SIGTERM it writes the file argv[1] names (pg_test_fsync removes its
#: test file then) and exits 1.
FAKE_FSYNC = """\
import signal, sys, time

def stopped(signum, frame):
    open(sys.argv[1], "w").write("terminated")
    sys.exit(1)

signal.signal(signal.SIGTERM, stopped)
for line in sys.stdin.read().splitlines():
    print(line, flush=True)
time.sleep(int(sys.argv[2]))
print("still here", flush=True)
"""


def _fake_fsync(tmp_path, text: str, sleep: int) -> list[str]:
    (tmp_path / "out.txt").write_text(text)
    script = tmp_path / "fake_pg_test_fsync.py"
    script.write_text(FAKE_FSYNC)
    feed = f"exec {sys.executable} {script} {tmp_path / 'stopped'} {sleep} < {tmp_path / 'out.txt'}"
    return ["sh", "-c", feed]


def test_pg_test_fsync_is_stopped_once_its_first_table_is_read(tmp_path) -> None:
    output = first_fsync_table(_fake_fsync(tmp_path, PG_TEST_FSYNC, 300))
    assert output == PG_TEST_FSYNC.split("\n\nCompare file sync methods using two")[0] + "\n\n"
    assert fsync_rate(output, "fdatasync") == 5936.813
    assert (tmp_path / "stopped").read_text() == "terminated"  # by SIGTERM, not waited for


def test_pg_test_fsync_ending_before_its_first_table_is_a_failure_with_its_words(tmp_path) -> None:
    command = [
        "sh",
        "-c",
        "echo '5 seconds per test'; echo 'could not open output file' >&2; exit 1",
    ]
    with pytest.raises(subprocess.CalledProcessError) as failed:
        first_fsync_table(command)
    assert failed.value.returncode == 1 and failed.value.output == "5 seconds per test\n"
    assert failed.value.stderr == "could not open output file\n"


def test_pg_test_fsync_that_never_finishes_its_table_is_killed_at_the_timeout(tmp_path) -> None:
    half = PG_TEST_FSYNC.split("        fsync ")[0]  # the table stops after fdatasync's line
    with pytest.raises(subprocess.TimeoutExpired) as late:
        first_fsync_table(_fake_fsync(tmp_path, half, 300), timeout=1.0)
    assert late.value.output == half and not (tmp_path / "stopped").exists()  # SIGKILLed


@pytest.mark.django_db
def test_a_failed_pg_test_fsync_is_named_in_the_commit_rate_note(monkeypatch, tmp_path) -> None:
    program = tmp_path / "pg_test_fsync"
    program.write_text("#!/bin/sh\necho 'could not open output file' >&2\nexit 1\n")
    program.chmod(0o755)
    monkeypatch.setattr(enqueue_bench, "_pg_test_fsync", lambda: str(program))
    found = enqueue_bench.commit_rate()
    assert found["per_s"] is None
    assert found["note"].startswith("pg_test_fsync failed: Command ")
    assert found["note"].endswith("returned non-zero exit status 1. (could not open output file)")


@pytest.mark.django_db
def test_without_pg_test_fsync_the_commit_rate_says_why(monkeypatch) -> None:
    monkeypatch.setattr(enqueue_bench, "_pg_test_fsync", lambda: None)
    found = enqueue_bench.commit_rate()
    assert found["per_s"] is None and found["note"] == "pg_test_fsync not found"
    assert found["method"] in {
        "fdatasync",
        "fsync",
        "open_datasync",
        "open_sync",
        "fsync_writethrough",
    }


@pytest.mark.django_db(transaction=True)
def test_a_producer_that_dies_before_the_start_fails_the_measurement(monkeypatch) -> None:
    def broken(count, queue, pad, ready, go):
        raise RuntimeError("no database here")

    monkeypatch.setattr(enqueue_bench, "_produce", broken)
    with pytest.raises(RuntimeError, match="a producer exited before the start"):
        measure_producers(2, 4, "eb-bench", "x")
    assert not Task.objects.filter(queue="eb-bench").exists()


def _checkpoint_lsn(cursor) -> str:
    cursor.execute("SELECT checkpoint_lsn::text FROM pg_control_checkpoint()")
    return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_settling_the_server_checkpoints_when_the_role_may() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone()[0], "the test database's role is expected to be a superuser"
        before = _checkpoint_lsn(cursor)
        Task.objects.create(queue="eb-bench", kind="noop")  # WAL since the last checkpoint
        assert settle_server(cursor) is True
        assert _checkpoint_lsn(cursor) != before


@pytest.fixture
def unprivileged_role():
    """A role that may neither vacuum rivet_task (not its owner) nor ask for a checkpoint."""
    name = "rivet_bench_unprivileged"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP ROLE IF EXISTS {name}")
        cursor.execute(f"CREATE ROLE {name} NOSUPERUSER")
    yield name
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
        cursor.execute(f"DROP ROLE IF EXISTS {name}")


@pytest.mark.django_db(transaction=True)
def test_a_role_that_may_not_checkpoint_is_told_apart_and_its_connection_goes_on(
    unprivileged_role,
) -> None:
    # Through Django's cursor (its wrapper around psycopg's error) and through psycopg's own.
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {unprivileged_role}")
        before = _checkpoint_lsn(cursor)
        assert settle_server(cursor) is False
        assert _checkpoint_lsn(cursor) == before
        cursor.execute("SELECT 1")
        cursor.execute("RESET ROLE")
    raw = connection.connection  # psycopg's connection, in autocommit as Django keeps it
    with raw.cursor() as cursor:
        cursor.execute(f"SET ROLE {unprivileged_role}")
        assert settle_server(cursor) is False
        cursor.execute("RESET ROLE")


@pytest.mark.django_db(transaction=True)
def test_another_failure_of_the_checkpoint_is_raised(monkeypatch) -> None:
    monkeypatch.setattr(enqueue_bench.queries, "BENCH_CHECKPOINT", "CHECKPOINT nonsense")
    with connection.cursor() as cursor, pytest.raises(ProgrammingError, match="syntax"):
        settle_server(cursor)
