"""Settings for the rivet host project: admin, API, demo job kinds and the chaos harness.

Everything a deployment changes comes from the environment (django-environ); the committed
``.env`` supplies local defaults. With no DATABASE_URL at all, rivet runs on the embedded
default: a SQLite file beside manage.py.
"""

import sys
from pathlib import Path

import environ

from effect_project.dbconfig import database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if env.bool("RIVET_READ_DOTENV", default=True):
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env("DJANGO_SECRET_KEY", default="rivet-dev-only-not-a-secret")
# DJANGO_DEBUG decides; without it, DEBUG is on for `manage.py runserver` alone (the development
# server then serves the admin's static files) and off for workers, the chaos run and the bench.
DEBUG = env.bool("DJANGO_DEBUG", default=sys.argv[1:2] == ["runserver"])
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

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

WSGI_APPLICATION = "chaos_project.wsgi.application"


DATABASES = {
    "default": database_from_url(
        env("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'rivet.sqlite3'}")
    ),
}

# Tests and the conformance suite also exercise the embedded store on its own file.
if env("RIVET_SQLITE_URL", default=""):
    DATABASES["sqlite"] = database_from_url(env("RIVET_SQLITE_URL"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

# rivet's HTTP API (rivet/urls.py) follows these, and adds its own floor (an authenticated
# user with the endpoint's rivet permission) whatever they say: DRF's default AllowAny here
# still refuses anonymous callers there. Basic auth serves curl.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The rivet-enqueue scope is off until a rate is set, e.g. "100/second".
    "DEFAULT_THROTTLE_RATES": {},
}

EFFECT_SERVICE_URL = env("EFFECT_SERVICE_URL", default="http://127.0.0.1:8081")

# RIVET_QUEUE is the worker's own variable (rivet_worker reads it, and refuses a bad one by
# name with exit 2); read into RIVET['QUEUE'] here it would fail every command's system check.
RIVET = {
    # chaos_project/jobs.py (noop, fail, sleep) is found by autodiscovery; the effect kind is
    # named here because it needs the effect service's URL from these settings.
    "JOB_MODULES": ["chaos_project.effect_kind", "chaos_project.chaos_kinds"],
    # Prometheus may scrape rivet/metrics/ with "Authorization: Bearer <token>" when set.
    "METRICS_TOKEN": env("RIVET_METRICS_TOKEN", default=None),
    # The chaos harness and the demo arm crash points in their workers (RIVET_FAILPOINT).
    "FAILPOINTS": True,
    # Behind a transaction pooler (DATABASE_URL ...?disable_server_side_cursors=True), a URL
    # whose LISTEN bypasses it (docs/pgbouncer.md); unset, idle workers poll.
    "LISTEN_DATABASE_URL": env("RIVET_LISTEN_DATABASE_URL", default=None),
}

# Django's own @task functions run on rivet too (django.tasks on Django 6, the backport on 5.2).
TASKS = {"default": {"BACKEND": "rivet.backends.RivetBackend", "QUEUES": ["default"]}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "rivet": {"handlers": ["console"], "level": env("RIVET_LOG_LEVEL", default="INFO")}
    },
}
