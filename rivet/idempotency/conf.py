"""Settings of rivet.idempotency: keys of ``settings.RIVET``, read with their defaults.

Each one's default, bounds, help and check are its entry in ``rivet.settings_table``. They were
top-level Django settings of the same names before; such a setting still works, with a
DeprecationWarning when it is read and the system check warning rivet_idempotency.W001, and one
set both ways to different values is refused (rivet_idempotency.E002).
"""

from __future__ import annotations

import warnings
from typing import Any

from django.conf import settings

from rivet.settings_table import BY_KEY, rivet_dict

#: The keys of settings.RIVET that rivet.idempotency reads.
NAMES = ("IDEMPOTENCY_RETENTION_SECS", "IDEMPOTENCY_MAX_BODY_BYTES")
DEFAULTS = {name: BY_KEY[name].default for name in NAMES}

MAX_KEY_LENGTH = 200
"""Longest accepted Idempotency-Key header, in characters (the column is this wide)."""


def setting(name: str) -> int:
    """The value of one rivet.idempotency setting: ``RIVET[name]``, else the deprecated
    top-level ``settings.<name>`` (with a DeprecationWarning), else the default."""
    user = rivet_dict()
    if name in user:
        return user[name]
    if hasattr(settings, name):
        warnings.warn(deprecated(name), DeprecationWarning, stacklevel=2)
        return getattr(settings, name)
    return DEFAULTS[name]


def deprecated(name: str) -> str:
    """What the warning says of a setting of the old name."""
    return (
        f"settings.{name} is deprecated: set RIVET[{name!r}] instead "
        "(rivet.idempotency's settings are keys of settings.RIVET)"
    )


def old_value(name: str) -> tuple[bool, Any]:
    """(whether the old top-level setting is set, its value), read without a warning."""
    return hasattr(settings, name), getattr(settings, name, None)
