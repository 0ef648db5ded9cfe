"""Settings for the effect service: the idempotent side-effect API, on its own database.

Everything comes from the environment (django-environ); the repository's ``.env`` supplies local
defaults and the environment wins. EFFECT_DATABASE_URL names the database; with none at all the
service runs on a SQLite file beside manage.py.
"""

from pathlib import Path

import environ

from effect_project.dbconfig import database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if env.bool("RIVET_READ_DOTENV", default=True):
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env("DJANGO_SECRET_KEY", default="effect-dev-only-not-a-secret")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("EFFECT_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "rest_framework",
    "rivet.idempotency",
    "effect_project.effects",
]

MIDDLEWARE = [
    # Continues the caller's trace (a no-op without OpenTelemetry): see rivet.tracing.
    "effect_project.effects.tracing.TraceMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]

ROOT_URLCONF = "effect_project.urls"
WSGI_APPLICATION = "effect_project.wsgi.application"


# The variable that names the database, for the messages that say what to fix.
DATABASE_URL_VARIABLE = "EFFECT_DATABASE_URL"
DATABASES = {
    "default": database_from_url(
        env("EFFECT_DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'effect.sqlite3'}"),
        variable="EFFECT_DATABASE_URL",
    ),
}

# On PostgreSQL each waitress thread keeps its connection from one request to the next (checked
# with one round trip at the start of a request, and opened again if the server dropped it):
# opening one per request (a server process forked and authenticated) cost more than the
# request's own writes. A database that is gone still answers the request with the 503 that
# names it, because the check reconnects and fails the way a first connection does.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("EFFECT_CONN_MAX_AGE", default=300)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # UTF-8 only, and nested at most rivet.text.MAX_JSON_DEPTH: 415 and 400 rather than a
    # body re-encoded or a RecursionError.
    "DEFAULT_PARSER_CLASSES": ["rivet.idempotency.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "effect_project.effects.errors.json_exception_handler",
}

# rivet.idempotency: how long a key is remembered, and the largest accepted request body.
RIVET = {
    "IDEMPOTENCY_RETENTION_SECS": env.int("IDEMPOTENCY_RETENTION_SECS", default=7 * 24 * 3600),
    "IDEMPOTENCY_MAX_BODY_BYTES": env.int("IDEMPOTENCY_MAX_BODY_BYTES", default=64 * 1024),
}

# Failpoint for tests: raise after the effect row is written, inside its transaction.
EFFECT_FAIL_BETWEEN_WRITES = env.bool("EFFECT_FAIL_BETWEEN_WRITES", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# `python -m effect_project serve` defaults; its flags override them.
EFFECT_BIND = env("EFFECT_BIND", default="127.0.0.1:8081")
EFFECT_THREADS = env.int("EFFECT_THREADS", default=16)
EFFECT_CONNECTION_LIMIT = env.int("EFFECT_CONNECTION_LIMIT", default=1000)
