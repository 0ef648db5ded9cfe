"""Database settings from a URL, with the options rivet's SQLite stores rely on."""

from __future__ import annotations

import warnings
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from rivet.extras import require
from rivet.text import unstorable

SQLITE_ENGINE = "django.db.backends.sqlite3"
SUPPORTED_ENGINES = {
    SQLITE_ENGINE,
    "django.db.backends.postgresql",
    "django.contrib.gis.db.backends.postgis",
}

SQLITE_OPTIONS = {
    # BEGIN IMMEDIATE takes the write lock up front, so two claimers (or two requests with one
    # new idempotency key) never both read a row as free; WAL lets readers run beside the writer.
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def database_from_url(url: str, variable: str = "DATABASE_URL") -> dict:
    """A DATABASES entry for ``url``; SQLite gets SQLITE_OPTIONS, PostgreSQL no persistent conns.

    CONN_MAX_AGE stays 0 on PostgreSQL: a worker pools its connections instead
    (rivet.worker.pool), and Django refuses a pool beside persistent connections.
    """
    # django-environ comes with the effect extra: only projects that read URLs need it.
    environ = require(
        "environ", group="effect", feature="effect_project.dbconfig.database_from_url"
    )
    reason = unstorable(url)  # a byte that is not UTF-8 reaches Python as a lone surrogate
    if reason:
        raise ImproperlyConfigured(f"{variable} {reason} (or percent-encode the byte, e.g. %FF)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its "engine not recognized": refused below
            config = environ.Env.db_url_config(url)
    except Exception as exc:  # django-environ raises several types for a bad URL
        raise _bad_url(url, exc, variable) from exc
    if config.get("ENGINE") not in SUPPORTED_ENGINES:
        raise _bad_url(url, None, variable)
    if config["ENGINE"] == SQLITE_ENGINE:
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
    else:
        config.setdefault("CONN_MAX_AGE", 0)
    return config


def _bad_url(url: str, exc: Exception | None, variable: str) -> ImproperlyConfigured:
    parts = urlsplit(url)
    shown = parts
    if parts.password:
        host = parts.netloc.rsplit("@", 1)[1]
        shown = parts._replace(netloc=f"{parts.username}:…@{host}")
    reason = f" ({exc})" if exc else ""
    return ImproperlyConfigured(
        f"database URL {shown.geturl()!r} is not one rivet can use{reason}; expected "
        f"postgres://USER[:PASSWORD]@HOST[:PORT]/NAME or sqlite:///PATH (set {variable})"
    )
