"""The guarantee, shown on the embedded default: one effect task, two deliveries, one effect.

Every line of evidence is read back from the queue database, the effect service or a worker's
exit status; nothing printed is a constant standing in for a measurement.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.management import call_command
from django.db import connections

from chaos_project.kit.services import EffectService, child_env, free_port, run_worker
from effect_project.client import fetch_verify
from rivet.errors import RivetError
from rivet.producer import enqueue, resolve_store
from rivet.values import TaskRecord

QUEUE = "demo"
KEY = "pay-1"
PAYLOAD = {"amount": 100}
LEASE_TTL_SECS = 2


class DemoFailed(RivetError):
    """A step did not show what it should; the message says what was seen instead."""


@dataclass
class Demo:
    effect_database_url: str
    say: Callable[[str], None] = print
    port: int = 8081

    def run(self) -> None:
        call_command("migrate", verbosity=0)
        self.store = resolve_store(None)
        vendor = connections["default"].vendor
        self.say(f"queue database: {vendor} ({settings.DATABASES['default']['NAME']})")
        port = free_port(self.port)
        with EffectService(database_url=self.effect_database_url, port=port) as service:
            self.say(f"effect service: {service.url} (waitress, effect database on its own file)")
            self.env = child_env(EFFECT_SERVICE_URL=service.url)
            self.service_url = service.url
            task_id = self.step_enqueue()
            self.step_abort(task_id)
            self.step_ready_again(task_id)
            self.step_redeliver(task_id)
            self.step_verify(task_id)

    def step_enqueue(self) -> int:
        self.say(f"\n1. enqueue one effect task with key {KEY}")
        result = enqueue("effect", PAYLOAD, queue=QUEUE, idem_key=KEY, using=self.store)
        if result.duplicate:
            raise DemoFailed(
                f"key {KEY} is already in this queue database (task {result.task_id}); "
                "run `make demo`, which starts from empty files in demo/"
            )
        self.say(f"   enqueued task {result.task_id} {PAYLOAD}")
        return result.task_id

    def step_abort(self, task_id: int) -> None:
        self.say("\n2. worker with RIVET_FAILPOINT=after_effect_before_ack:1.0")
        env = {**self.env, "RIVET_FAILPOINT": "after_effect_before_ack:1.0"}
        done = run_worker(
            "--queue", QUEUE, "--lease-ttl-secs", str(LEASE_TTL_SECS), "--once", env=env
        )
        if done.returncode != -signal.SIGABRT:
            raise DemoFailed(f"the worker should abort with SIGABRT, it exited {done.returncode}")
        self.say(f"   the worker died of SIGABRT (exit status {done.returncode})")
        report = fetch_verify(self.service_url)
        self.say(f"   effect service: effects written {report['effects_written']}")
        task = self._task(task_id)
        self.say(f"   task {task_id}: state {task.state}, attempts {task.attempts}, not acked")
        if task.state != "pending" or report["effects_written"] != 1:
            raise DemoFailed(f"expected one effect and a pending task, saw {report} and {task}")

    def step_ready_again(self, task_id: int) -> None:
        self.say(f"\n3. stats: once the {LEASE_TTL_SECS}s lease lapses, the task is ready again")
        deadline = time.monotonic() + 10 * LEASE_TTL_SECS
        stats = self.store.queue_stats(QUEUE)
        while stats.ready != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            stats = self.store.queue_stats(QUEUE)
        self.say(
            f"   ready {stats.ready}, leased {stats.leased}, done {stats.done}, dead {stats.dead}"
        )
        if stats.ready != 1:
            raise DemoFailed(f"the task did not become ready again: {stats}")

    def step_redeliver(self, task_id: int) -> None:
        self.say("\n4. a normal worker: the task is delivered again and the handler runs in full")
        done = run_worker("--queue", QUEUE, "--lease-ttl-secs", "5", "--once", env=self.env)
        if done.returncode != 0:
            raise DemoFailed(f"the worker exited {done.returncode}: {done.stderr[-2000:]}")
        task = self._task(task_id)
        replay = bool(task.result and task.result.get("replay"))
        self.say(f"   the worker exited 0; the effect service answered replay={replay}")

    def step_verify(self, task_id: int) -> None:
        self.say("\n5. evidence")
        report = fetch_verify(self.service_url)
        task = self._task(task_id)
        self.say(f"   deliveries (attempts)    {task.attempts}")
        self.say(f"   effects written          {report['effects_written']}")
        self.say(f"   duplicate effects        {report['duplicate_effects']}")
        self.say(f"   task state               {task.state}")
        self.say(f"   fenced writes            {self.store.fenced_count(QUEUE)}")
        ok = (
            task.attempts == 2
            and task.state == "done"
            and report["effects_written"] == 1
            and report["duplicate_effects"] == 0
            and report["ok"]
        )
        if not ok:
            raise DemoFailed(f"the guarantee did not show: task {task}, service {report}")
        self.say("\nTwo deliveries. One effect. The task reads done.")

    def _task(self, task_id: int) -> TaskRecord:
        task = self.store.task_get(task_id)
        if task is None:
            raise DemoFailed(f"task {task_id} is missing from the queue database")
        return task
