"""rivet's settings: one namespaced dict, ``settings.RIVET``, read through ``rivet_settings``.

Unknown keys are refused by name (system check rivet.E001) rather than silently ignored: a
setting that is read, believed and then dropped is worse than one that is rejected.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from rivet.settings_table import AGING_OFF_SECS, defaults

DEFAULTS: dict[str, Any] = defaults()
"""Every key of ``settings.RIVET`` with its default, from the table of ``rivet.settings_table``
(which says each one's parser, bounds, worker flag, help and check); a key not here is refused
(rivet.E001)."""


class RivetSettings:
    """Lazy view of settings.RIVET with defaults; re-reads Django settings on each access."""

    def _user(self) -> dict[str, Any]:
        return dict(_rivet_dict())

    def unknown_keys(self) -> list[str]:
        """The keys of ``settings.RIVET`` that rivet does not know, sorted."""
        return sorted(set(self._user()) - set(DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown rivet setting {name!r}; known: {', '.join(DEFAULTS)}")
        # No copy of the dict: an enqueue reads several settings, each on every call.
        return _rivet_dict().get(name, DEFAULTS[name])

    def values(self, *names: str) -> tuple[Any, ...]:
        """Several settings at once, ``settings.RIVET`` read once for them all: each read of
        Django's lazy settings costs more than the rest of a lookup, and an enqueue needs
        several on every call."""
        user = _rivet_dict()
        return tuple([user.get(name, DEFAULTS[name]) for name in names])


_UNREAD = object()


def _rivet_dict() -> dict[str, Any]:
    """``settings.RIVET`` (``{}`` when unset or None), as read now.

    Django's ``LazySettings`` keeps each setting it has read in its own ``__dict__`` and empties
    that whenever a setting changes (``override_settings``, an assignment, a deletion), so the
    value found there is the value now. It is read there first, past ``LazyObject``'s
    ``__getattribute__``, which on each ``settings.RIVET`` also looks the dict up for a
    ``_mask_wrapped`` attribute and catches the AttributeError: an enqueue reads the setting
    five times. Not kept there yet: the usual read, which keeps it.
    """
    user = object.__getattribute__(settings, "__dict__").get("RIVET", _UNREAD)
    if user is _UNREAD:
        user = getattr(settings, "RIVET", None)
    return user or {}


def priority_aging_secs() -> float:
    """Seconds of waiting worth one priority point, as the stores rank with it now."""
    return aging_step(rivet_settings.PRIORITY_AGING_SECS)


def aging_step(setting: Any) -> float:
    """The aging step of a PRIORITY_AGING_SECS value (None: aging off, AGING_OFF_SECS)."""
    return AGING_OFF_SECS if setting is None else float(setting)


rivet_settings = RivetSettings()
"""The settings as rivet reads them: ``rivet_settings.LEASE_TTL_SECS`` and so on."""
