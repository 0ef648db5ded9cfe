"""A first measurement of the scheduler at scale: N one-second schedules, W real workers.

    DATABASE_URL=postgres://... python scripts/measure_schedules.py --schedules 1000 --workers 4

Makes N schedules named ``scale-NNNN`` (``* * * * * *``, policy ``all``) whose ticks go to the
queue ``scale-ticks``, which no worker consumes; starts W ``rivet_worker`` processes (queue
``demo``), waits for them and two more seconds (the catch-up of the ticks owed from before they
started is not measured), then measures for ``--secs`` seconds and stops them with SIGTERM.

Lateness of a tick = when its task was first seen committed (a poller reads new task ids every
50 ms, so the figure is rounded up to that) minus the tick's time. Also printed: ticks enqueued
twice and ticks owed (from each schedule's own history) but missing, and the CPU the workers
used. Only rows it made are touched: its schedules and the tasks of its queue, removed at start.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
PREFIX, QUEUE = "scale-", "scale-ticks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--secs", type=float, default=30.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chaos_project.settings")
    import django

    django.setup()
    from rivet.models import Schedule, Task

    Task.objects.filter(queue=QUEUE).delete()
    Schedule.objects.filter(name__startswith=PREFIX).delete()
    Schedule.objects.bulk_create(
        Schedule(
            name=f"{PREFIX}{i:04d}",
            kind="noop",
            cron="* * * * * *",
            queue=QUEUE,
            missed="all",
            max_missed=1000,
            payload={"s": i},
        )
        for i in range(args.schedules)
    )
    fleet = start(args.workers)
    seen, cpu = measure(fleet, args.secs)
    for proc, _ in fleet:
        proc.send_signal(signal.SIGTERM)
    codes = [proc.wait(60) for proc, _ in fleet]
    report(args, seen, cpu, codes)


def start(count: int) -> list[tuple[subprocess.Popen, Path]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIVET_")}
    env["RIVET_READ_DOTENV"] = "0"
    fleet = []
    for i in range(count):
        log = Path(f"/tmp/rivet-measure-schedules-w{i}.log")
        with open(log, "wb") as out:
            argv = [sys.executable, str(ROOT / "manage.py"), "rivet_worker", "--queue", "demo"]
            argv += ["--owner", f"scale-{i}", "--log-format", "json"]
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        fleet.append((proc, log))
    while not all('"worker_started"' in log.read_text() for _, log in fleet):
        time.sleep(0.1)
    time.sleep(2)
    return fleet


def cpu_secs(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(fleet, secs: float) -> tuple[dict[int, float], list[float]]:
    """Poll for new task ids for ``secs`` seconds: id -> when first seen; CPU per worker."""
    from django.db import connection

    first_seen: dict[int, float] = {"start": time.time()}  # type: ignore[dict-item]
    stop = threading.Event()

    def poll() -> None:
        top = 0
        with connection.cursor() as cursor:
            while not stop.is_set():
                cursor.execute("SELECT id FROM rivet_task WHERE id > %s", [top - 5000])
                now = time.time()
                for (task_id,) in cursor.fetchall():
                    first_seen.setdefault(task_id, now)
                    top = max(top, task_id)
                time.sleep(0.05)

    before = [cpu_secs(proc.pid) for proc, _ in fleet]
    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(secs)
    stop.set()
    poller.join()
    cpu = [(cpu_secs(proc.pid) - b) / secs for (proc, _), b in zip(fleet, before, strict=True)]
    return first_seen, cpu


def report(args, first_seen: dict, cpu: list[float], codes: list[int]) -> None:
    from rivet.models import Schedule, Task
    from rivet.schedules.cron import due_ticks

    start = first_seen.pop("start")
    by_schedule: dict[int, list[datetime]] = {}
    late = []
    rows = Task.objects.filter(queue=QUEUE).values_list("id", "payload")
    for task_id, payload in rows:
        tick = datetime.fromisoformat(payload["scheduled_at"])
        by_schedule.setdefault(payload["s"], []).append(tick)
        if tick.timestamp() >= start and task_id in first_seen:
            late.append(first_seen[task_id] - tick.timestamp())
    twice = sum(len(ticks) - len(set(ticks)) for ticks in by_schedule.values())
    missing = 0
    for schedule in Schedule.objects.filter(name__startswith=PREFIX):
        zone = ZoneInfo(schedule.timezone)
        owed = due_ticks(
            schedule.cron, zone, after=schedule.since, now=schedule.last_tick_at, keep=None
        ).ticks
        missing += len(set(owed) - set(by_schedule.get(schedule.payload["s"], [])))
    late.sort()

    def q(p: float) -> float:
        return late[min(len(late) - 1, int(p * len(late)))]

    print(
        f"schedules={args.schedules} workers={args.workers} secs={args.secs:g} "
        f"exit codes={codes} ticks={sum(map(len, by_schedule.values()))} "
        f"enqueued twice={twice} missing={missing}"
    )
    print(
        f"lateness (s, ticks in the window: {len(late)}): p50={q(0.5):.3f} p90={q(0.9):.3f} "
        f"p99={q(0.99):.3f} max={late[-1]:.3f}"
    )
    print(f"worker CPU (s per s): {' '.join(f'{c:.3f}' for c in cpu)}")


if __name__ == "__main__":
    main()
