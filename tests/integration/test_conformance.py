"""rivet.conformance against every store: ids memory-<check>, sqlite-<check>, postgres-<check>,
postgres_plain-<check> (the PostgreSQL store with its speed paths off: every statement the
plain way, rivet.stores.postgres.wire) and pgbouncer-<check> (the PostgreSQL store through
PgBouncer in transaction pooling)."""

from __future__ import annotations

import pytest

from rivet.conformance import CHECKS, NEEDS, Harness, checks_for, names_for
from rivet.stores.memory import FakeClock, MemoryStore

# Per store: the capabilities its harness offers (conftest.py builds it) and its database mark.
STORES = {
    "memory": (frozenset({"concurrent"}), []),
    "sqlite": (
        frozenset({"concurrent", "atomic"}),
        [pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)],
    ),
    "postgres": (
        frozenset({"concurrent", "atomic"}),
        [pytest.mark.django_db(transaction=True)],
    ),
    "postgres_plain": (
        frozenset({"concurrent", "atomic"}),
        [pytest.mark.django_db(transaction=True)],
    ),
    "pgbouncer": (
        frozenset({"concurrent", "atomic"}),
        [pytest.mark.django_db(transaction=True)],
    ),
}


def _params() -> list:
    return [
        pytest.param(store, name, marks=marks, id=f"{store}-{name}")
        for store, (capabilities, marks) in STORES.items()
        for name in names_for(capabilities)
    ]


@pytest.mark.parametrize(("harness", "check_name"), _params(), indirect=["harness"])
def test_store_conformance(harness: Harness, check_name: str) -> None:
    missing = NEEDS[check_name] - harness.capabilities
    assert not missing, f"the {harness.store.name} harness lacks {sorted(missing)}"
    CHECKS[check_name](harness)


def test_checks_share_one_store() -> None:
    """The documented loop: every check, one after another, on a single store."""
    clock = FakeClock()
    h = Harness(store=MemoryStore(clock=clock), advance=clock.advance)
    ran = [name for name, check in checks_for(h) if check(h) is None]
    assert ran == names_for({"concurrent"})
    assert len(ran) >= 24


def test_capabilities_select_checks() -> None:
    """A harness without a capability is not given the checks that need it."""
    clock = FakeClock()
    h = Harness(store=MemoryStore(clock=clock), advance=clock.advance, concurrent=False)
    names = [name for name, _ in checks_for(h)]
    assert "enqueue_joins_the_callers_transaction" not in names
    assert "concurrent_claimers_never_share_a_task" not in names
    assert "claim_takes_a_lease" in names
