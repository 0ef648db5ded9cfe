#!/usr/bin/env python3
"""The record of a whole ``make test`` that passed, read by the matrix cell of the same versions.

CI runs ``make test`` (Python 3.11 + Django 5.2, in ``.venv``) and then ``make test-matrix``,
whose py3.11-django5.2 cell would run the same tests on the same Python, the same Django and the
same tree a second time. With this record it runs what only it can tell instead: its own fresh
install (the ``test`` group, not ``dev``), the unit tests on it and the whole suite's
collection; ``noxfile.py`` says so in the cell's log.

``start`` forgets any earlier record and writes the tree's fingerprint to
``.venv/suite-start.json``; ``passed``, the last step of ``make test``, writes
``.venv/suite-passed.json`` (Python and Django versions, the fingerprint, the time) only when
the PYTEST_ARGS that make exports is empty (the whole suite ran) and the tree's fingerprint is
still the one at ``start``. A failed ``make test`` never reaches ``passed``, so it leaves no record.

The fingerprint is a SHA-256 over every path git lists (tracked and untracked, ignored files
aside) and each one's bytes: a changed, added or removed file gives another. Outside a git
checkout there is no fingerprint and never a record: every cell runs its whole suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def start_path(repo: Path = REPO) -> Path:
    return repo / ".venv" / "suite-start.json"


def record_path(repo: Path = REPO) -> Path:
    return repo / ".venv" / "suite-passed.json"


def fingerprint(repo: Path = REPO) -> str | None:
    """SHA-256 of the tree git sees (paths and contents), or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=repo,
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(set(done.stdout.decode("utf-8", "surrogateescape").split("\0"))):
        if not name:
            continue
        path = repo / name
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        else:  # a tracked file deleted in the work tree
            digest.update(b"-")
    return digest.hexdigest()


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def start(repo: Path = REPO) -> None:
    for path in (record_path(repo), start_path(repo)):
        path.unlink(missing_ok=True)
    tree = fingerprint(repo)
    if tree is not None:
        start_path(repo).parent.mkdir(parents=True, exist_ok=True)
        start_path(repo).write_text(json.dumps({"tree": tree}))


def passed_record(repo: Path = REPO) -> dict[str, Any] | None:
    """The record of the last ``make test``, if it passed the whole suite on the tree as it is
    now; None otherwise."""
    record = read_record(record_path(repo))
    if record is None or record.get("tree") != fingerprint(repo):
        return None
    return record


def passed(pytest_args: str, repo: Path = REPO) -> str:
    """Write the record when it may be written; return what was done, for make's output."""
    if pytest_args.strip():
        return f"suite_record: PYTEST_ARGS={pytest_args!r} is not the whole suite; no record"
    began = read_record(start_path(repo))
    tree = fingerprint(repo)
    if tree is None or began is None:
        return "suite_record: no git checkout or no start; no record"
    if began.get("tree") != tree:
        return "suite_record: the tree changed while the suite ran; no record"
    import django

    record = {
        "python": platform.python_version(),
        "django": django.get_version(),
        "tree": tree,
        "at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    record_path(repo).write_text(json.dumps(record))
    return (
        f"suite_record: the whole suite passed on Python {record['python']} + Django "
        f"{record['django']}; the matrix cell of these versions will not run it again"
    )


def main(argv: list[str]) -> int:
    if argv == ["start"]:
        start()
        return 0
    if argv == ["passed"]:
        print(passed(os.environ.get("PYTEST_ARGS", "")))
        return 0
    print("usage: scripts/suite_record.py start | passed", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
