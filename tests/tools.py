"""The repository's finder scripts (scripts/find_*.py) as the tests use them.

``make test`` runs each finder first (installing Debian's package when it may); a test that needs
the tool asks ``required_tool``, which fails the test with the finder's own help when the tool is
missing: it is never skipped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def script(name: str) -> ModuleType:
    """scripts/<name>.py, imported by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def required_tool(tool: str) -> str:
    """The path scripts/find_<tool>.py finds; the test fails with its help when there is none."""
    finder = script(f"find_{tool}")
    path = finder.find()
    if path is None:
        pytest.fail(finder.HELP, pytrace=False)
    return path
