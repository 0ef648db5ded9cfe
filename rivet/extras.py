"""Optional features and the extra that installs each; using one without it is a clear error.

The wheel's own dependencies are what every host needs (Django, psycopg, the django.tasks
backport before Django 6). The HTTP API, the Prometheus exporter and the effect client come
with extras: ``pip install 'django-rivet[api]'``, ``[metrics]``. What only this repository's
projects use (the effect client, database URLs) comes with its ``effect`` dependency group.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from rivet.errors import RivetConfigError

__all__ = ["missing_extra", "require"]


def install_hint(*, extra: str | None = None, group: str | None = None) -> str:
    """How to install an extra of the package, or a dependency group of the repository."""
    if group is not None:
        return f"install the repository's {group!r} dependency group: pip install --group {group}"
    return f"install rivet with that feature: pip install 'django-rivet[{extra}]'"


def missing_extra(
    module: str, *, extra: str | None = None, group: str | None = None, feature: str
) -> RivetConfigError:
    """The error for a feature used without the extra (or group) that installs ``module``."""
    return RivetConfigError(
        f"{feature} needs the Python package {module!r}, which is not installed; "
        + install_hint(extra=extra, group=group)
    )


def require(
    module: str, *, extra: str | None = None, group: str | None = None, feature: str
) -> ModuleType:
    """Import ``module``, or raise RivetConfigError naming the extra that installs it."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise missing_extra(module, extra=extra, group=group, feature=feature) from exc
