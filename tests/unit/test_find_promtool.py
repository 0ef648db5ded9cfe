"""scripts/find_promtool.py: the promtool the rules tests run, or a clear stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find_promtool.py"


def run(env_value: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "RIVET_PROMTOOL": env_value}
    return subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def test_a_named_promtool_that_is_missing_stops_with_how_to_get_one(tmp_path):
    done = run(str(tmp_path / "no-such-promtool"))
    assert done.returncode == 3
    assert done.stdout == ""
    assert "apt-get install -y prometheus" in done.stderr
    assert "RIVET_PROMTOOL" in done.stderr


def test_a_named_promtool_that_exists_is_printed(tmp_path):
    promtool = tmp_path / "promtool"
    promtool.write_text("#!/bin/sh\n")
    promtool.chmod(0o755)
    done = run(str(promtool))
    assert (done.returncode, done.stdout.strip()) == (0, str(promtool))
