"""scripts/find_locales.py: the locale the non-English-server test needs, or a clear stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find_locales.py"


def run(tmp_path: Path, listed: str) -> subprocess.CompletedProcess:
    """The script with a `locale` on PATH that lists ``listed``, and no apt-get to install with."""
    fake = tmp_path / "locale"
    fake.write_text(f"#!/bin/sh\nprintf '{listed}'\n")
    fake.chmod(0o755)
    return subprocess.run(
        [sys.executable, str(SCRIPT)],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_missing_locale_stops_with_how_to_get_it(tmp_path):
    done = run(tmp_path, "C\\nC.utf8\\nPOSIX\\nfr_FR.utf8\\n")
    assert done.returncode == 3
    assert done.stdout == ""
    assert "de_DE.UTF-8" in done.stderr
    assert "apt-get install -y locales-all" in done.stderr


def test_a_listed_locale_is_printed_whatever_its_spelling(tmp_path):
    done = run(tmp_path, "C\\nde_DE.utf8\\nPOSIX\\n")
    assert (done.returncode, done.stdout.strip()) == (0, "de_DE.UTF-8"), done.stderr
