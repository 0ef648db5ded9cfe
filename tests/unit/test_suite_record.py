"""scripts/suite_record.py: the record of a whole ``make test`` that passed.

A record says that ``make test`` passed the whole suite on one Python, one Django and one tree;
it must never outlive a change to the tree nor be written for a partial run. The cell that
reads it is tested in test_supported_matrix.py.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import django
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


suite_record = load("rivet_suite_record", ROOT / "scripts" / "suite_record.py")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".venv/\n*.log\n")
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.txt").write_text("b\n")
    return tmp_path


def test_the_fingerprint_follows_every_file_git_sees_and_no_ignored_one(repo):
    first = suite_record.fingerprint(repo)
    assert first == suite_record.fingerprint(repo)
    (repo / "run.log").write_text("ignored\n")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "x").write_text("ignored\n")
    assert suite_record.fingerprint(repo) == first
    (repo / "a.py").write_text("A = 2\n")
    edited = suite_record.fingerprint(repo)
    assert edited != first
    (repo / "c.py").write_text("")
    added = suite_record.fingerprint(repo)
    assert added not in (first, edited)
    (repo / "c.py").unlink()
    assert suite_record.fingerprint(repo) == edited
    # A file moved keeps its bytes but not its path.
    (repo / "pkg" / "b.txt").rename(repo / "b.txt")
    assert suite_record.fingerprint(repo) != edited


def test_outside_a_git_checkout_there_is_no_fingerprint_and_no_record(tmp_path):
    assert suite_record.fingerprint(tmp_path) is None
    suite_record.start(tmp_path)
    assert "no record" in suite_record.passed("", tmp_path)
    assert suite_record.passed_record(tmp_path) is None


def test_a_whole_suite_that_passed_on_an_unchanged_tree_is_recorded_with_its_versions(repo):
    suite_record.start(repo)
    said = suite_record.passed("", repo)
    assert "the whole suite passed" in said
    record = suite_record.passed_record(repo)
    assert record is not None
    assert record["django"] == django.get_version()
    assert record["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert record["tree"] == suite_record.fingerprint(repo)
    # The tree changes afterwards: the record no longer speaks for it.
    (repo / "a.py").write_text("A = 3\n")
    assert suite_record.passed_record(repo) is None


def test_a_partial_run_leaves_no_record_and_forgets_the_last_one(repo):
    suite_record.start(repo)
    suite_record.passed("", repo)
    assert suite_record.passed_record(repo) is not None
    suite_record.start(repo)  # the next make test starts: the last record is gone at once
    assert suite_record.passed_record(repo) is None
    said = suite_record.passed("-k postgres", repo)
    assert "not the whole suite" in said
    assert suite_record.passed_record(repo) is None


def test_a_tree_changed_while_the_suite_ran_leaves_no_record(repo):
    suite_record.start(repo)
    (repo / "pkg" / "b.txt").write_text("changed mid-run\n")
    assert "changed while the suite ran" in suite_record.passed("", repo)
    assert suite_record.passed_record(repo) is None


def test_passed_without_start_leaves_no_record(repo):
    assert "no record" in suite_record.passed("", repo)
    assert not suite_record.record_path(repo).exists()


def test_the_command_line_reads_pytest_args_from_make_s_environment(tmp_path):
    script = ROOT / "scripts" / "suite_record.py"
    done = subprocess.run(
        [sys.executable, str(script), "passed"],
        env={"PATH": "/usr/bin:/bin", "PYTEST_ARGS": "-x"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert "PYTEST_ARGS='-x' is not the whole suite; no record" in done.stdout
    wrong = subprocess.run(
        [sys.executable, str(script), "record"], capture_output=True, text=True, check=False
    )
    assert wrong.returncode == 2
    assert "usage: scripts/suite_record.py start | passed" in wrong.stderr


def test_the_record_file_is_json_with_the_versions_and_the_tree(repo):
    suite_record.start(repo)
    suite_record.passed("", repo)
    stored = json.loads(suite_record.record_path(repo).read_text())
    assert set(stored) == {"python", "django", "tree", "at"}
    assert stored["tree"] == suite_record.fingerprint(repo)
