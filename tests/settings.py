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

from effect_project.dbconfig import SQLITE_OPTIONS, database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if env.bool("RIVET_READ_DOTENV", default=True):
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = "rivet-tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "rivet",
    "chaos_project",
    # The reusable dedup piece is tested on the host project's own views too (with real users).
    "rivet.idempotency",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "chaos_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": database_from_url(
        env("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'rivet.sqlite3'}")
    ),
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {},
}

EFFECT_SERVICE_URL = env("EFFECT_SERVICE_URL", default="http://127.0.0.1:8081")

RIVET = {
    "JOB_MODULES": ["chaos_project.effect_kind", "chaos_project.chaos_kinds"],
    "METRICS_TOKEN": env("RIVET_METRICS_TOKEN", default=None),
    # The crash tests arm failpoints (RIVET_FAILPOINT) in the workers they start.
    "FAILPOINTS": True,
}

TASKS = {"default": {"BACKEND": "rivet.backends.RivetBackend", "QUEUES": ["default"]}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "rivet": {"handlers": ["console"], "level": env("RIVET_LOG_LEVEL", default="INFO")}
    },
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
