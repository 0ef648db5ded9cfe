"""One progress line for the long runs (the chaos campaign, the benchmark)."""

from __future__ import annotations

import time

BAR_WIDTH = 20


def progress(done: int, total: int, note: str, started: float) -> str:
    filled = BAR_WIDTH * done // max(total, 1)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    return f"[{bar}] {done}/{total} {time.monotonic() - started:6.0f} s  {note}"
