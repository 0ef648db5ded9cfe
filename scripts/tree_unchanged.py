#!/usr/bin/env python3
"""Check that a test run leaves the git checkout as it found it.

``snapshot`` records ``git status --porcelain`` (tracked and untracked, ignored files aside) in
``.venv/tree-before.txt``; ``check`` compares the status now with it and exits 1 naming every
path the run changed, created or deleted. Outside a git checkout both say so and exit 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / ".venv" / "tree-before.txt"


def status() -> list[str] | None:
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted(line for line in done.stdout.splitlines() if line)


def main(argv: list[str]) -> int:
    if argv not in (["snapshot"], ["check"]):
        print("usage: scripts/tree_unchanged.py snapshot|check", file=sys.stderr)
        return 2
    now = status()
    if now is None:
        print("tree_unchanged: not a git checkout; nothing to compare", file=sys.stderr)
        return 0
    if argv == ["snapshot"]:
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text("\n".join(now))
        return 0
    before = set(SNAPSHOT.read_text().splitlines()) if SNAPSHOT.exists() else set()
    changed = [line for line in now if line not in before]
    if changed:
        print("The test run changed the checkout (git status --porcelain):", file=sys.stderr)
        for line in changed:
            print(f"  {line}", file=sys.stderr)
        print("A test must write only to temporary folders.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
