"""Fixtures the in-process worker tests share (a module that needs another store or registry
defines its own fixture of the same name, which wins)."""

from __future__ import annotations

import pytest

from rivet.jobs import JobRegistry
from rivet.stores.memory import FakeClock, MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(clock=FakeClock())


@pytest.fixture
def jobs() -> JobRegistry:
    return JobRegistry()
