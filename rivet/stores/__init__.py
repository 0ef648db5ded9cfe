"""Store implementations and the one store resolver: ``resolve_store``.

``resolve_store(using)`` is how every part of rivet finds its store (the producer API, the
worker command, the admin, the HTTP API, the management commands, the django.tasks backend).
A test fake (``rivet.testing.fake()``) installs itself here with ``override_store``, so this
module never imports ``rivet.testing``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from django.db import connections

from rivet.conf import rivet_settings
from rivet.errors import InvalidInput, RivetConfigError
from rivet.routing import placement
from rivet.stores.base import Store

__all__ = [
    "Store",
    "override_store",
    "queue_stores",
    "resolve_store",
    "store_for_alias",
    "store_for_queue",
]

_overrides: list[Callable[[], Store]] = []
_overrides_lock = threading.Lock()


def resolve_store(using: str | Store | None = None) -> Store:
    """The store to use: an installed override wins, then ``using``, then the settings.

    ``using`` is None for the configured store (RIVET['STORE'] on RIVET['DATABASE_ALIAS']), a
    Django database alias, or a Store (returned as it is).
    """
    override = _override()
    if override is not None:
        return override()
    if using is None:
        return _configured_store()
    if isinstance(using, Store):
        return using
    if isinstance(using, str):
        return store_for_alias(using)
    raise InvalidInput(
        f"using must be a Django database alias or a rivet Store, got {type(using).__name__}"
    )


def store_for_queue(queue: str, using: str | Store | None = None) -> Store:
    """The store holding ``queue``: an override, then ``using``, then the queue's database.

    The queue's database is ``rivet.routing.alias_for_queue``; on RIVET['DATABASE_ALIAS'] that
    is the configured store (RIVET['STORE']), elsewhere the store of the alias's vendor.
    """
    # The list is read without its lock first: an enqueue asks on every call, and there is
    # almost never an override (tests set one).
    if using is not None or (_overrides and _override() is not None):
        return resolve_store(using)
    alias, home, kind = placement(queue)
    if alias == home:
        return _configured_store(kind, home)
    return store_for_alias(alias)


def queue_stores() -> list[tuple[str, Store]]:
    """(alias, store) for every database that may hold queues (``rivet.routing.queue_aliases``),
    RIVET['DATABASE_ALIAS'] first; under an override, only the override's store."""
    from rivet.routing import queue_aliases

    home = rivet_settings.DATABASE_ALIAS
    if _override() is not None:
        return [(home, resolve_store())]
    return [
        (alias, _configured_store() if alias == home else store_for_alias(alias))
        for alias in queue_aliases()
    ]


def _override() -> Callable[[], Store] | None:
    with _overrides_lock:
        return _overrides[-1] if _overrides else None


@contextlib.contextmanager
def override_store(store: Callable[[], Store]) -> Iterator[None]:
    """Send every ``resolve_store`` call to ``store()`` for the ``with`` block (innermost wins)."""
    with _overrides_lock:
        _overrides.append(store)
    try:
        yield
    finally:
        with _overrides_lock:
            _overrides.remove(store)


def store_for_alias(alias: str = "default") -> Store:
    """The SQL store matching the vendor of a Django database alias."""
    vendor = _vendor(alias)
    store_class = _STORE_CLASSES.get(vendor) or _store_class(vendor)
    if store_class is None:
        raise RivetConfigError(
            f"database alias {alias!r} is {vendor}; rivet stores run on PostgreSQL or SQLite: "
            "route rivet's queues (RIVET['DATABASE_ALIAS'], RIVET['QUEUE_DATABASES']) to an "
            "alias of one of those"
        )
    return store_class(using=alias)


def _vendor(alias: str) -> str:
    """The vendor of ``alias``'s backend (``postgresql``, ``sqlite``, ...).

    Known by the alias and its ENGINE once its connection object has been asked: the connection
    is a thread's own (``connections[alias]`` goes through asgiref's Local, dear on an
    enqueue's path: docs/decisions/0007-single-enqueue-path.md), the engine's vendor is not.
    """
    engine = connections.settings.get(alias, {}).get("ENGINE")
    vendor = _VENDORS.get((alias, engine))
    if vendor is None:
        vendor = connections[alias].vendor  # an alias DATABASES lacks raises Django's error
        _VENDORS[(alias, engine)] = vendor
    return vendor


#: Each alias's vendor, by the alias and its ENGINE (``_vendor``).
_VENDORS: dict[tuple[str, str | None], str] = {}

#: The store class of each database vendor, imported on first use (psycopg only when a
#: PostgreSQL alias is used): an enqueue finds its store on every call.
_STORE_CLASSES: dict[str, Callable[..., Store]] = {}


def _store_class(vendor: str) -> Callable[..., Store] | None:
    """The store class for ``vendor`` (None: rivet has none), kept in _STORE_CLASSES."""
    if vendor == "postgresql":
        from rivet.stores.postgres import PostgresStore

        _STORE_CLASSES[vendor] = PostgresStore
    elif vendor == "sqlite":
        from rivet.stores.sqlite import SqliteStore

        _STORE_CLASSES[vendor] = SqliteStore
    return _STORE_CLASSES.get(vendor)


def _configured_store(kind: str | None = None, alias: str | None = None) -> Store:
    """The store named by RIVET['STORE'] on RIVET['DATABASE_ALIAS'] (``kind`` and ``alias``:
    those settings, when the caller has read them)."""
    if kind is None or alias is None:
        kind, alias = rivet_settings.values("STORE", "DATABASE_ALIAS")
    if kind == "memory":
        from rivet.stores.memory import MemoryStore

        return MemoryStore.shared()
    store = store_for_alias(alias)
    if kind != "auto" and store.name != kind:
        raise RivetConfigError(
            f"RIVET['STORE'] is {kind!r} but database alias {alias!r} is {store.name}"
        )
    return store
