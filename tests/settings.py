"""Settings for the test suite, on PostgreSQL, plus a SQLite alias.

The tests' own settings: the apps, URLs and job kinds of the host project (chaos_project), whose
admin, API and demo kinds the tests drive, with failpoints enabled, fast password hashing and
``rivet.idempotency`` installed.

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

import environ

from chaos_project import settings as host
from effect_project.dbconfig import SQLITE_OPTIONS, database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if env.bool("RIVET_READ_DOTENV", default=True):
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = "rivet-tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

# The host project's own settings, shared: the tests drive its admin, API, URLs and job kinds as
# a deployment of it would, with rivet.idempotency installed besides (tested on the host's views
# with real users). What differs for tests is below: the databases, secrets, hosts, hashing.
INSTALLED_APPS = [*host.INSTALLED_APPS, "rivet.idempotency"]
MIDDLEWARE = host.MIDDLEWARE
ROOT_URLCONF = host.ROOT_URLCONF
TEMPLATES = host.TEMPLATES
DEFAULT_AUTO_FIELD = host.DEFAULT_AUTO_FIELD
LANGUAGE_CODE = host.LANGUAGE_CODE
TIME_ZONE = host.TIME_ZONE
USE_I18N = host.USE_I18N
USE_TZ = host.USE_TZ
STATIC_URL = host.STATIC_URL
REST_FRAMEWORK = host.REST_FRAMEWORK
EFFECT_SERVICE_URL = host.EFFECT_SERVICE_URL
# The crash tests arm failpoints (RIVET_FAILPOINT) in the workers they start: the host's RIVET
# enables them.
RIVET = host.RIVET
TASKS = host.TASKS
LOGGING = host.LOGGING

DATABASES = {
    "default": database_from_url(
        env("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'rivet.sqlite3'}")
    ),
}

# Hashing passwords slowly buys a test nothing.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

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
