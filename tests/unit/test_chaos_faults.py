"""The --faults option's pure parts: names, seeded times, counting restarts, HTTP framing."""

from __future__ import annotations

import random
import signal
import socket
import threading

import pytest

from chaos_project.chaos.faults import (
    ALL_FAULTS,
    FAULTS,
    WINDOW,
    EffectRestart,
    FaultSet,
    fault_times,
    parse_faults,
    supervised_restarts,
)
from chaos_project.chaos.fleet import EventLog
from chaos_project.chaos.proxy import NetFaultRates, Reader, read_answer, read_message


def test_fault_names_parse_and_all_means_every_one_that_combines() -> None:
    assert parse_faults("db-restart") == {"db-restart"}
    assert parse_faults(" effect-net , db-restart ") == {"effect-net", "db-restart"}
    assert parse_faults("all") == set(ALL_FAULTS) == {"db-restart", "effect-restart", "effect-net"}
    assert parse_faults("failover,effect-net") == {"failover", "effect-net"}
    assert set(FAULTS) == set(ALL_FAULTS) | {"failover", "failover-async", "scheduler-stall"}


@pytest.mark.parametrize(
    "text, named",
    [("db-restrat", "'db-restrat'"), ("db-restart,nope", "'nope'"), ("", "''"), (",", "','")],
)
def test_a_bad_fault_name_is_refused_with_the_valid_ones(text: str, named: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_faults(text)
    message = str(raised.value)
    assert named in message
    valid = "db-restart, effect-restart, effect-net, failover, failover-async, scheduler-stall"
    assert f"valid: {valid}, or all" in message


def test_fault_times_are_seeded_inside_the_window_and_at_least_one() -> None:
    first = fault_times(random.Random("7/db-restart"), 15.0, 6.0)
    assert first == fault_times(random.Random("7/db-restart"), 15.0, 6.0)
    assert first != fault_times(random.Random("8/db-restart"), 15.0, 6.0)
    assert first == sorted(first)
    assert all(15.0 * WINDOW[0] <= t <= 15.0 * WINDOW[1] for t in first)
    assert len(fault_times(random.Random(1), 60.0, 6.0)) > len(first)
    assert len(fault_times(random.Random(1), 2.0, 60.0)) == 1


def test_each_fault_has_its_own_random_stream() -> None:
    faults = FaultSet(FAULTS, seed=7, duration=15.0)
    assert (
        faults.rng("db-restart").random()
        == FaultSet([], seed=7, duration=15.0).rng("db-restart").random()
    )
    assert faults.rng("db-restart").random() != faults.rng("effect-restart").random()


def test_an_unknown_fault_in_options_is_refused() -> None:
    with pytest.raises(Exception, match="unknown fault"):
        FaultSet({"db-restart", "disk-full"}, seed=1, duration=1.0)


def test_no_faults_means_no_report_lines() -> None:
    assert FaultSet([], seed=1, duration=1.0).report_lines([]) == []


def test_a_restart_is_counted_only_for_an_exit_the_harness_did_not_cause() -> None:
    records = [
        {"event": "start", "slot": 0},
        {"event": "exit", "slot": 0, "expected": False},  # died on its own, then restarted
        {"event": "start", "slot": 0},
        {"event": "exit", "slot": 1, "expected": True},  # retired by the harness
        {"event": "start", "slot": 1},
        {"event": "exit", "slot": 2, "expected": False},  # at the end: not restarted
    ]
    assert supervised_restarts(records) == 1


def test_net_fault_rates_must_make_sense() -> None:
    with pytest.raises(ValueError, match="add up to <= 1"):
        NetFaultRates(delay=0.5, drop=0.4, reset=0.2)


@pytest.fixture
def reader():
    """``reader(data)``: a Reader over a socket the other end wrote ``data`` to and closed."""
    opened: list[socket.socket] = []

    def make(data: bytes) -> Reader:
        ours, theirs = socket.socketpair()
        opened.append(ours)
        with theirs:
            theirs.sendall(data)
        return Reader(ours)

    yield make
    for sock in opened:
        sock.close()


def test_framing_finds_the_end_of_a_request_and_of_a_chunked_answer(reader) -> None:
    request = b"POST /effects HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    answer = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    requests = reader(request + b"GET /verify HTTP/1.1\r\nConnection: close\r\n\r\n")
    first = read_message(requests)
    assert first.raw == request and not first.close
    second = read_message(requests)
    assert second.first_line == "GET /verify HTTP/1.1" and second.close
    assert read_message(requests) is None
    got = read_answer(reader(answer + b"HTTP/1.1 200 OK\r\n"), method="POST")
    assert got.raw == answer


def test_an_answer_without_a_length_runs_to_the_end_of_the_connection(reader) -> None:
    answer = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    got = read_answer(reader(answer), method="GET")
    assert got.raw == answer and got.close


class SlowService:
    """Stands in for an EffectService whose start takes until ``started`` is set."""

    def __init__(self) -> None:
        self.pid, self.started = 100, threading.Event()

    def kill(self) -> int:
        return -signal.SIGKILL

    def spawn(self) -> None:
        self.pid += 1

    def wait_ready(self, timeout: float) -> None:
        assert self.started.wait(timeout)


def test_an_effect_restart_due_while_the_service_comes_back_is_skipped(tmp_path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    restart = EffectRestart(times=[1.0, 2.0, 9.0])
    restart.service = service = SlowService()
    restart.start(log)
    restart.tick(1.0)  # killed; the service is coming back
    restart.tick(2.5)  # the one due at 2.0 finds it still coming back
    service.started.set()
    restart.stop()

    assert restart.count() == 1
    events = [(r["event"], r.get("planned_at")) for r in log.records]
    assert events == [("skipped", 2.0), ("effect-restart", 1.0)]
    assert log.records[1]["old"] == 100 and log.records[1]["new"] == 101
