"""The mutation matrix, chaos half, one row in every suite: with the ack's epoch guard removed
from the PostgreSQL store (tests.mutation, postgres-ack), a quick chaos run must fail F2.

``make mutation`` runs every PostgreSQL mutant on three seeds (docs/chaos.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.mutation import ENV
from tests.processes import child_environ, postgres_url

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

MANAGE_PY = Path(__file__).resolve().parents[2] / "manage.py"
QUICK_RUN = ("--tasks", "500", "--workers", "4", "--duration-secs", "15", "--own-effect-service")


def test_a_store_whose_ack_ignores_the_epoch_fails_f2(effect_database_url):
    env = child_environ(
        postgres_url(),
        EFFECT_DATABASE_URL=effect_database_url,
        DJANGO_SETTINGS_MODULE="tests.mutation.settings",
        **{ENV: "postgres-ack"},
    )
    done = subprocess.run(
        [sys.executable, str(MANAGE_PY), "rivet_chaos", *QUICK_RUN, "--seed", "1"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "MUTANT postgres-ack" in output  # the mutant really ran
    assert done.returncode != 0, output
    assert "F2 FAILED" in output
    assert "a stale write went through the fence (task " in output  # applied, and named
    assert "S1 FAILED" not in output  # the key still guards the effect
