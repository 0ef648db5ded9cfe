"""Enqueue speed, measured from outside: the producer API called in a loop, timed by the caller.

``measure_enqueue`` is what ``rivet_chaos bench`` reports as enqueue/s. It times what a
producer pays: ``rivet.enqueue`` one call at a time (each its own transaction, committed before
the next call), the same from several producer processes at once (``measure_producers``: each
call still its own commit, so the server's commit rate and the machine's CPU bound it), and
``rivet.enqueue_many`` in batches, on the configured store (PostgreSQL in the bench). One
producer's calls are bounded by the WAL flushes the server's disk sustains, one per commit:
``commit_rate`` measures them with PostgreSQL's ``pg_test_fsync``. The bench queue is emptied
before and after (and rivet_task VACUUMed), so the figures never depend on what an earlier run
left behind, and the run leaves nothing behind either.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.pq
from django.db import connections
from psycopg.errors import InsufficientPrivilege

from chaos_project.kit import queries
from chaos_project.kit.pidfd import Child
from rivet.conf import rivet_settings
from rivet.producer import enqueue, enqueue_many, resolve_store, task_spec
from rivet.stores import store_for_queue
from rivet.values import TaskSpec

#: Kind of the measured tasks: the bench's noop, never run here (no worker is started).
KIND = "noop"


#: Producer processes of the concurrent single-enqueue row (``--enqueue-producers``).
PRODUCERS = 8
#: Seconds for the producers to connect, or to finish, before the measurement is given up.
PRODUCER_TIMEOUT_SECS = 120.0


def measure_enqueue(
    single: int = 5000,
    bulk: int = 200_000,
    batch: int = 10_000,
    queue: str = "bench",
    *,
    runs: int = 1,
    payload_bytes: int = 100,
    keyed: bool = False,
    producers: int = 0,
    fsync: bool = False,
) -> dict[str, Any]:
    """Time ``single`` one-at-a-time enqueues and ``bulk`` tasks enqueued ``batch`` at a time.

    Each of the ``runs`` rounds measures both; the figures are the medians over the rounds.
    ``keyed`` gives every task an idempotency key (the dedup path). Returns
    ``{"single_per_s", "bulk_per_s", "single_store_per_s", "bulk_store_per_s", "single_secs",
    "bulk_secs", "single_runs", "bulk_runs", "single", "bulk", "batch", "payload_bytes",
    "keyed", "producers", "producers_per_s", "producers_runs", "producers_client_us",
    "producers_server_us", "producers_ceiling_per_s", "producers_ceiling_runs",
    "producers_ceiling_note", "commit_rate"}``, the ``*_runs`` being every round's figure and
    ``*_store_per_s`` the same tasks through the store's own call, validated beforehand (what
    the statements allow). ``producers`` > 0 also times ``single`` one-at-a-time enqueues
    shared among that many processes at once (``measure_producers``), and their statement
    alone from as many pgbench connections (``statement_rate``: the ``producers_ceiling_*``
    figures; None, with the note saying why, without pgbench); ``fsync`` measures the
    server disk's commit rate once (``commit_rate``; None when not asked). The bench queue is
    emptied before each measurement and after the last. A count of 0 skips that measurement
    (its rate and seconds read 0.0).
    """
    if min(single, bulk, producers) < 0 or min(batch, runs) < 1 or single + bulk == 0:
        raise ValueError(
            "single, bulk and producers must be >= 0 (0: not measured), single and bulk not "
            "both 0, batch and runs >= 1; got "
            f"single={single}, bulk={bulk}, producers={producers}, batch={batch}, runs={runs}"
        )
    pad = "x" * payload_bytes
    single_runs, bulk_runs, single_store, bulk_store = [], [], [], []
    crowd: list[dict[str, Any]] = []
    statement: list[dict[str, Any]] = []
    try:
        for round_ in range(runs):
            tag = f"{time.time_ns()}-{round_}"
            if single:
                empty_queue(queue)
                single_runs.append(_time_single(single, queue, pad, keyed and f"s{tag}"))
                empty_queue(queue)
                specs = _specs(single, queue, pad, keyed and f"S{tag}")
                single_store.append(_time_store_single(specs))
            if single and producers:
                empty_queue(queue)
                crowd.append(measure_producers(producers, single, queue, pad))
                empty_queue(queue)
                statement.append(statement_rate(producers, single, queue, pad))
            if bulk:
                empty_queue(queue)
                bulk_runs.append(_time_bulk(bulk, batch, queue, pad, keyed and f"b{tag}"))
                empty_queue(queue)
                specs = _specs(bulk, queue, pad, keyed and f"B{tag}")
                bulk_store.append(_time_store_bulk(specs, batch))
    finally:
        empty_queue(queue)
    server_us = [c["server_us"] for c in crowd if c["server_us"] is not None]
    ceilings = [c["per_s"] for c in statement if c["per_s"] is not None]
    return {
        "single_per_s": _median(single_runs),
        "bulk_per_s": _median(bulk_runs),
        "single_store_per_s": _median(single_store),
        "bulk_store_per_s": _median(bulk_store),
        "single_secs": round(single / _median(single_runs), 3) if single else 0.0,
        "bulk_secs": round(bulk / _median(bulk_runs), 3) if bulk else 0.0,
        "single_runs": single_runs,
        "bulk_runs": bulk_runs,
        "single": single,
        "bulk": bulk,
        "batch": batch,
        "payload_bytes": payload_bytes,
        "keyed": keyed,
        "producers": producers if single else 0,
        "producers_per_s": _median([c["per_s"] for c in crowd]),
        "producers_runs": [c["per_s"] for c in crowd],
        "producers_client_us": _median([c["client_us"] for c in crowd]) if crowd else None,
        "producers_server_us": _median(server_us) if server_us else None,
        # The producers' ceiling: their statement alone from as many pgbench connections.
        "producers_ceiling_per_s": _median(ceilings) if ceilings else None,
        "producers_ceiling_runs": ceilings,
        "producers_ceiling_note": statement[-1]["note"] if statement else None,
        "commit_rate": commit_rate() if fsync and single else None,
    }


def measure_producers(producers: int, tasks: int, queue: str, pad: str) -> dict[str, Any]:
    """``tasks`` one-at-a-time ``rivet.enqueue`` calls shared among ``producers`` processes at
    once, each with its own connection and each call its own commit, as web processes send
    them. Returns ``{"per_s", "client_us", "server_us"}``: tasks per second from the moment all
    are released to the last one's end (each connected and warmed up by one enqueue first), and
    the CPU microseconds per enqueue in the producers and in their server backends (None when
    the server is not on this machine: its processes are read from /proc).
    """
    shares = [tasks // producers + (1 if n < tasks % producers else 0) for n in range(producers)]
    # Two pipes: each producer writes a byte on "ready" once connected; the bench writes one
    # byte per producer on "go" to release them all at once (or closes it: they give up).
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    open_fds = {ready_r, ready_w, go_r, go_w}
    children: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="rivet-producers-") as folder:
        try:
            for n, count in enumerate(shares):

                def main(count: int = count) -> int:
                    os.close(ready_r)
                    os.close(go_w)
                    return _produce(count, queue, pad, ready_w, go_r)

                log = Path(folder) / f"producer-{n}.log"
                children.append(Child(env=dict(os.environ), log_path=log, main=main))
            for fd in (ready_w, go_r):  # the children's ends
                os.close(fd)
                open_fds.discard(fd)
            _read_exactly(ready_r, producers, children)
            started = time.monotonic()
            os.write(go_w, b"g" * producers)
            reports = [_report(child) for child in children]
        finally:
            for fd in open_fds:
                os.close(fd)
            for child in children:
                if child.returncode is None and child.wait(PRODUCER_TIMEOUT_SECS) is None:
                    child.stop(5.0)
    ended = max(report["ended"] for report in reports)
    servers = [report["server_cpu"] for report in reports]
    return {
        "per_s": sum(shares) / (ended - started),
        "client_us": sum(r["client_cpu"] for r in reports) / sum(shares) * 1e6,
        "server_us": None if None in servers else sum(servers) / sum(shares) * 1e6,
    }


#: pgbench's rate line (PostgreSQL 13 on), and its older form.
TPS_LINE = re.compile(
    r"^tps = (?P<tps>[0-9.]+) \((?:without initial connection time|excluding)", re.MULTILINE
)
#: A positional parameter of the enqueue statement's text.
POSITIONAL = re.compile(r"\$(\d+)")


def statement_rate(clients: int, tasks: int, queue: str, pad: str) -> dict[str, Any]:
    """The concurrent-producer row's ceiling: the store's own enqueue statement, the one a
    ``rivet.enqueue`` outside a transaction sends, prepared and run ``tasks`` times from
    ``clients`` pgbench connections at once, each execution its own commit, with the values a
    producer sends for the bench's task. pgbench is C: what this leaves out is the producers'
    Python, so the rate is what the server (and the machine it shares with the clients) gives
    that statement at that many connections. Returns ``{"per_s": float | None, "clients",
    "note"}``; ``per_s`` is None, and ``note`` says why, when pgbench could not be run.

    NULL values are written into the statement's text (pgbench's variables are never NULL);
    the others are pgbench variables, which ``-M prepared`` sends as parameters, as libpq does
    for the producer. The rows it inserts are the bench queue's, emptied after it as after
    every measurement.
    """
    from rivet.stores.postgres import DIRECT_ENQUEUE, PostgresStore  # noqa: PLC0415

    base = {"per_s": None, "clients": clients}
    store = store_for_queue(queue)  # the producers' store: rivet.enqueue routes the queue
    if not isinstance(store, PostgresStore):
        return {**base, "note": f"the store is {type(store).__name__}, not PostgreSQL"}
    program = _pg_program("pgbench")
    if program is None:
        return {**base, "note": "pgbench not found"}
    spec = task_spec(KIND, {"n": 0, "pad": pad}, queue=queue)
    # The values the store's single enqueue binds for this task, in $1, $2, ... order (the
    # store's own parameter builders: the bench reads them, it does not copy them).
    encoded = DIRECT_ENQUEUE.encode({**store._common_params(), **store._spec_params(spec)})
    if encoded is None:
        return {**base, "note": "the bench task's values are not the direct statement's kinds"}
    text = POSITIONAL.sub(
        lambda m: "NULL" if encoded[int(m[1]) - 1] is None else f":p{m[1]}",
        DIRECT_ENQUEUE.text.decode(),
    )
    variables = [
        arg
        for n, value in enumerate(encoded, 1)
        if value is not None
        for arg in ("-D", f"p{n}={value.decode()}")
    ]
    params = connections[store.using].get_connection_params()
    libpq = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
    conninfo = psycopg.conninfo.make_conninfo(
        "",
        **{k: v for k, v in params.items() if k in libpq and k != "password" and v is not None},
    )
    env = dict(os.environ)
    if params.get("password"):
        env["PGPASSWORD"] = str(params["password"])
    per_client = -(-tasks // clients)
    with tempfile.TemporaryDirectory(prefix="rivet-pgbench-") as folder:
        script = Path(folder) / "enqueue.sql"
        script.write_text(text + ";\n")
        command = [
            program, "-n", "-M", "prepared", "-c", str(clients),
            "-j", str(min(clients, os.cpu_count() or 1)), "-t", str(per_client),
            "-f", str(script), *variables, conninfo,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=PRODUCER_TIMEOUT_SECS
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return {**base, "note": f"pgbench failed: {exc}"}
    found = TPS_LINE.search(done.stdout) if done.returncode == 0 else None
    if found is None:
        said = " ".join((done.stderr or done.stdout).split())[-300:]
        return {**base, "note": f"pgbench failed (exit {done.returncode}): {said}"}
    return {
        **base,
        "per_s": float(found["tps"]),
        "note": f"pgbench -M prepared, {clients} clients, {per_client * clients} statements",
    }


def _produce(count: int, queue: str, pad: str, ready: int, go: int) -> int:
    """A producer process: connect (one enqueue), say so, wait for the start, enqueue ``count``
    tasks one call at a time, print what it measured as one JSON line."""
    enqueue(KIND, {"n": -1, "pad": pad}, queue=queue)
    backend = _backend_cpu_reader()
    os.write(ready, b"r")
    if os.read(go, 1) != b"g":
        return 1  # the bench gave up before the start
    cpu, server = time.process_time(), backend()
    for n in range(count):
        enqueue(KIND, {"n": n, "pad": pad}, queue=queue)
    ended = time.monotonic()
    server_after = backend()
    report = {
        "ended": ended,
        "client_cpu": time.process_time() - cpu,
        "server_cpu": None if server is None or server_after is None else server_after - server,
    }
    # To the log (file descriptor 1: Child points it there), whatever sys.stdout is now.
    os.write(1, (json.dumps(report) + "\n").encode())
    return 0


def _backend_cpu_reader() -> Any:
    """A function giving the CPU seconds of this connection's server process so far, or None
    when that process is not on this machine (or not readable)."""
    with connections[rivet_settings.DATABASE_ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float | None:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
                return None  # a pid of a server elsewhere, or a different local process
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    return read


def _read_exactly(fd: int, count: int, children: list[Child]) -> None:
    """Wait for ``count`` bytes on ``fd`` (each producer's ready), or give up with why."""
    deadline = time.monotonic() + PRODUCER_TIMEOUT_SECS
    got = 0
    while got < count:
        if any(child.poll() is not None for child in children):
            died = next(child for child in children if child.returncode is not None)
            raise RuntimeError(f"a producer exited before the start: {died.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the producers were not all connected after {PRODUCER_TIMEOUT_SECS} s"
            )
        if select.select([fd], [], [], 0.2)[0]:
            got += len(os.read(fd, count - got))


def _report(child: Child) -> dict[str, Any]:
    code = child.wait(PRODUCER_TIMEOUT_SECS)
    if code != 0:
        raise RuntimeError(f"a producer failed (exit {code}): {child.log_tail()}")
    return json.loads(child.log_path.read_text().strip().splitlines()[-1])


#: pg_test_fsync's line for one sync method, under "using one 8kB write".
FSYNC_LINE = re.compile(r"^\s*(?P<method>[a-z_]+)\s+(?P<ops>[0-9.]+) ops/sec", re.MULTILINE)


def commit_rate() -> dict[str, Any]:
    """The WAL flushes per second the server's disk sustains: ``pg_test_fsync``, one 8 kB write
    synced by the server's ``wal_sync_method``, one after another, as one producer's commits
    come. Returns ``{"per_s": float | None, "method", "note"}``; ``per_s`` is None (and
    ``note`` says why) when pg_test_fsync could not be run.

    The test file goes on the filesystem of the server's data directory when this process can
    reach it (the server on this machine), else in the temporary folder, and the note says
    which. A transaction's commit is one such flush; concurrent commits share one (group
    commit), so several producers can pass this rate, one cannot.
    """
    with connections[rivet_settings.DATABASE_ALIAS].cursor() as cursor:
        cursor.execute("SELECT current_setting('wal_sync_method')")
        method = cursor.fetchone()[0]
        try:
            cursor.execute("SELECT current_setting('data_directory')")
            data_dir = cursor.fetchone()[0]
        except Exception:  # noqa: BLE001 - only superusers and pg_read_all_settings see it
            data_dir = None
    program = _pg_test_fsync()
    if program is None:
        return {"per_s": None, "method": method, "note": "pg_test_fsync not found"}
    folder, where = _fsync_folder(data_dir)
    with tempfile.TemporaryDirectory(prefix="rivet-fsync-", dir=folder) as scratch:
        try:
            output = first_fsync_table(
                [program, "-s", "1", "-f", str(Path(scratch) / "fsync.test")]
            )
        except (OSError, subprocess.SubprocessError) as exc:
            said = " ".join((getattr(exc, "stderr", None) or "").split())
            note = f"pg_test_fsync failed: {exc}" + (f" ({said})" if said else "")
            return {"per_s": None, "method": method, "note": note}
    rate = fsync_rate(output, method)
    if rate is None:
        return {"per_s": None, "method": method, "note": f"pg_test_fsync has no {method} line"}
    return {"per_s": rate, "method": method, "note": where}


#: The header of pg_test_fsync's first table, the one ``fsync_rate`` reads.
ONE_WRITE = "using one 8kB write"
#: Seconds pg_test_fsync may take to print its first table (five one-second tests) and stop.
FSYNC_TIMEOUT_SECS = 60.0


def first_fsync_table(command: list[str], timeout: float = FSYNC_TIMEOUT_SECS) -> str:
    """pg_test_fsync's output up to the end of its first table (one 8 kB write per sync), the
    program stopped there: its later tables (two writes, write sizes, ...) are not read, and at
    one second a test they are most of its run. SIGTERM is what pg_test_fsync cleans up on (it
    removes its test file). Raises ``CalledProcessError`` when the program ends before the table
    does, ``TimeoutExpired`` when it has not after ``timeout`` seconds (it is killed then)."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    lines: list[str] = []
    in_table = done = False
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if in_table and not line.strip():  # the blank line that ends the table
                done = True
                break
            in_table = in_table or ONE_WRITE in line
    finally:
        if process.poll() is None:
            process.terminate()
        _, stderr = process.communicate()
        timed_out = not watchdog.is_alive()
        watchdog.cancel()
    output = "".join(lines)
    if timed_out and not done:
        raise subprocess.TimeoutExpired(command, timeout, output=output, stderr=stderr)
    if not done:
        raise subprocess.CalledProcessError(process.returncode, command, output, stderr)
    return output


def fsync_rate(output: str, method: str) -> float | None:
    """Operations per second of ``method`` in pg_test_fsync's output, from its first table
    (one 8 kB write per sync, as a commit of a small transaction); None if absent (n/a)."""
    if ONE_WRITE not in output:
        return None
    one_write = output.split(ONE_WRITE, 1)[1].split("Compare", 1)[0]
    rates = {m["method"]: float(m["ops"]) for m in FSYNC_LINE.finditer(one_write)}
    return rates.get(method)


def _pg_test_fsync() -> str | None:
    return _pg_program("pg_test_fsync")


def _pg_program(name: str) -> str | None:
    """PostgreSQL's program ``name``: on the PATH, else in ``pg_config --bindir``."""
    found = shutil.which(name)
    if found:
        return found
    try:
        bindir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    program = Path(bindir) / name
    return str(program) if os.access(program, os.X_OK) else None


def _fsync_folder(data_dir: str | None) -> tuple[str, str]:
    """A writable folder on the filesystem of ``data_dir``, and a note saying where it is."""
    default = tempfile.gettempdir()
    try:
        device = os.stat(data_dir).st_dev if data_dir else None
    except OSError:
        device = None
    if device is None:
        return (
            default,
            "on the bench's temporary folder: the server's data directory is not reachable here",
        )
    for folder in (default, os.getcwd(), str(Path(data_dir).parent)):
        try:
            if os.stat(folder).st_dev == device and os.access(folder, os.W_OK):
                return folder, "on the filesystem of the server's data directory"
        except OSError:
            continue
    return default, "on the bench's temporary folder: no writable folder on the server's filesystem"


def _specs(count: int, queue: str, pad: str, key_prefix: str | bool) -> list[TaskSpec]:
    """The tasks _time_single and _time_bulk enqueue, validated (outside the timing)."""
    return [
        task_spec(
            KIND,
            {"n": n, "pad": pad},
            queue=queue,
            idem_key=f"{key_prefix}-{n}" if key_prefix else None,
        )
        for n in range(count)
    ]


def _time_store_single(specs: list[TaskSpec]) -> float:
    """The store's own enqueue, one task a call: the statement and its commit, without the
    producer API around it (validation, defaults, finding the store)."""
    store = resolve_store()
    started = time.perf_counter()
    for spec in specs:
        store.task_enqueue(spec)
    return len(specs) / (time.perf_counter() - started)


def _time_store_bulk(specs: list[TaskSpec], batch: int) -> float:
    """The store's own bulk enqueue, ``batch`` validated tasks a call."""
    store = resolve_store()
    started = time.perf_counter()
    for start in range(0, len(specs), batch):
        store.task_enqueue_many(specs[start : start + batch])
    return len(specs) / (time.perf_counter() - started)


def _median(rates: list[float]) -> float:
    """The median rate of the rounds; 0.0 for a measurement that was not asked for."""
    return statistics.median(rates) if rates else 0.0


def empty_queue(queue: str) -> None:
    """Delete the queue's tasks and fenced-write records (other queues are left alone), then
    settle the server (``settle_server``): each measurement starts on a table whose dead rows
    are reclaimed, as autovacuum keeps it, whatever this server's autovacuum setting: with it
    off, the rounds' dead rows would pile up and make each round's inserts dearer than the
    last's (docs/decisions/0016-bench-settled-server.md)."""
    with connections[rivet_settings.DATABASE_ALIAS].cursor() as cursor:
        cursor.execute(queries.QUEUE_EMPTY_ONE, {"queue": queue})
        settle_server(cursor)


def settle_server(cursor: Any) -> bool:
    """``VACUUM (ANALYZE) rivet_task``, then ``CHECKPOINT``: the measurement that follows starts
    with no dead rows and no dirty pages left by the ones before it. True when the checkpoint
    ran; False when this role may not ask for one (a superuser or, from PostgreSQL 15, a member
    of pg_checkpoint may), and the measurement may then share the disk with one.

    Why: the bench writes about half a GB of WAL a minute, so the server is nearly always in a
    checkpoint the earlier measurements started, writing their pages while the next one's
    commits wait on the same disk, which slows the enqueue rows most
    (docs/decisions/0016-bench-settled-server.md). ``cursor``: Django's or psycopg's, in
    autocommit (VACUUM cannot run in a transaction)."""
    cursor.execute(queries.BENCH_VACUUM)
    try:
        cursor.execute(queries.BENCH_CHECKPOINT)
    except Exception as exc:  # psycopg's own error, or Django's wrapper with it as the cause
        if not any(isinstance(e, InsufficientPrivilege) for e in (exc, exc.__cause__)):
            raise
        return False
    return True


def _time_single(count: int, queue: str, pad: str, key_prefix: str | bool) -> float:
    started = time.perf_counter()
    for n in range(count):
        key = f"{key_prefix}-{n}" if key_prefix else None
        enqueue(KIND, {"n": n, "pad": pad}, queue=queue, idem_key=key)
    return count / (time.perf_counter() - started)


def _time_bulk(count: int, batch: int, queue: str, pad: str, key_prefix: str | bool) -> float:
    items = [
        {
            "kind": KIND,
            "payload": {"n": n, "pad": pad},
            "queue": queue,
            "idem_key": f"{key_prefix}-{n}" if key_prefix else None,
        }
        for n in range(count)
    ]
    started = time.perf_counter()
    for start in range(0, count, batch):
        enqueue_many(items[start : start + batch])
    return count / (time.perf_counter() - started)
