"""Store implementations and the factory that picks one from settings."""

from __future__ import annotations

from rivet.stores.base import Store

__all__ = ["Store", "get_store", "store_for_alias"]


def store_for_alias(alias: str = "default") -> Store:
    """The SQL store matching the vendor of a Django database alias."""
    from django.db import connections

    vendor = connections[alias].vendor
    if vendor == "postgresql":
        from rivet.stores.postgres import PostgresStore

        return PostgresStore(using=alias)
    if vendor == "sqlite":
        from rivet.stores.sqlite import SqliteStore

        return SqliteStore(using=alias)
    from rivet.errors import RivetConfigError

    raise RivetConfigError(
        f"database alias {alias!r} is {vendor}; rivet stores run on PostgreSQL or SQLite"
    )


def get_store() -> Store:
    """The store named by RIVET['STORE'] on RIVET['DATABASE_ALIAS']."""
    from rivet.conf import rivet_settings

    kind, alias = rivet_settings.STORE, rivet_settings.DATABASE_ALIAS
    if kind == "memory":
        from rivet.stores.memory import MemoryStore

        return MemoryStore.shared()
    store = store_for_alias(alias)
    if kind != "auto" and store.name != kind:
        from rivet.errors import RivetConfigError

        raise RivetConfigError(
            f"RIVET['STORE'] is {kind!r} but database alias {alias!r} is {store.name}"
        )
    return store
