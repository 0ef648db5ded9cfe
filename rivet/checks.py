"""Django system checks for settings.RIVET (ids rivet.E001 ...)."""

from __future__ import annotations

import difflib
import os
from importlib.util import find_spec

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.urls import URLResolver, get_resolver

from rivet.conf import DEFAULTS, rivet_settings
from rivet.errors import InvalidInput
from rivet.settings_table import SETTINGS, value_problems

#: The keys of the table that rivet's own checks look at; rivet.idempotency checks its keys.
_OWN = tuple(entry for entry in SETTINGS if entry.check and entry.check.startswith("rivet."))


def under_test() -> bool:
    """True inside a test run: Django's test environment is set up (its runner, pytest-django)."""
    from django.test import utils

    return hasattr(utils._TestState, "saved_data")


@register()
def check_rivet_settings(app_configs=None, **kwargs):
    """Each value of settings.RIVET by its entry of rivet.settings_table (its parser, in the
    words the worker's flag uses, and its check id), then what depends on several settings."""
    errors = []
    for key in rivet_settings.unknown_keys():
        close = difflib.get_close_matches(key, DEFAULTS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(DEFAULTS)}"
        errors.append(Error(f"unknown setting RIVET[{key!r}]", hint=hint, id="rivet.E001"))
    errors += [
        Error(message, hint=entry.hint, id=entry.check)
        for entry, message in value_problems(
            _OWN, lambda key: (getattr(rivet_settings, key), f"RIVET[{key!r}]")
        )
    ]
    if rivet_settings.STORE == "memory" and not under_test():
        errors.append(
            Error(
                "RIVET['STORE'] is 'memory' outside a test run; the memory store keeps tasks "
                "in this one process, so no worker in another process can run them",
                hint="use 'auto' (the database's store); in tests use rivet.testing.fake() "
                "or run them under a test runner (pytest-django, manage.py test)",
                id="rivet.E006",
            )
        )
    errors += queue_database_errors()
    errors += atomic_request_warnings()
    return errors


#: The packages of each extra an included ``rivet.urls`` needs, and what each one serves.
API_MODULES = ("rest_framework", "drf_spectacular", "drf_spectacular_sidecar")
METRICS_MODULE = "prometheus_client"


@register(Tags.urls)
def check_http_extras(app_configs=None, **kwargs):
    """rivet.urls in the host's URLconf: the api extra is required; the metrics extra only
    where metrics are asked for (:func:`metrics_wanted`)."""
    serves = _serves_rivet_urls()
    missing = [name for name in API_MODULES if find_spec(name) is None] if serves else []
    if missing:
        return [
            Error(
                "rivet.urls is in the URLconf, but rivet's HTTP API needs the 'api' extra "
                f"({', '.join(missing)} not installed); every path under it answers 501",
                hint="pip install 'django-rivet[api]', or remove include('rivet.urls')",
                id="rivet.E010",
            )
        ]
    wanted = metrics_wanted(serves)
    if wanted and find_spec(METRICS_MODULE) is None:
        return [
            Warning(
                f"{wanted}, but the 'metrics' extra ({METRICS_MODULE}) is not installed",
                hint="pip install 'django-rivet[metrics]' (or silence rivet.W011)",
                id="rivet.W011",
            )
        ]
    return []


def metrics_wanted(serves_rivet_urls: bool) -> str | None:
    """Where the project asks for metrics, or None. Every command runs the checks,
    ``migrate`` included, so a project that includes ``rivet.urls`` for its API and never asked
    for metrics hears nothing of their extra (``rivet/metrics/`` still answers 501
    ``extra_missing``). A scrape token for ``rivet/metrics/`` (RIVET['METRICS_TOKEN']), or a
    worker metrics port in the environment (RIVET_METRICS_PORT), is asking for them."""
    if serves_rivet_urls and rivet_settings.METRICS_TOKEN:
        return "RIVET['METRICS_TOKEN'] is set for scraping rivet/metrics/, which answers 501"
    if os.environ.get("RIVET_METRICS_PORT"):
        return "RIVET_METRICS_PORT asks rivet_worker to serve metrics, which it cannot"
    return None


def _serves_rivet_urls() -> bool:
    if not getattr(settings, "ROOT_URLCONF", None):
        return False
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # a broken URLconf is Django's own check (urls.E...) to report
        return False
    return _includes_rivet(patterns)


def _includes_rivet(patterns) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            module = pattern.urlconf_name
            if getattr(module, "__name__", module) == "rivet.urls":
                return True
            if _includes_rivet(pattern.url_patterns):
                return True
    return False


#: The database vendors rivet's stores run on.
_VENDORS = ("postgresql", "sqlite")
_ROUTER_HINT = (
    "add 'rivet.routers.QueueRouter' to DATABASE_ROUTERS (before routers that keep apps on "
    "one database), then run `manage.py migrate --database ALIAS` for each alias"
)


def queue_database_errors() -> list[Error]:
    """RIVET['QUEUE_DATABASES'] and the routers: every alias that holds queues exists, runs on
    PostgreSQL or SQLite, and gets rivet's tables from ``migrate``."""
    from django.db import connections, router

    from rivet.errors import RivetConfigError
    from rivet.routing import queue_aliases
    from rivet.validation import check_name

    mapping = rivet_settings.QUEUE_DATABASES
    if not isinstance(mapping, dict):
        return [_e007(f"must be a dict of queue names to database aliases, got {mapping!r}")]
    errors = []
    for queue, alias in mapping.items():
        try:
            check_name("queue", queue)
        except (InvalidInput, TypeError) as exc:
            errors.append(_e007(f"has the key {queue!r}, which is not a queue name: {exc}"))
        if not isinstance(alias, str) or alias not in connections:
            known = ", ".join(repr(name) for name in connections)
            errors.append(
                _e007(
                    f"sends queue {queue!r} to {alias!r}, which is not in settings.DATABASES; "
                    f"expected one of {known}"
                )
            )
    if errors:
        return errors
    if mapping and rivet_settings.STORE == "memory":
        return [
            _e007(
                "routes queues to databases, but RIVET['STORE'] is 'memory'",
                "the memory store holds every queue in this process; use 'auto'",
            )
        ]
    try:
        aliases = queue_aliases()
    except RivetConfigError as exc:
        return [Error(str(exc), id="rivet.E007")]
    for alias in aliases:
        if alias not in connections:
            errors.append(
                Error(
                    f"rivet's queues live on the database alias {alias!r}, which is "
                    "not in settings.DATABASES",
                    id="rivet.E007",
                )
            )
        elif connections[alias].vendor not in _VENDORS:
            errors.append(
                Error(
                    f"rivet's queues live on the database alias {alias!r}, whose vendor is "
                    f"{connections[alias].vendor!r}; rivet's stores run on PostgreSQL or SQLite",
                    hint="route those queues to a PostgreSQL or SQLite alias",
                    id="rivet.E007",
                )
            )
        elif not router.allow_migrate(alias, "rivet", model_name="task"):
            errors.append(
                Error(
                    f"rivet's queues live on the database alias {alias!r}, but the database "
                    "routers do not let rivet's tables migrate there",
                    hint=_ROUTER_HINT,
                    id="rivet.E008",
                )
            )
    return errors


def _e007(problem: str, hint: str | None = None) -> Error:
    return Error(
        f"RIVET['QUEUE_DATABASES'] {problem}",
        hint=hint
        if hint is not None
        else "e.g. {'emails': 'mail_db'}: exact queue names to "
        "aliases of settings.DATABASES on PostgreSQL or SQLite",
        id="rivet.E007",
    )


def atomic_request_warnings() -> list[Warning]:
    """rivet.W012: ATOMIC_REQUESTS is on for some alias but off for one that holds queues.

    A view's enqueue writes on its queue's alias. Django makes a request atomic only on the
    aliases whose ATOMIC_REQUESTS is on, so there the task commits at once, and stays (a worker
    runs it) when the view then raises and the request's transaction elsewhere rolls back.
    """
    from django.db import connections

    from rivet.errors import RivetConfigError
    from rivet.routing import queue_aliases

    if rivet_settings.STORE == "memory":
        return []
    atomic = [alias for alias in connections if connections.settings[alias].get("ATOMIC_REQUESTS")]
    if not atomic:
        return []
    try:
        aliases = queue_aliases()
    except RivetConfigError:  # rivet.E007 says what is wrong with the routing
        return []
    named = ", ".join(repr(alias) for alias in atomic)
    return [
        Warning(
            f"ATOMIC_REQUESTS is on for {named} but not for {alias!r}, which holds rivet's "
            f"queues: a view's enqueue on {alias!r} commits at once, and the task stays (a "
            "worker runs it) when the view raises and the request's transaction rolls back",
            hint=f"set ATOMIC_REQUESTS on {alias!r} too, or enqueue in transaction.on_commit() "
            "of the request's alias; docs/databases.md, 'Enqueueing in a request', says what "
            "each promises (silence rivet.W012 when neither applies)",
            id="rivet.W012",
        )
        for alias in aliases
        if alias in connections and not connections.settings[alias].get("ATOMIC_REQUESTS")
    ]
