"""Generic checks every Store must pass; a new store inherits the whole suite.

Each check is a plain function ``check_<name>(h: Harness) -> None`` that raises AssertionError
with a message saying what was expected and what the store did. ``CHECKS`` maps ``<name>`` to
the function; ``checks_for(h)`` yields the ones that apply to a harness (a check that needs a
capability, "atomic" or "concurrent", is left out when the harness does not offer it).

A store is tested by building a Harness around it::

    from rivet.conformance import Harness, checks_for

    clock = FakeClock()
    h = Harness(store=MyStore(clock=clock), advance=clock.advance, atomic=None)
    for name, check in checks_for(h):
        check(h)

``advance(secs)`` moves the store's notion of now forward: advance a fake clock, or, for a SQL
store whose clock is the server's, shift every stored timestamp back by ``secs``. ``atomic`` is
a context-manager factory for the caller's transaction (e.g.
``lambda: transaction.atomic(using=alias)``) when enqueues join it. Checks use queue names and
keys of their own, so they may run one after another on one store; with pytest, parametrize
over ``names_for(capabilities)`` and build a fresh store per test instead (rivet's own suite
does this in tests/integration/test_conformance.py).
"""

from rivet.conformance import (  # noqa: F401 - they register
    aging,
    dead_letters,
    enqueue,
    history,
    leases,
    retention,
    settle,
)
from rivet.conformance.harness import CHECKS, LONG_TTL, NEEDS, TTL, Harness, checks_for, names_for

__all__ = ["CHECKS", "LONG_TTL", "NEEDS", "TTL", "Harness", "checks_for", "names_for"]
