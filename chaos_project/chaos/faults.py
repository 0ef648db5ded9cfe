"""Faults the origin does not have, opt-in with ``rivet_chaos --faults NAME[,NAME]`` (or ``all``).

- ``db-restart``: the queue's PostgreSQL restarts mid-run (fast shutdown, then start). The run's
  queue database lives on a throwaway cluster of the harness's own (``pgcluster``), so no one
  else's server is ever restarted; workers that die of it are restarted, as a supervisor would.
- ``effect-restart``: the effect service (started by the harness) is SIGKILLed, master and
  workers, through pidfds, and started again.
- ``effect-net``: the workers reach the effect service through a seeded faulty proxy
  (``proxy``) that delays, drops and resets connections, including after the request reached
  the service and before its answer reached the worker.
- ``failover`` / ``failover-async``: the queue database runs on a primary and a synchronous
  (``failover``) or asynchronous (``failover-async``) streaming standby of the harness's own;
  once, the primary is SIGKILLed and the standby promoted, and everyone finds it through a
  multi-host connection string (``failover``). Not part of ``all``: they and ``db-restart`` each
  put the queue on a cluster of their own, so they cannot be combined.
- ``scheduler-stall``: a worker stops itself (SIGSTOP) inside its scheduler pass, holding its
  schedules' rows; the schedules must fire again within the idle bound while it is stopped
  (``stall``). Needs ``--schedules N``; not part of ``all``, which runs without schedules.

Each fault is a ``Fault``: the chaos loop calls ``start`` when the chaos begins, ``tick`` about
every 50 ms, ``stop`` when the chaos is over (the drain runs without faults), and each fault
counts what it observed happen. Each draws from its own ``random.Random`` seeded from the run's
seed and its name, so turning one fault on never changes the run's plan or another fault's.
``FaultSet`` is what the harness talks to.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any, Protocol

from django.db import connections

from chaos_project.chaos.failover import (
    FAILOVER,
    FAILOVER_ASYNC,
    MODES,
    Failover,
    FailoverError,
    kill_time,
    queue_on_pair,
)
from chaos_project.chaos.fleet import EventLog
from chaos_project.chaos.pgcluster import Cluster, ClusterError
from chaos_project.chaos.proxy import DELAY, DROP, RESET, FaultyProxy, NetFaultRates
from chaos_project.chaos.queuecluster import queue_on_cluster, wait_until_answers
from chaos_project.chaos.report import line
from chaos_project.chaos.stall import SCHEDULER_STALL, SchedulerStall, stall_times
from chaos_project.chaos.verifier import Verdict, Violation
from chaos_project.kit.pidfd import describe_exit
from rivet.errors import RivetError

DB_RESTART = "db-restart"
EFFECT_RESTART = "effect-restart"
EFFECT_NET = "effect-net"
FAULTS = (DB_RESTART, EFFECT_RESTART, EFFECT_NET, FAILOVER, FAILOVER_ASYNC, SCHEDULER_STALL)
ALL = "all"
#: What ``all`` names: every fault that runs beside every other one. The failovers put the
#: queue on a pair of clusters of their own, as db-restart puts it on one: one of them at a time.
ALL_FAULTS = (DB_RESTART, EFFECT_RESTART, EFFECT_NET)
#: Faults that move the queue database to clusters of the harness's own: at most one a run.
OWN_QUEUE_CLUSTER = (DB_RESTART, FAILOVER, FAILOVER_ASYNC)

#: Mean seconds between two restarts of one kind; a run has at least one of each enabled kind.
MEAN_GAP_SECS = {DB_RESTART: 6.0, EFFECT_RESTART: 10.0}
#: Restarts happen within this share of the chaos (workers are busy then; the drain is calm).
WINDOW = (0.1, 0.85)
EFFECT_START_TIMEOUT_SECS = 60.0
NET_DETAIL = {DELAY: "delay", DROP: "drop", RESET: "reset after request"}


class FaultError(RivetError):
    """A fault could not be set up or carried out; the message says why."""


def parse_faults(text: str) -> frozenset[str]:
    """``db-restart,effect-net`` or ``all`` as a set of names; ValueError names the valid ones,
    or the two that cannot be combined."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in (*FAULTS, ALL)]
    if unknown or not names:
        raise ValueError(
            f"unknown fault(s) {', '.join(map(repr, unknown)) or repr(text)}; valid: "
            f"{', '.join(FAULTS)}, or {ALL} for {', '.join(ALL_FAULTS)} (comma-separated)"
        )
    chosen = {name for name in names if name != ALL} | (set(ALL_FAULTS) if ALL in names else set())
    own = [name for name in OWN_QUEUE_CLUSTER if name in chosen]
    if len(own) > 1:
        raise ValueError(
            f"{' and '.join(own)} cannot be combined: each runs the queue database on clusters "
            "of its own (all includes db-restart); choose one"
        )
    return frozenset(chosen)


def fault_times(rng: random.Random, duration: float, mean_gap: float) -> list[float]:
    """Seconds into the chaos: one time drawn in each of equal slices of the window."""
    start, end = (duration * share for share in WINDOW)
    count = max(1, round((end - start) / mean_gap))
    width = (end - start) / count
    return [round(start + width * (i + rng.random()), 3) for i in range(count)]


class Fault(Protocol):
    """One kind of fault, driven by the chaos loop."""

    name: str

    def start(self, log: EventLog) -> None:
        """The chaos begins (seconds for ``tick`` count from here)."""

    def tick(self, now: float) -> None:
        """Do what is due ``now`` seconds into the chaos (a restart may block until done)."""

    def stop(self) -> None:
        """The chaos is over: inject nothing more."""

    def count(self) -> int:
        """How many faults happened, as observed (not as planned)."""

    def detail(self) -> str:
        """The report's note on this fault."""


class Scheduled:
    """A fault that happens at seeded times: ``fire`` carries out one and says if it happened."""

    name = ""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.happened = 0
        self.log: EventLog | None = None

    def start(self, log: EventLog) -> None:
        self.log = log

    def tick(self, now: float) -> None:
        while self.times and self.times[0] <= now:
            planned_at = self.times.pop(0)
            started = time.monotonic()
            fields = self.fire()
            fields["secs"] = round(time.monotonic() - started, 3)
            if fields.pop("happened"):
                self.happened += 1
                self.log.add(self.name, planned_at=planned_at, **fields)
            else:
                self.log.add("skipped", kind=self.name, planned_at=planned_at, **fields)

    def stop(self) -> None:
        self.times.clear()

    def count(self) -> int:
        return self.happened

    def detail(self) -> str:
        return ""

    def fire(self) -> dict[str, Any]:
        """Carry out one: ``happened`` (was it observed?) and fields for the event log."""
        raise NotImplementedError


class DbRestart(Scheduled):
    """``pg_ctl restart -m fast`` on the run's own cluster; the harness reconnects after it."""

    name = DB_RESTART

    def __init__(self, cluster: Cluster, times: list[float]) -> None:
        super().__init__(times)
        self.cluster = cluster

    def fire(self) -> dict[str, Any]:
        before = self.cluster.postmaster_pid()
        connections["default"].close()
        try:
            self.cluster.restart("fast")
        except ClusterError as exc:
            raise FaultError(f"db-restart: the throwaway cluster did not restart: {exc}") from exc
        try:
            wait_until_answers(self.cluster.url(connections["default"].settings_dict["NAME"]))
        except ClusterError as exc:
            raise FaultError(f"db-restart: {exc}") from exc
        after = self.cluster.postmaster_pid()
        return {"happened": after is not None and after != before, "old": before, "new": after}


class EffectRestart(Scheduled):
    """SIGKILL the effect service (master and workers) through pidfds, then start it again.

    The kill is at once; the new service starts on a thread (it takes seconds, more on a busy
    machine), so the chaos goes on meanwhile, against a service that is down. It is counted
    once it answers again with a new pid. A restart that falls due while the service is still
    coming back is skipped (recorded, not counted): deferred, it would follow at once, and on a
    busy machine the service would be down for most of the run.
    """

    name = EFFECT_RESTART

    def __init__(self, times: list[float]) -> None:
        super().__init__(times)
        self.service: Any = None  # chaos_project.kit.services.EffectService
        self._starting: threading.Thread | None = None
        self._pending: dict[str, Any] = {}

    def tick(self, now: float) -> None:
        if self._starting is not None:
            if self._starting.is_alive():
                while self.times and self.times[0] <= now:
                    reason = "the service was still coming back from the last one"
                    self.log.add(
                        "skipped", kind=self.name, planned_at=self.times.pop(0), reason=reason
                    )
                return
            self._back()
        if self.times and self.times[0] <= now:
            self._kill(self.times.pop(0))

    def stop(self) -> None:
        super().stop()
        if self._starting is not None:
            self._starting.join()
            self._back()

    def _kill(self, planned_at: float) -> None:
        before = self.service.pid
        status = self.service.kill()
        self._pending = {
            "planned_at": planned_at,
            "old": before,
            "status": describe_exit(status),
            "killed_at": time.monotonic(),
        }
        self.service.spawn()  # here, on the main thread: it dies with the harness, not a thread
        self._starting = threading.Thread(
            target=self._start, name="chaos-effect-restart", daemon=True
        )
        self._starting.start()

    def _start(self) -> None:
        try:
            self.service.wait_ready(timeout=EFFECT_START_TIMEOUT_SECS)
        except RuntimeError as exc:
            self._pending["error"] = str(exc)

    def _back(self) -> None:
        self._starting, pending = None, self._pending
        if "error" in pending:
            raise FaultError(f"effect-restart: the service did not come back: {pending['error']}")
        pending["new"] = self.service.pid
        pending["down_secs"] = round(time.monotonic() - pending.pop("killed_at"), 3)
        if pending["status"] == "SIGKILL" and pending["new"] != pending["old"]:
            self.happened += 1
            self.log.add(self.name, **pending)
        else:
            self.log.add("skipped", kind=self.name, **pending)


class EffectNet:
    """The faulty proxy between workers and the effect service; faults only during the chaos."""

    name = EFFECT_NET

    def __init__(self, seed: str, rates: NetFaultRates | None = None) -> None:
        self.seed = seed
        self.rates = rates or NetFaultRates()
        self.proxy: FaultyProxy | None = None
        self.log: EventLog | None = None

    def open(self, service_url: str) -> str:
        parts = urllib.parse.urlsplit(service_url)
        self.proxy = FaultyProxy((parts.hostname, parts.port), seed=self.seed, rates=self.rates)
        return self.proxy.start().url

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()

    def start(self, log: EventLog) -> None:
        self.log = log
        self.proxy.injecting = True

    def tick(self, now: float) -> None:
        pass  # the proxy's threads draw a fault for each request as it arrives

    def stop(self) -> None:
        if self.proxy is not None and self.proxy.injecting:
            self.proxy.injecting = False
            self.log.add(EFFECT_NET, requests=self.proxy.requests, **self.proxy.injected())

    def count(self) -> int:
        return sum(self.proxy.injected().values()) if self.proxy else 0

    def detail(self) -> str:
        injected = self.proxy.injected() if self.proxy else {}
        return " / ".join(f"{NET_DETAIL[k]} {injected.get(k, 0)}" for k in NET_DETAIL)


class FaultSet:
    """The faults of one run (possibly none: then every hook does nothing)."""

    def __init__(
        self,
        names: Iterable[str],
        *,
        seed: int,
        duration: float,
        say: Callable[[str], None] = print,
        queue: str = "chaos",
        enqueued: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        """``queue`` and ``enqueued`` (the keys whose enqueue returned so far) are what the
        failover counts its losses against."""
        self.queue = queue
        self.enqueued = enqueued
        self.names = frozenset(names)
        unknown = self.names - set(FAULTS)
        if unknown:
            raise FaultError(f"unknown fault(s) {sorted(unknown)}; valid: {', '.join(FAULTS)}")
        self.seed = seed
        self.duration = duration
        self.say = say
        self.faults: dict[str, Fault] = {}

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}/{name}")

    def check(self, *, keep: bool, effect_url: str | None, schedules: int = 0) -> None:
        """Refuse options a fault cannot work with, before anything is touched."""
        if SCHEDULER_STALL in self.names and not schedules:
            raise FaultError(
                "scheduler-stall stops a worker inside its scheduler pass, so the run needs "
                "schedules: add --schedules N (8 is plenty)"
            )
        for name in OWN_QUEUE_CLUSTER:
            if name in self.names and keep:
                raise FaultError(
                    f"--keep keeps the queue database's rows, but {name} runs the queue on new "
                    f"throwaway clusters; drop --keep or the {name} fault"
                )
        if EFFECT_RESTART in self.names and effect_url:
            raise FaultError(
                "effect-restart SIGKILLs and restarts an effect service the harness started "
                f"itself; it cannot restart the one at --effect-url {effect_url}; drop --effect-url"
            )

    @contextmanager
    def setup(self) -> Iterator[FaultSet]:
        """Before the run: the queue on its own cluster (db-restart); afterwards, tear down."""
        with ExitStack() as stack:
            stack.callback(self.stop)
            if DB_RESTART in self.names:
                try:
                    cluster = stack.enter_context(queue_on_cluster(self.say))
                except ClusterError as exc:
                    raise FaultError(
                        f"db-restart needs a throwaway cluster of its own: {exc}"
                    ) from exc
                times = fault_times(self.rng(DB_RESTART), self.duration, MEAN_GAP_SECS[DB_RESTART])
                self.faults[DB_RESTART] = DbRestart(cluster, times)
                self.say(f"db-restart: fast restarts of that cluster planned at {_secs(times)}")
            for name in (FAILOVER, FAILOVER_ASYNC):
                if name not in self.names:
                    continue
                try:
                    pair = stack.enter_context(
                        queue_on_pair(self.say, synchronous=name == FAILOVER)
                    )
                except (ClusterError, FailoverError) as exc:
                    raise FaultError(
                        f"{name} needs a primary and a standby of its own: {exc}"
                    ) from exc
                at = kill_time(self.seed, self.duration)
                self.faults[name] = Failover(pair, at=at, queue=self.queue, enqueued=self.enqueued)
                self.say(
                    f"{name}: SIGKILL of the primary (postmaster and every server process), "
                    f"then promotion of the {MODES[name]} standby, planned at "
                    f"{_secs([at])}"
                )
            if EFFECT_RESTART in self.names:
                times = fault_times(
                    self.rng(EFFECT_RESTART), self.duration, MEAN_GAP_SECS[EFFECT_RESTART]
                )
                self.faults[EFFECT_RESTART] = EffectRestart(times)
            if SCHEDULER_STALL in self.names:
                times = stall_times(self.rng(SCHEDULER_STALL), self.duration)
                self.faults[SCHEDULER_STALL] = SchedulerStall(times, self.queue)
                self.say(
                    f"scheduler-stall: a worker stopped inside its scheduler pass, planned at "
                    f"{_secs(times)}"
                )
            if EFFECT_NET in self.names:
                net = EffectNet(seed=f"{self.seed}/{EFFECT_NET}")
                stack.callback(net.close)
                self.faults[EFFECT_NET] = net
            yield self

    def effect_service_started(self, service: Any) -> None:
        """The harness started this effect service (an EffectService): effect-restart's target."""
        restart = self.faults.get(EFFECT_RESTART)
        if restart is not None:
            restart.service = service
            self.say(
                f"effect-restart: SIGKILL of the effect service (pid {service.pid}) and its "
                f"workers, then a restart, planned at {_secs(restart.times)}"
            )

    def fleet_started(self, fleet: Any) -> None:
        """The run's workers (a Fleet): what scheduler-stall stops."""
        stall = self.faults.get(SCHEDULER_STALL)
        if stall is not None:
            stall.fleet = fleet

    def worker_args(self) -> list[str]:
        """Worker flags a fault needs (scheduler-stall: a short idle bound)."""
        stall = self.faults.get(SCHEDULER_STALL)
        return stall.worker_args() if stall is not None else []

    def worker_effect_url(self, service_url: str) -> str:
        """The effect service URL the workers get: the faulty proxy's, with effect-net."""
        net = self.faults.get(EFFECT_NET)
        if net is None:
            return service_url
        url = net.open(service_url)
        r = net.rates
        self.say(
            f"effect-net: workers reach {service_url} through a faulty proxy at {url} "
            f"(per request: delay {r.delay:.0%} / drop {r.drop:.0%} / reset after request "
            f"{r.reset:.0%})"
        )
        return url

    def start(self, log: EventLog) -> None:
        restart = self.faults.get(EFFECT_RESTART)
        if restart is not None and restart.service is None:
            raise FaultError(
                "effect-restart needs an effect service the harness started itself, but the run "
                "uses one that was already answering; pass --own-effect-service"
            )
        for fault in self.faults.values():
            fault.start(log)

    def tick(self, now: float) -> None:
        for fault in self.faults.values():
            fault.tick(now)

    def stop(self) -> None:
        for fault in self.faults.values():
            fault.stop()

    def counts(self) -> dict[str, int]:
        return {name: fault.count() for name, fault in self.faults.items()}

    def failover(self) -> Failover | None:
        for name in (FAILOVER, FAILOVER_ASYNC):
            if name in self.faults:
                return self.faults[name]
        return None

    def after_run(self, log_dir: Any) -> None:
        """The workers are stopped and their logs complete: count the failover's losses."""
        failover = self.failover()
        if failover is not None:
            failover.judge(log_dir)

    def judge(self, verdict: Verdict) -> Verdict:
        """The verdict with the failover's part: a synchronous standby must lose nothing
        acknowledged (L1); an asynchronous one's losses are reported, and the F2 checks that a
        rolled-back write defeats (a claim's epoch handed out again) are not judged."""
        stall = self.faults.get(SCHEDULER_STALL)
        if stall is not None:
            verdict = replace(verdict, violations=(*verdict.violations, *stall.judge()))
        failover = self.failover()
        if failover is None or failover.loss is None:
            return verdict
        loss = failover.loss
        if failover.name == FAILOVER:
            found = list(verdict.violations)
            if loss.total():
                found.append(
                    Violation(
                        "L1",
                        f"the synchronous standby lacks writes acknowledged before the failover: "
                        f"{len(loss.enqueues)} enqueue(s) lost ({_few(loss.enqueues)}), "
                        f"{len(loss.acks)} ack(s) rolled back ({_few(loss.acks)}), "
                        f"{len(loss.claims)} claim(s) rolled back ({_few(loss.claims)})",
                    )
                )
            return replace(verdict, violations=tuple(found))
        if not loss.total():
            return verdict
        kept, waived = [], []
        for v in verdict.violations:
            (waived if v.code == "F2" and v.part in ("stale", "per task") else kept).append(v)
        failover.waived = [f"{v.code}: {v.message}" for v in waived]
        return replace(verdict, violations=tuple(kept))

    def summary(self) -> dict[str, Any]:
        """The failover's figures for the run's JSON; nothing without it."""
        found: dict[str, Any] = {}
        stall = self.faults.get(SCHEDULER_STALL)
        if stall is not None:
            found["scheduler_stall"] = stall.summary()
        failover = self.failover()
        if failover is not None:
            found["failover"] = failover.summary()
        return found

    def report_lines(self, records: list[dict[str, Any]]) -> list[str]:
        """The report's lines on faults; none when no fault was enabled."""
        if not self.faults:
            return []
        counts = {name: self.faults[name].count() for name in FAULTS if name in self.faults}
        detail = " / ".join(f"{name} {count}" for name, count in counts.items())
        lines = [line("faults", sum(counts.values()), f"({detail})")]
        if EFFECT_NET in self.faults:
            net = self.faults[EFFECT_NET]
            lines.append(line("effect-net faults", net.count(), f"({net.detail()})"))
        stall = self.faults.get(SCHEDULER_STALL)
        if stall is not None:
            longest = stall.longest_refire()
            lines.append(
                line(
                    "scheduler stalls",
                    stall.count(),
                    f"({stall.detail()}; stalled schedules fired again after at most "
                    f"{'-' if longest is None else f'{longest:.1f}'} s)",
                )
            )
        failover = self.failover()
        if failover is not None:
            lines += failover.report_lines()
        lines.append(
            line(
                "worker restarts",
                supervised_restarts(records),
                "(exits the harness did not cause; restarted as a supervisor would)",
            )
        )
        return lines


def supervised_restarts(records: list[dict[str, Any]]) -> int:
    """Workers that exited on their own (not by the harness's hand) and were started again."""
    return sum(
        1
        for r, after in zip(records, records[1:], strict=False)
        if r["event"] == "exit"
        and not r["expected"]
        and after["event"] == "start"
        and after["slot"] == r["slot"]
    )


def _few(items: list[Any]) -> str:
    return ", ".join(map(str, items[:5])) + (" ..." if len(items) > 5 else "") or "none"


def _secs(times: list[float]) -> str:
    return ", ".join(f"{t:g}" for t in times) + " s into the chaos"
