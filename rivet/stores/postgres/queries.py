"""The PostgreSQL store's statements: the named blocks of ``postgres.sql`` beside this module
(``rivet.stores.sqlfile``), read once. Every part of the store takes its text from here."""

from __future__ import annotations

from pathlib import Path

from rivet.stores.sqlfile import load_queries

QUERIES = load_queries(Path(__file__).with_name("postgres.sql"))
#: The store's SQL functions as the database holds them now (``functions.sql``): what
#: migrations install, in one place to read; a test compares them with a migrated database.
FUNCTIONS = load_queries(Path(__file__).with_name("functions.sql"))
