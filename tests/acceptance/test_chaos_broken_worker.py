"""The harness must fail a broken worker, naming the invariant it broke.

Each test runs a short chaos run whose workers were broken on purpose (tests/broken_chaos.py):
one sends its effect without a stable key, one writes with a lost lease. A harness that passed
either would prove nothing.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.processes import broken_chaos

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

RUN = ("--tasks", "150", "--workers", "4", "--duration-secs", "8", "--drain-timeout-secs", "30")


def broken_run(kind: str, seed: int, effect_database_url: str) -> subprocess.CompletedProcess:
    return broken_chaos(
        kind, *RUN, "--seed", str(seed), "--own-effect-service",
        effect_database_url=effect_database_url,
    )  # fmt: skip


def test_an_effect_without_its_key_fails_s1(effect_database_url):
    done = broken_run("keyless", 5, effect_database_url)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "S1 FAILED" in output
    # S1, and H5: each done task's result names an effect made under another key than its
    # own; not S2: every done task has its effect
    assert "invariants failed: S1, H5" in output
    assert "S2 FAILED" not in output


def test_a_write_with_a_lost_lease_that_goes_through_fails_f2(effect_database_url):
    done = broken_run("fenceless", 6, effect_database_url)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "F2 FAILED" in output
    assert "not fenced" in output or "no fenced write" in output
    assert "S1 FAILED" not in output  # the key still guards the effect
