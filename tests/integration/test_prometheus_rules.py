"""The Prometheus rules and the Grafana dashboard rivet ships (rivet/contrib/), checked for real.

promtool (Debian's prometheus package; scripts/find_promtool.py, which `make test` runs,
installs it) checks the rules and runs their unit tests (tests/prometheus/). Every metric the
rules and the dashboard query must be one rivet exports: the names are read from real scrapes,
the host's ``GET rivet/metrics/`` and a worker's metrics endpoint, and compared.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from chaos_project.kit.services import free_port
from rivet.jobs import JobRegistry, job
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.validation import build_spec
from rivet.values import Claimed
from rivet.worker import Worker
from rivet.worker.metrics import WORKER_EVENTS, WorkerMetrics
from tests.factories import UserFactory, task_in
from tests.tools import required_tool
from tests.unit.worker_kit import Background, blocking_job, make_worker, wait_until

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rivet" / "contrib" / "prometheus" / "rivet-rules.yml"
RULE_TESTS = REPO / "tests" / "prometheus" / "rivet-rules.test.yml"
DASHBOARD = REPO / "rivet" / "contrib" / "grafana" / "rivet-dashboard.json"
#: A metric name in PromQL (recording rules are named rivet:...: not matched).
METRIC = re.compile(r"\brivet_[a-z0-9_]+\b")
#: Series Prometheus makes itself (``up``: whether a target was scraped), which rules may read.
PROMETHEUS_OWN = {"up"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool's path (scripts/find_promtool.py finds it; `make test` installs it first)."""
    return required_tool("promtool")


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return exprs + [v["definition"] for v in board["templating"]["list"] if "definition" in v]


def series_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def queue_scrape() -> str:
    """The host's rivet/metrics/ with a queue that has a ready and a dead task."""
    task_in("default", queue="mail")
    task_in("default", queue="mail", dead=True)
    api = APIClient()
    api.force_login(UserFactory(permissions=["rivet.view_task"]))
    response = api.get("/rivet/metrics/")
    assert response.status_code == 200
    return response.content.decode()


def worker_scrape() -> str:
    """A worker's metrics endpoint after one event of every kind it counts."""
    metrics = WorkerMetrics(slots=2, busy=lambda: 1.0)
    claimed = Claimed(
        task_id=1, queue="mail", kind="send", payload=None, idem_key=None, attempt=1,
        max_attempts=3, epoch=1, owner="w",
    )  # fmt: skip
    for event in WORKER_EVENTS:
        metrics.event(event, claimed)
    metrics.handler_seconds(claimed, 0.2)
    metrics.buried(1)
    port = free_port()
    metrics.serve(port, addr="127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def test_promtool_finds_the_rules_clean(promtool) -> None:
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_the_rules_pass_their_promtool_unit_tests(promtool) -> None:
    tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True)
    assert tested.returncode == 0, tested.stdout.decode() + tested.stderr.decode()


@pytest.mark.django_db
def test_every_metric_the_rules_and_the_dashboard_query_is_exported() -> None:
    exported = series_names(queue_scrape()) | series_names(worker_scrape())
    assert "rivet_queue_dead" in exported and "rivet_worker_acks_total" in exported
    for source, exprs in [("rules", rule_exprs()), ("dashboard", dashboard_exprs())]:
        queried = {name for expr in exprs for name in METRIC.findall(expr)}
        assert queried, f"no metric found in the {source}"
        unknown = sorted(queried - exported)
        assert unknown == [], f"the {source} query metrics rivet does not export: {unknown}"
    # The series the unit tests feed promtool are real names too.
    fed = {s["series"].split("{")[0] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]
           for s in t["input_series"]}  # fmt: skip
    assert sorted(fed - exported - PROMETHEUS_OWN) == []


@pytest.mark.django_db
def test_the_dashboard_shows_every_metric_rivet_exports() -> None:
    exported = series_names(queue_scrape()) | series_names(worker_scrape())
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported}
    shown = {
        re.sub(r"_(total|bucket|sum|count)$", "", name)
        for expr in dashboard_exprs()
        for name in METRIC.findall(expr)
    }
    assert sorted(families - shown) == []


def test_the_recording_rules_the_alerts_use_are_defined() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    used = {name for expr in rule_exprs() for name in re.findall(r"\brivet:[a-z0-9_:]+", expr)}
    assert used and used <= recorded


# -- The lost and abandoned alerts against the series a real worker exports --------------------


class DeadHeartbeats(MemoryStore):
    """A store whose heartbeats fail: the worker leaves the attempt to lapse (lost)."""

    def lease_extend(self, leases, lease_ttl):
        raise ConnectionError("database unreachable")


def exported(worker: Worker, *names: str) -> dict[tuple[tuple[str, str], ...], dict[str, float]]:
    """The worker's samples of ``names``: labels -> {name: value}, as a scrape reads them."""
    text = generate_latest(worker.metrics.registry).decode()
    found: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names:
                found.setdefault(tuple(sorted(s.labels.items())), {})[s.name] = s.value
    return found


NAMES = ("rivet_worker_lost_total", "rivet_worker_abandoned_total")


def lost_scrapes() -> tuple[dict, dict]:
    """Scrapes of a worker before its first claim and after an attempt it left to lapse, made
    the way that happens: its heartbeats fail until the lease runs out."""
    jobs = JobRegistry()
    blocking_job(jobs)
    store = DeadHeartbeats(clock=FakeClock())
    store.task_enqueue(build_spec(queue="q", kind="block", payload=None))
    worker = make_worker(store, jobs, lease_ttl=0.2, metrics=True, max_jobs=1)
    before = exported(worker, *NAMES)
    running = Background(worker)
    wait_until(lambda: worker.counts["lost"] == 1, "the lease to lapse")
    running.stop()
    return before, exported(worker, *NAMES)


def abandoned_scrapes() -> tuple[dict, dict]:
    """Scrapes of a worker before its first claim and after it abandoned a handler that would
    not stop (the worker then gives up, as it does)."""
    jobs = JobRegistry()
    release = threading.Event()
    job("stuck", registry=jobs)(lambda ctx: release.wait(30))
    store = MemoryStore(clock=FakeClock())
    store.task_enqueue(build_spec(queue="q", kind="stuck", payload=None))
    worker = make_worker(
        store, jobs, concurrency=1, lease_ttl=0.2, job_timeout=0.1, shutdown_timeout=0.2,
        metrics=True,
    )  # fmt: skip
    before = exported(worker, *NAMES)
    try:
        worker.run()  # returns once its only slot is abandoned
    finally:
        release.set()
    assert worker.counts["abandoned"] == 1
    return before, exported(worker, *NAMES)


def as_input_series(instance: str, before: dict, after: dict) -> list[dict[str, str]]:
    """promtool input series of a worker scraped at ``before`` for 3 minutes, then ``after``,
    after 2 minutes in which it was not up."""
    series = []
    for labels, values in after.items():
        for name, value in values.items():
            start = before.get(labels, {}).get(name)
            first = "_x3" if start is None else f"{start:g}x3"  # absent: not exported yet
            selector = ",".join(f'{k}="{v}"' for k, v in labels)
            series.append(
                {
                    "series": f'{name}{{{selector},job="w",instance="{instance}"}}',
                    "values": f"_x2 {first} {value:g}x20",
                }
            )
    return series


def annotations(alert: str, instance: str) -> dict[str, str]:
    """The alert's annotations as the rules file writes them, for one instance."""
    rules = [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    (rule,) = [rule for rule in rules if rule.get("alert") == alert]
    return {
        key: text.replace("{{ $labels.instance }}", instance)
        for key, text in rule["annotations"].items()
    }


@pytest.mark.django_db  # the worker closes its Django connections on the way out
def test_the_first_lost_and_abandoned_attempts_of_a_worker_fire_their_alerts(
    promtool, tmp_path
) -> None:
    series = as_input_series("w1:9100", *lost_scrapes())
    series += as_input_series("w2:9100", *abandoned_scrapes())
    alerts = {"RivetWorkerLostAttempts": "w1:9100", "RivetWorkerAbandonedHandlers": "w2:9100"}
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": alert,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "job": "w", "instance": at},
                                "exp_annotations": annotations(alert, at),
                            }
                        ],
                    }
                    for alert, at in alerts.items()
                ],
            }
        ],
    }
    path = tmp_path / "worker-series.test.yml"
    path.write_text(yaml.safe_dump(tests))
    tested = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True)
    assert tested.returncode == 0, (
        yaml.safe_dump(series) + tested.stdout.decode() + tested.stderr.decode()
    )
