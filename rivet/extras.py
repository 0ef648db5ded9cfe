"""Optional features and the extra that installs each; using one without it is a clear error.

The wheel's own dependencies are what every host needs (Django, psycopg, the django.tasks
backport before Django 6). The HTTP API, the Prometheus exporter and the effect client come
with extras: ``pip install 'django-rivet[api]'``, ``[metrics]``, ``[effect]``.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from rivet.errors import RivetConfigError

__all__ = ["missing_extra", "require"]


def missing_extra(module: str, *, extra: str, feature: str) -> RivetConfigError:
    """The error for a feature used without the extra that installs ``module``."""
    return RivetConfigError(
        f"{feature} needs the Python package {module!r}, which is not installed; "
        f"install rivet with that feature: pip install 'django-rivet[{extra}]'"
    )


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise RivetConfigError naming the extra that installs it."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise missing_extra(module, extra=extra, feature=feature) from exc
