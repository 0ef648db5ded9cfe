"""Django system checks for settings.RIVET (ids rivet.E001 ...)."""

from __future__ import annotations

import difflib

from django.core.checks import Error, register

from rivet.conf import DEFAULTS, rivet_settings
from rivet.worker.options import setting_errors

#: Bounds on what a producer may enqueue; the worker's settings are checked by its option table.
_POSITIVE_NUMBERS = (
    "MAX_ATTEMPTS",
    "MAX_PAYLOAD_BYTES",
    "MAX_NAME_LENGTH",
    "MAX_IDEM_KEY_LENGTH",
    "MAX_ERROR_LENGTH",
    "API_BULK_MAX",
)
_STORES = ("auto", "memory", "sqlite", "postgres")
#: Most failed attempts a task's errors list may keep (each entry up to MAX_ERROR_LENGTH).
MAX_ERRORS_KEPT_LIMIT = 1000


@register()
def check_rivet_settings(app_configs=None, **kwargs):
    errors = []
    for key in rivet_settings.unknown_keys():
        close = difflib.get_close_matches(key, DEFAULTS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(DEFAULTS)}"
        errors.append(Error(f"unknown setting RIVET[{key!r}]", hint=hint, id="rivet.E001"))
    for key in _POSITIVE_NUMBERS:
        value = getattr(rivet_settings, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(
                Error(
                    f"RIVET[{key!r}] must be a positive number, got {value!r}",
                    id="rivet.E002",
                )
            )
    errors += [Error(message, id="rivet.E002") for message in setting_errors()]
    kept = rivet_settings.MAX_ERRORS_KEPT
    if (
        isinstance(kept, bool)
        or not isinstance(kept, int)
        or not 1 <= kept <= MAX_ERRORS_KEPT_LIMIT
    ):
        errors.append(
            Error(
                f"RIVET['MAX_ERRORS_KEPT'] must be an integer from 1 to {MAX_ERRORS_KEPT_LIMIT}, "
                f"got {kept!r}",
                hint="it bounds each task's errors list: the newest failed attempts are kept",
                id="rivet.E002",
            )
        )
    if rivet_settings.STORE not in _STORES:
        errors.append(
            Error(
                f"RIVET['STORE'] is {rivet_settings.STORE!r}; expected one of {', '.join(_STORES)}",
                id="rivet.E003",
            )
        )
    token = rivet_settings.METRICS_TOKEN
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        errors.append(
            Error(
                "RIVET['METRICS_TOKEN'] must be None or a string of at least 16 characters, "
                f"got {type(token).__name__} of length {len(str(token))}",
                hint="make one: python -c 'import secrets; print(secrets.token_urlsafe())'",
                id="rivet.E005",
            )
        )
    return errors
