"""Database settings from a URL, with the options rivet's SQLite stores rely on."""

from __future__ import annotations

import environ

SQLITE_ENGINE = "django.db.backends.sqlite3"

SQLITE_OPTIONS = {
    # BEGIN IMMEDIATE takes the write lock up front, so two claimers (or two requests with one
    # new idempotency key) never both read a row as free; WAL lets readers run beside the writer.
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def database_from_url(url: str) -> dict:
    """A DATABASES entry for ``url``; SQLite gets SQLITE_OPTIONS, PostgreSQL no persistent conns.

    CONN_MAX_AGE stays 0 on PostgreSQL: a worker pools its connections instead
    (rivet.worker.pool), and Django refuses a pool beside persistent connections.
    """
    config = environ.Env.db_url_config(url)
    if config["ENGINE"] == SQLITE_ENGINE:
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
    else:
        config.setdefault("CONN_MAX_AGE", 0)
    return config
