"""Settings for the test suite: the host project's settings, on PostgreSQL, plus a SQLite alias.

``default`` is PostgreSQL for the tests that need a database (``make test`` finds or starts a
server and exports DATABASE_URL); unit tests need none and run whatever it names. Django tests
on ``test_<name>`` beside the database DATABASE_URL names, so concurrent runs with different
database names do not collide. The ``sqlite`` alias is a real file in a temporary folder made
once per run and handed to child processes through ``RIVET_TEST_TMPDIR``, so that worker
processes started by a test open the same file.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from chaos_project.settings import *  # noqa: F403
from chaos_project.settings import DATABASES, RIVET
from rivet.dbconfig import SQLITE_OPTIONS

_POSTGRES_ENGINES = (
    "django.db.backends.postgresql",
    "django.contrib.gis.db.backends.postgis",
)

# Unit tests run without any server, so a 'default' that is not PostgreSQL is no error here:
# the tests that need PostgreSQL fail with this message (tests/conftest.py, ``postgres_server``).
RIVET_TESTS_POSTGRES_MISSING = (
    None
    if DATABASES["default"]["ENGINE"] in _POSTGRES_ENGINES
    else (
        "rivet's database tests run on PostgreSQL, but DATABASES['default'] uses "
        f"{DATABASES['default']['ENGINE']!r} (DATABASE_URL={os.environ.get('DATABASE_URL')!r}). "
        "Run `make test`, which finds or starts a PostgreSQL server and sets DATABASE_URL; or "
        "set DATABASE_URL=postgres://USER@HOST:5432/NAME yourself (`docker compose up -d "
        "rivet-db` starts the one .env points at; installing PostgreSQL also works)."
    )
)


def _run_tmpdir() -> Path:
    existing = os.environ.get("RIVET_TEST_TMPDIR")
    if existing and Path(existing).is_dir():
        return Path(existing)
    made = tempfile.mkdtemp(prefix="rivet-tests-")
    os.environ["RIVET_TEST_TMPDIR"] = made
    # Only the process that made the folder removes it, when it exits.
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    return Path(made)


RIVET_TEST_TMPDIR = _run_tmpdir()

DATABASES = {
    **DATABASES,
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(RIVET_TEST_TMPDIR / "rivet.sqlite3"),
        "OPTIONS": dict(SQLITE_OPTIONS),
        # A file, not Django's default in-memory test database, so several processes share it.
        "TEST": {"NAME": str(RIVET_TEST_TMPDIR / "test_rivet.sqlite3")},
    },
}

RIVET = {**RIVET}

# Hashing passwords slowly buys a test nothing.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The reusable dedup piece is tested on the host project's own views too (with real users).
INSTALLED_APPS = [*INSTALLED_APPS, "rivet.idempotency"]  # noqa: F405
