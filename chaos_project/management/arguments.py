"""Argument types shared by the repository's management commands (rivet_chaos, rivet_scale):
each refuses a bad value with what it must be, so argparse exits 2 with that message."""

from __future__ import annotations

import argparse
import signal


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of integers >= 1 like 1,4,16, got {text!r}"
        )
    return tuple(dict.fromkeys(counts))


def interrupt(signum, frame):
    """A signal handler that unwinds the command (its children are stopped on the way)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)
