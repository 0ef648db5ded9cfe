"""scripts/find_chromium.py: the browser the admin's browser tests launch, or a clear stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find_chromium.py"


def run(env_value: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "RIVET_CHROMIUM": env_value}
    return subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def test_a_named_browser_that_is_missing_stops_with_how_to_get_one(tmp_path):
    done = run(str(tmp_path / "no-such-chromium"))
    assert done.returncode == 3
    assert done.stdout == ""
    assert "apt-get install -y chromium" in done.stderr
    assert "RIVET_CHROMIUM" in done.stderr


def test_a_named_browser_that_exists_is_printed(tmp_path):
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    done = run(str(browser))
    assert (done.returncode, done.stdout.strip()) == (0, str(browser))
