"""The mutation matrix, conformance half: every mutant (one guard of a SQL store removed, see
tests.mutation) fails at least one rivet.conformance check, and which ones is reported.

Two rows run in every suite; ``make mutation`` runs them all (RIVET_MUTATION_MATRIX=1), with
each mutant's chaos runs, and writes the table of docs/chaos.md.
"""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rivet.conformance import Harness, checks_for
from tests.mutation import CONFORMANCE_STORES, MUTATIONS, applied

#: The rows every suite runs: one per SQL store.
ALWAYS = ("postgres-ack", "sqlite-retry")
ALL_ROWS = os.environ.get("RIVET_MUTATION_MATRIX") == "1"
#: A JSON-lines file each row appends its findings to (make mutation's table reads it).
REPORT = os.environ.get("RIVET_MUTATION_REPORT")

MARKS = {
    "sqlite": [pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)],
    "postgres": [pytest.mark.django_db(transaction=True)],
    "memory": [],
}


def _params() -> list:
    params = []
    for name, mutation in MUTATIONS.items():
        if mutation.store not in CONFORMANCE_STORES:
            continue  # the effect service's and the handler's: chaos rows only
        if not ALL_ROWS and name not in ALWAYS:
            continue  # a row of make mutation: left uncollected, so nothing reads as skipped
        marks = list(MARKS[mutation.store])
        params.append(pytest.param(mutation.store, name, marks=marks, id=name))
    return params


#: A check a mutant makes hang (a claim whose floor walk never ends on rows that are not
#: pending) fails after this long instead of holding the matrix; the rest of its checks are
#: not run.
CHECK_LIMIT_SECS = 30


class CheckHung(Exception):
    pass


@contextmanager
def time_limit(secs: int) -> Iterator[None]:
    """Raise CheckHung in this (the main) thread after ``secs`` seconds."""

    def hung(signum, frame):
        raise CheckHung(f"the check did not finish in {secs} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(secs)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("harness", "mutant"), _params(), indirect=["harness"])
def test_every_mutant_fails_the_conformance_suite(harness: Harness, mutant: str) -> None:
    failed: dict[str, str] = {}
    with applied(mutant):
        for name, check in checks_for(harness):
            try:
                with time_limit(CHECK_LIMIT_SECS):
                    check(harness)
            except Exception as exc:  # noqa: BLE001 - any failure of a check is a catch
                failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                if not isinstance(exc, AssertionError):
                    failed[name] += " | " + traceback.format_exc(limit=1).splitlines()[-1][:100]
                if isinstance(exc, CheckHung):
                    break  # caught; the rest would hang as well, one limit each
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as out:
            out.write(json.dumps({"mutant": mutant, "conformance": sorted(failed)}) + "\n")
    assert failed, f"mutant {mutant} passed every conformance check: the suite misses it"
