"""Opt-in faults of a chaos run (``--faults NAME,...`` or ``--faults all``).

Each fault is an event source of the chaos loop (``loop.Source``: ``tick(now)``, ``close()``),
made for one run by its factory in ``FAULTS``. This version has none yet; the names a user may
expect are refused with a clear message rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rivet.errors import RivetError

#: name -> factory(run=ChaosRun, loop=ChaosLoop) -> Source
FAULTS: dict[str, Callable[..., Any]] = {}
#: Faults described in docs/chaos.md that this version does not implement yet.
PLANNED = ("db-restart", "effect-restart", "effect-net")


class UnknownFault(RivetError):
    """--faults named a fault this version does not have."""


def parse_faults(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of fault names; an unknown name is an error."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        if not FAULTS:
            raise UnknownFault(
                "--faults all: this version implements no fault yet (planned: "
                f"{', '.join(PLANNED)}); run without --faults"
            )
        return tuple(FAULTS)
    unknown = [name for name in names if name not in FAULTS]
    if unknown or not names:
        have = ", ".join(FAULTS) or "none yet"
        raise UnknownFault(
            f"--faults {text!r}: unknown or not implemented: {', '.join(unknown) or '(empty)'}; "
            f"this version has: {have} (or 'all')"
        )
    return tuple(names)


def make_faults(names: tuple[str, ...], **context: Any) -> list[Any]:
    """One event source per named fault, for one run."""
    return [FAULTS[name](**context) for name in names]
