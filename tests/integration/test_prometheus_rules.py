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
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from chaos_project.kit.services import free_port
from rivet.values import Claimed
from rivet.worker.metrics import WORKER_EVENTS, WorkerMetrics
from tests.factories import UserFactory, task_in
from tests.tools import required_tool

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rivet" / "contrib" / "prometheus" / "rivet-rules.yml"
RULE_TESTS = REPO / "tests" / "prometheus" / "rivet-rules.test.yml"
DASHBOARD = REPO / "rivet" / "contrib" / "grafana" / "rivet-dashboard.json"
#: A metric name in PromQL (recording rules are named rivet:...: not matched).
METRIC = re.compile(r"\brivet_[a-z0-9_]+\b")


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
    assert sorted(fed - exported) == []


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
