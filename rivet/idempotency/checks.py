"""System checks for the rivet.idempotency settings (ids rivet_idempotency.E001 ...)."""

from __future__ import annotations

from django.core.checks import Error, register

from rivet.idempotency.conf import DEFAULTS, setting


@register()
def check_idempotency_settings(app_configs=None, **kwargs):
    errors = []
    for name in DEFAULTS:
        value = setting(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            errors.append(
                Error(
                    f"{name} must be a positive whole number, got {value!r}",
                    hint=f"remove it to use the default ({DEFAULTS[name]})",
                    id="rivet_idempotency.E001",
                )
            )
    return errors
