"""scripts/find_chromium.py, find_promtool.py and find_pgbouncer.py: a tool a test runs, or a stop.

The browser tests launch chromium, the rules tests run promtool, the pooler tests start
pgbouncer; the scripts work the same way
(scripts/debian_packages.py, ``find_or_install``), so one set of tests runs over all three.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@dataclass(frozen=True)
class Tool:
    script: str
    variable: str
    executable: str
    package: str


TOOLS = [
    Tool("find_chromium.py", "RIVET_CHROMIUM", "chromium", "chromium"),
    Tool("find_promtool.py", "RIVET_PROMTOOL", "promtool", "prometheus"),
    Tool("find_pgbouncer.py", "RIVET_PGBOUNCER", "pgbouncer", "pgbouncer"),
]


def run(tool: Tool, named: Path) -> subprocess.CompletedProcess:
    """The script with its variable naming ``named``."""
    env = {"PATH": "/usr/bin:/bin", tool.variable: str(named)}
    return subprocess.run(
        [sys.executable, str(SCRIPTS / tool.script)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.executable)
def test_a_named_tool_that_is_missing_stops_with_how_to_get_one(tool, tmp_path):
    done = run(tool, tmp_path / f"no-such-{tool.executable}")
    assert done.returncode == 3
    assert done.stdout == ""
    assert f"apt-get install -y {tool.package}" in done.stderr
    assert tool.variable in done.stderr


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.executable)
def test_a_named_tool_that_exists_is_printed(tool, tmp_path):
    found = tmp_path / tool.executable
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    done = run(tool, found)
    assert (done.returncode, done.stdout.strip()) == (0, str(found))
