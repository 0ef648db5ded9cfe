"""The supported matrix, one fresh virtualenv per cell: ``make test-matrix`` runs every cell.

Each cell installs rivet with every extra, the ``test`` dependency group and one Django series
on one Python, then runs the suite through ``scripts/find_postgres.py``, as ``make test``
does, on databases of its own (``<name>_py312`` beside the ``<name>`` that DATABASE_URL names),
so cells never share one. The ``wheel`` tests (minutes of fresh virtualenvs) and the ``long``
runs (chaos runs, the mutation row, the bench, the API fuzz, the first-hour command runs, the
German-speaking server, the claim on a million rows) run in one cell only, the one marked
``full``, and in ``make test`` (Python 3.11 + Django 5.2); the other cells say so in their logs
and leave them out, which keeps CI within its time. A cell whose Python and Django (patch
releases included) are the ones ``make test`` has just passed the whole suite on, on the same
tree (``scripts/suite_record.py``: in CI, the py3.11-django5.2 cell), checks its own fresh
install (the unit tests, the whole suite's collection) instead of running the same tests
again, and says so; ``RIVET_MATRIX_REPEAT=1`` runs its whole suite anyway.

``nox -l`` lists the cells; ``nox -s py3.12-django6.0`` runs one; arguments after ``--`` go to
pytest. Interpreters: ``RIVET_PYTHON_3_12=/path/to/python3.12`` names one; otherwise pyenv's
newest 3.12.x, then a ``python3.12`` on PATH. A cell whose interpreter is missing fails and
names it: the matrix is never silently smaller than the one the README states.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "scripts"))
import find_postgres  # noqa: E402
import suite_record  # noqa: E402

nox.options.default_venv_backend = "uv|venv"  # uv when it is installed (the dev group has it)
nox.options.reuse_venv = "no"  # every run starts from a fresh virtualenv
nox.options.download_python = "never"  # an interpreter comes from this machine or the cell fails
nox.options.error_on_missing_interpreters = True


@dataclass(frozen=True)
class Cell:
    """One supported pair: a Python minor version and a Django feature release."""

    python: str
    django: str
    #: Runs the ``wheel`` tests (the sdist/wheel built and installed into fresh virtualenvs,
    #: the adopter's project) and the ``long`` ones: minutes each, so one cell runs them,
    #: besides ``make test``.
    full: bool = False

    @property
    def name(self) -> str:
        return f"py{self.python}-django{self.django}"

    @property
    def db_suffix(self) -> str:
        return "_py" + self.python.replace(".", "")

    @property
    def override_variable(self) -> str:
        return "RIVET_PYTHON_" + self.python.replace(".", "_")


# The README's "Supported versions" table and pyproject's classifiers state this matrix;
# tests/unit/test_supported_matrix.py keeps the three in step.
MATRIX = (Cell("3.11", "5.2"), Cell("3.12", "6.0"), Cell("3.13", "6.1", full=True))
FULL_CELL = next(cell for cell in MATRIX if cell.full)
#: The markers only the full cell (and ``make test``) runs.
FULL_ONLY = ("wheel", "long")
#: The markers only ``make test`` runs: tests of PostgreSQL's own arrangement (a primary and its
#: standby killed and promoted, a Patroni pair), which no Python or Django version changes.
MAKE_TEST_ONLY = ("topology",)

#: Set to 1 to run a cell's whole suite even when ``make test`` has just passed it on the cell's
#: own Python, Django and tree (see ``repeats_make_test``).
REPEAT_VARIABLE = "RIVET_MATRIX_REPEAT"

_PROBE = "import ensurepip, sys; print('%d.%d' % sys.version_info[:2])"


def runs_as(executable: str, version: str) -> bool:
    """Whether ``executable`` starts, is Python ``version`` and can make a virtualenv."""
    try:
        result = subprocess.run(
            [executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and result.stdout.strip() == version


def pyenv_roots() -> list[Path]:
    roots = [os.environ.get("PYENV_ROOT", "")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        result = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        roots.append(result.stdout.strip())
    roots.append(str(Path.home() / ".pyenv"))
    unique: list[Path] = []
    for root in roots:
        if root and Path(root).is_dir() and Path(root) not in unique:
            unique.append(Path(root))
    return unique


def _patch_level(path: Path) -> int:
    return int(path.parents[1].name.rsplit(".", 1)[1])


def pyenv_candidates(version: str) -> list[Path]:
    """pyenv's installs of ``version`` (plain X.Y.Z builds only), newest patch first."""
    found = []
    for root in pyenv_roots():
        for folder in (root / "versions").glob(f"{version}.*"):
            executable = folder / "bin" / f"python{version}"
            if re.fullmatch(r"\d+\.\d+\.\d+", folder.name) and executable.is_file():
                found.append(executable)
    return sorted(found, key=_patch_level, reverse=True)


def path_candidates(version: str) -> list[Path]:
    """``pythonX.Y`` on PATH, leaving out version-manager shims (they may name no install)."""
    found = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        executable = Path(entry) / f"python{version}"
        if entry and Path(entry).name != "shims" and executable.is_file():
            found.append(executable)
    return found


def find_python(cell: Cell) -> tuple[str | None, list[str]]:
    """The interpreter for ``cell`` (or None), and every place that was looked at."""
    override = os.environ.get(cell.override_variable)
    if override:
        candidates = [Path(override)]
    else:
        candidates = pyenv_candidates(cell.python) + path_candidates(cell.python)
    looked = []
    for candidate in candidates:
        looked.append(str(candidate))
        if runs_as(str(candidate), cell.python):
            return str(candidate), looked
    return None, looked


def missing_python_message(cell: Cell, looked: list[str]) -> str:
    where = ", ".join(looked) if looked else "no candidate in pyenv's versions or on PATH"
    return (
        f"Python {cell.python} is missing, so the {cell.name} cell cannot run "
        f"(looked at: {where}; a candidate must run and have ensurepip). Install Python "
        f"{cell.python} (e.g. `pyenv install {cell.python}`), or set "
        f"{cell.override_variable}=/path/to/python{cell.python}"
    )


def renamed(url: str, suffix: str) -> str:
    return find_postgres.with_db_name(url, find_postgres.db_name(url) + suffix)


def cell_environment(cell: Cell) -> dict[str, str | None]:
    """DATABASE_URL (and an explicit EFFECT_DATABASE_URL) renamed for this cell alone."""
    base = os.environ.get("DATABASE_URL", "")
    if not base and os.environ.get("RIVET_PG_DISCOVERY_SKIP_DOTENV", "") in ("", "0"):
        base = find_postgres.read_dotenv(ROOT / ".env").get("DATABASE_URL", "")
    env: dict[str, str | None] = {
        "RIVET_MATRIX_CELL": cell.name,
        # find_postgres derives <cell database>_effect unless the caller named one.
        "EFFECT_DATABASE_URL": None,
    }
    if base and find_postgres.is_postgres_url(base):
        env["DATABASE_URL"] = renamed(base, cell.db_suffix)
    effect = os.environ.get("EFFECT_DATABASE_URL", "")
    if effect and find_postgres.is_postgres_url(effect):
        env["EFFECT_DATABASE_URL"] = renamed(effect, cell.db_suffix)
    return env


_VERSIONS = (
    "import platform, sys, django; print('%d.%d' % sys.version_info[:2], '%d.%d' % "
    "django.VERSION[:2], platform.python_version(), django.get_version())"
)


def repeats_make_test(
    python_version: str, django_version: str, record: dict | None, environ: dict | None = None
) -> bool:
    """Whether ``make test`` passed the whole suite on exactly this Python and Django (patch
    releases included) and on the tree as it is now (``record``: ``suite_record.passed_record``),
    so that a cell of these versions would only run the same tests again. CI's ``make test``
    is the py3.11-django5.2 pair; ``RIVET_MATRIX_REPEAT=1`` asks for the repeat anyway."""
    environ = os.environ if environ is None else environ
    if environ.get(REPEAT_VARIABLE, "") not in ("", "0") or record is None:
        return False
    return (record.get("python"), record.get("django")) == (python_version, django_version)


def run_cell(session: nox.Session, cell: Cell) -> None:
    # pip reads pyproject's dependency groups from 25.1 on; a venv may start with an older one.
    # The docs group too: the suite builds the documentation site and reads the API reference
    # as the site does (tests/acceptance/test_docs_site.py, tests/unit/test_api_reference.py).
    session.install("pip>=25.1")
    session.install(
        "-e", ".[binary,pool,api,metrics,otel]", "--group", "test", "--group", "docs",
        f"Django~={cell.django}.0",
    )  # fmt: skip
    python = str(Path(session.bin) / "python")
    python_series, django_series, python_version, django_version = session.run(
        python, "-c", _VERSIONS, silent=True
    ).split()
    if (python_series, django_series) != (cell.python, cell.django):
        session.error(
            f"the {cell.name} cell's virtualenv has Python {python_version} and Django "
            f"{django_version}, not Python {cell.python} and Django {cell.django}"
        )
    session.log(f"{cell.name}: Python {python_version}, Django {django_version}")
    record = None if session.posargs else suite_record.passed_record()
    if record is not None and repeats_make_test(python_version, django_version, record):
        session.log(
            f"{cell.name}: `make test` passed the whole suite at {record['at']} on this same "
            f"Python {python_version} + Django {django_version} and this same tree "
            "(.venv/suite-passed.json); this cell checks its own fresh install instead of "
            "running those tests again: the unit tests, and the collection of the whole suite. "
            f"{REPEAT_VARIABLE}=1 runs the whole suite here"
        )
        session.run(python, "-m", "pytest", "-q", "tests/unit", env=cell_environment(cell))
        session.run(
            python, "-m", "pytest", "-q", "--collect-only", env=cell_environment(cell),
            silent=True,
        )  # fmt: skip
        session.log(f"{cell.name}: the whole suite collects on this install")
        return
    selection: list[str] = []
    if not session.posargs:
        left_out = MAKE_TEST_ONLY if cell.full else FULL_ONLY + MAKE_TEST_ONLY
        selection = ["-m", " and ".join(f"not {marker}" for marker in left_out)]
        session.log(
            f"{cell.name}: the topology tests (-m topology: a standby's failover, Patroni) are "
            "left out here; they run in `make test`"
        )
        if not cell.full:
            session.log(
                f"{cell.name}: the wheel and long tests (-m 'wheel or long') are left out here; "
                f"they run in the {FULL_CELL.name} cell and in `make test`"
            )
    session.run(
        python, "scripts/find_postgres.py", "run", "--", python, "-m", "pytest", *selection,
        *session.posargs, env=cell_environment(cell),
    )  # fmt: skip


def register(cell: Cell) -> None:
    interpreter, looked = find_python(cell)

    @nox.session(name=cell.name, python=interpreter or False)
    def test_cell(session: nox.Session) -> None:
        if interpreter is None:
            session.error(missing_python_message(cell, looked))
        run_cell(session, cell)

    scope = (
        "The suite but the topology tests"
        if cell.full
        else "The suite but the wheel, long and topology tests"
    )
    test_cell.__doc__ = f"{scope} on Python {cell.python} + Django {cell.django}."


for _cell in MATRIX:
    register(_cell)
