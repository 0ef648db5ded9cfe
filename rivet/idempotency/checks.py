"""System checks for the rivet.idempotency settings (ids rivet_idempotency.E001 ...).

Each value is checked by its entry of ``rivet.settings_table`` (rivet_idempotency.E001); a
setting still given by its old top-level name is a warning (rivet_idempotency.W001), and an
error when ``settings.RIVET`` gives it too, with another value (rivet_idempotency.E002).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register

from rivet.idempotency.conf import NAMES, deprecated, old_value
from rivet.settings_table import BY_KEY, rivet_dict, value_problems


@register()
def check_idempotency_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    user = rivet_dict()
    read: dict[str, tuple[Any, str]] = {}
    for name in NAMES:
        entry = BY_KEY[name]
        is_set, old = old_value(name)
        if name in user:
            read[name] = (user[name], entry.name)
        elif is_set:
            read[name] = (old, name)
        else:
            read[name] = (entry.default, entry.name)
        if not is_set:
            continue
        if name in user and user[name] != old:
            messages.append(
                Error(
                    f"settings.{name} ({old!r}) and RIVET[{name!r}] ({user[name]!r}) are both "
                    "set, to different values",
                    hint=f"remove settings.{name}: RIVET[{name!r}] replaces it",
                    id="rivet_idempotency.E002",
                )
            )
        else:
            messages.append(
                Warning(
                    deprecated(name),
                    hint=f"move it into settings.RIVET: RIVET = {{..., {name!r}: {old!r}}}",
                    id="rivet_idempotency.W001",
                )
            )
    entries = [BY_KEY[name] for name in NAMES]
    messages += [
        Error(message, hint=entry.hint, id=entry.check)
        for entry, message in value_problems(entries, read.__getitem__)
    ]
    return messages
