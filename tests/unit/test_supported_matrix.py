"""The test matrix (noxfile.py), the README's table and pyproject's classifiers say the same thing.

Also: the cell a test run is in runs the Python and Django it names, per-cell database names,
and a cell whose interpreter is missing fails and names it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import django
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_noxfile():
    spec = importlib.util.spec_from_file_location("rivet_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


noxfile = load_noxfile()
MATRIX = {(cell.python, cell.django) for cell in noxfile.MATRIX}


def classifiers(prefix: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = set()
    for classifier in project["classifiers"]:
        version = classifier.removeprefix(prefix)
        if version != classifier and re.fullmatch(r"\d+\.\d+", version):
            found.add(version)
    return found


def test_the_classifiers_name_exactly_the_tested_pythons_and_djangos():
    assert classifiers("Programming Language :: Python :: ") == {p for p, _ in MATRIX}
    assert classifiers("Framework :: Django :: ") == {d for _, d in MATRIX}


def test_one_cell_runs_the_wheel_and_long_tests_and_their_markers_are_declared():
    assert [cell.name for cell in noxfile.MATRIX if cell.full] == [noxfile.FULL_CELL.name]
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    declared = {m.split(":", 1)[0] for m in pytest_options["ini_options"]["markers"]}
    assert set(noxfile.FULL_ONLY) | set(noxfile.MAKE_TEST_ONLY) <= declared
    # A failover or Patroni test is a topology test: make test runs it, no matrix cell does.
    for name in ("test_chaos_failover.py", "test_patroni_failover.py"):
        assert "pytest.mark.topology" in (ROOT / "tests" / "acceptance" / name).read_text(), name
    # Every long module says so: a chaos run left unmarked would run in every cell again.
    for path in sorted((ROOT / "tests" / "acceptance").glob("test_chaos_*.py")):
        if path.name != "test_chaos_verifier.py":  # pure verdicts on recorded histories: fast
            assert "pytest.mark.long" in path.read_text(), path.name


def test_the_readme_table_states_the_tested_matrix():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (3\.\d+) +\| (\d+\.\d+) +\|", section, flags=re.MULTILINE)
    assert set(rows) == MATRIX and len(rows) == len(MATRIX)


def test_the_cell_runs_the_python_and_django_it_is_named_for():
    cell = os.environ.get("RIVET_MATRIX_CELL")
    if cell is None:
        pytest.skip("only inside a `make test-matrix` cell (RIVET_MATRIX_CELL is not set)")
    python = "{}.{}".format(*sys.version_info[:2])
    assert cell == f"py{python}-django{django.VERSION[0]}.{django.VERSION[1]}"
    assert cell in {c.name for c in noxfile.MATRIX}


def test_each_cell_gets_databases_of_its_own(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@db:5432/rivet_ci")
    monkeypatch.setenv("EFFECT_DATABASE_URL", "postgres://postgres@db:5432/rivet_ci_fx")
    envs = [noxfile.cell_environment(cell) for cell in noxfile.MATRIX]
    names = {env["DATABASE_URL"] for env in envs} | {env["EFFECT_DATABASE_URL"] for env in envs}
    assert len(names) == 2 * len(noxfile.MATRIX)
    assert "postgres://postgres@db:5432/rivet_ci_py312" in names
    assert "postgres://postgres@db:5432/rivet_ci_fx_py313" in names


def test_without_an_explicit_effect_database_each_cell_derives_its_own(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@db:5432/rivet_ci")
    monkeypatch.delenv("EFFECT_DATABASE_URL", raising=False)
    env = noxfile.cell_environment(noxfile.MATRIX[1])
    assert env["DATABASE_URL"] == "postgres://postgres@db:5432/rivet_ci_py312"
    # None removes an inherited value: find_postgres then derives rivet_ci_py312_effect.
    assert env["EFFECT_DATABASE_URL"] is None


def test_a_cell_whose_python_is_missing_fails_and_names_it(tmp_path):
    cell = noxfile.MATRIX[-1]
    missing = tmp_path / f"python{cell.python}"
    env = {**os.environ, cell.override_variable: str(missing)}
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", cell.name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"Python {cell.python} is missing, so the {cell.name} cell cannot run" in output
    assert str(missing) in output
    assert "skipped" not in output.lower()


def test_a_python_that_answers_with_another_version_is_not_taken():
    assert noxfile.runs_as(sys.executable, "{}.{}".format(*sys.version_info[:2]))
    assert not noxfile.runs_as(sys.executable, "2.7")
    assert not noxfile.runs_as("/nonexistent/python3.99", "3.99")


RECORD = {"python": "3.11.7", "django": "5.2.20", "tree": "t", "at": "now"}


@pytest.mark.parametrize(
    ("python", "django_version", "environ", "repeats"),
    [
        ("3.11.7", "5.2.20", {}, True),
        ("3.11.7", "5.2.20", {"RIVET_MATRIX_REPEAT": "0"}, True),
        ("3.11.7", "5.2.20", {"RIVET_MATRIX_REPEAT": "1"}, False),
        ("3.11.8", "5.2.20", {}, False),  # another patch release of Python
        ("3.11.7", "5.2.19", {}, False),  # another patch release of Django
        ("3.13.0", "6.1", {}, False),
    ],
)
def test_a_cell_skips_the_repeat_only_on_exactly_the_recorded_versions(
    python, django_version, environ, repeats
):
    assert noxfile.repeats_make_test(python, django_version, RECORD, environ) is repeats


def test_without_a_record_every_cell_runs_its_whole_suite():
    assert noxfile.repeats_make_test("3.11.7", "5.2.20", None, {}) is False
