"""A real worker process serves its Prometheus metrics on --metrics-port; a test scrapes them."""

from __future__ import annotations

import signal
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rivet.values import TaskState
from rivet.worker.metrics import WORKER_EVENTS

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def scrapable(port: int) -> dict | None:
    try:
        return scrape(port)
    except OSError:
        return None


def test_a_worker_counts_its_attempts_by_queue_and_kind(workers):
    done = [workers.enqueue("noop") for _ in range(3)]
    dead = workers.enqueue("fail", max_attempts=2)
    port = free_port()
    worker = workers.start(
        "--queue", "demo", "--metrics-port", str(port), "--concurrency", "3",
        "--poll-interval", "0.05", "--retry-backoff-secs", "0", "--retry-backoff-cap-secs", "0",
    )  # fmt: skip
    workers.wait_for(lambda: scrapable(port), "the metrics port to answer")
    workers.wait_for(
        lambda: (
            workers.task(dead).state == TaskState.DEAD
            and all(workers.task(t).state == TaskState.DONE for t in done)
        ),
        "the tasks to finish",
    )
    samples = scrape(port)
    noop, fail = {"queue": "demo", "kind": "noop"}, {"queue": "demo", "kind": "fail"}
    assert sample(samples, "rivet_worker_claims_total", **noop) == 3
    assert sample(samples, "rivet_worker_acks_total", **noop) == 3
    assert sample(samples, "rivet_worker_claims_total", **fail) == 2
    assert sample(samples, "rivet_worker_retries_total", **fail) == 1
    assert sample(samples, "rivet_worker_dead_total", **fail) == 1
    assert sample(samples, "rivet_worker_handler_duration_seconds_count", **noop) == 3
    assert sample(samples, "rivet_worker_handler_duration_seconds_count", **fail) == 2
    assert sample(samples, "rivet_worker_slots") == 3
    assert sample(samples, "rivet_worker_slots_busy") == 0
    assert sample(samples, "rivet_worker_fenced_total", **noop) == 0  # none happened
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log


def test_a_worker_exports_every_counter_at_0_before_its_first_claim(workers):
    # increase() sees nothing in a series whose first sample is 1: the first lost or abandoned
    # attempt would raise no alert unless its series was already there at 0.
    port = free_port()
    worker = workers.start("--queue", "demo,other", "--metrics-port", str(port))
    samples = workers.wait_for(lambda: scrapable(port), "the metrics port to answer")
    for queue in ("demo", "other"):
        for kind in ("noop", "fail", "sleep"):  # kinds the test project has handlers for
            labels = {"queue": queue, "kind": kind}
            for event in WORKER_EVENTS.values():
                assert sample(samples, f"{event[0]}_total", **labels) == 0, (event, labels)
            assert sample(samples, "rivet_worker_handler_duration_seconds_count", **labels) == 0
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log


def test_the_busy_gauge_counts_running_handlers(workers):
    workers.enqueue("sleep", {"ms": 60_000})
    port = free_port()
    worker = workers.start(
        "--queue", "demo", "--poll-interval", "0.05", "--shutdown-timeout", "0",
        env=workers.env(RIVET_METRICS_PORT=str(port)),
    )  # fmt: skip
    samples = workers.wait_for(
        lambda: (s := scrapable(port)) and sample(s, "rivet_worker_slots_busy") == 1 and s,
        "the sleeping handler to show as busy",
    )
    assert sample(samples, "rivet_worker_claims_total", queue="demo", kind="sleep") == 1
    worker.send(signal.SIGTERM)
    assert worker.wait() == 3, worker.log  # the sleeper was abandoned at shutdown


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--metrics-port", "0"], {}, "--metrics-port must be a TCP port number, 1..65535"),
        ([], {"RIVET_METRICS_PORT": "http"}, "RIVET_METRICS_PORT must be a TCP port number"),
    ],
)
def test_a_bad_metrics_port_is_refused_with_exit_2(workers, args, env, message):
    worker = workers.start("--queue", "demo", "--once", *args, env=workers.env(**env))
    assert worker.wait() == 2
    assert message in worker.log


def test_a_metrics_port_in_use_is_refused_with_exit_2(workers):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = workers.start("--queue", "demo", "--once", "--metrics-port", str(port))
        assert worker.wait() == 2
    assert f"--metrics-port {port}: cannot listen there" in worker.log
