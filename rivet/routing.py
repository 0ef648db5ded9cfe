"""Which database holds a queue: ``alias_for_queue``, the one rule every part of rivet asks.

A queue lives on one Django database alias. The rule, first answer wins:

1. each router of ``settings.DATABASE_ROUTERS`` that defines ``db_for_queue(queue)``, in order
   (None: no opinion, the next one is asked), as Django asks its routers ``db_for_read``;
2. ``RIVET['QUEUE_DATABASES']``, a dict of exact queue names to aliases;
3. ``RIVET['DATABASE_ALIAS']``.

``queue_aliases()`` is every alias that may hold queues (DATABASE_ALIAS first, then the
mapping's aliases, then those a router lists with its optional ``queue_databases()``): where
rivet's tables are migrated (``rivet.routers.QueueRouter``) and what the stats, metrics, admin
and HTTP API look through. Task ids are numbered by each database, so a task is addressed by
its alias and its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db import router as django_router

from rivet.conf import rivet_settings
from rivet.errors import RivetConfigError

__all__ = ["alias_for_queue", "known_alias", "queue_aliases", "queues_by_alias"]


def alias_for_queue(queue: str) -> str:
    """The Django database alias that holds ``queue`` (routers, QUEUE_DATABASES, DATABASE_ALIAS)."""
    return placement(queue)[0]


def placement(queue: str) -> tuple[str, str, Any]:
    """``(alias_for_queue(queue), RIVET['DATABASE_ALIAS'], RIVET['STORE'])``, the settings read
    once: what ``rivet.stores.store_for_queue`` needs on every enqueue."""
    mapping, home, store = rivet_settings.values("QUEUE_DATABASES", "DATABASE_ALIAS", "STORE")
    for router, hook in _router_hooks("db_for_queue"):
        alias = hook(queue)
        if alias is not None:
            source = f"{type(router).__name__}.db_for_queue({queue!r})"
            return known_alias(alias, source), home, store
    mapped = _mapping(mapping).get(queue)
    if mapped is not None:
        return known_alias(mapped, f"RIVET['QUEUE_DATABASES'][{queue!r}]"), home, store
    return home, home, store


def queue_aliases() -> list[str]:
    """Every alias that may hold queues, each once: DATABASE_ALIAS, the mapping's, the routers'."""
    found = [rivet_settings.DATABASE_ALIAS, *queue_databases().values()]
    for router, hook in _router_hooks("queue_databases"):
        listed = hook()
        if isinstance(listed, str) or not isinstance(listed, Iterable):
            raise RivetConfigError(
                f"{type(router).__name__}.queue_databases() must return a list of database "
                f"aliases, got {type(listed).__name__}"
            )
        found += list(listed)
    return list(dict.fromkeys(found))


def queues_by_alias(queues: Iterable[str]) -> dict[str, list[str]]:
    """The queues grouped by the alias that holds them, each group in the order given."""
    groups: dict[str, list[str]] = {}
    for queue in queues:
        groups.setdefault(alias_for_queue(queue), []).append(queue)
    return groups


def queue_databases() -> dict[str, str]:
    """RIVET['QUEUE_DATABASES'] (queue name -> alias); the system check rivet.E007 vets it."""
    return _mapping(rivet_settings.QUEUE_DATABASES)


def _mapping(mapping: Any) -> dict[str, str]:
    """A RIVET['QUEUE_DATABASES'] value, refused unless it is a dict."""
    if not isinstance(mapping, dict):
        raise RivetConfigError(
            "RIVET['QUEUE_DATABASES'] must be a dict of queue names to database aliases, "
            f"got {type(mapping).__name__}"
        )
    return mapping


def known_alias(alias: Any, source: str) -> str:
    """``alias`` when DATABASES has it; else RivetConfigError naming ``source`` and the choices."""
    from django.db import connections

    if isinstance(alias, str) and alias in connections:
        return alias
    known = ", ".join(repr(name) for name in connections)
    raise RivetConfigError(
        f"{source} names the database alias {alias!r}, which is not in settings.DATABASES; "
        f"expected one of {known}"
    )


def _router_hooks(name: str) -> list[tuple[Any, Callable[..., Any]]]:
    """The routers of settings.DATABASE_ROUTERS that define ``name``, with that method."""
    found = []
    for each in django_router.routers:
        hook = getattr(each, name, None)
        if callable(hook):
            found.append((each, hook))
    return found
