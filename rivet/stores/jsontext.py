"""JSON as the stores keep it: text in, Python values out (SQL NULL is None), and copies."""

from __future__ import annotations

import json
from typing import Any


def json_text(value: Any) -> str | None:
    """A value as stored JSON text; None is SQL NULL, as the ORM stores it."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def json_value(text: str | None) -> Any:
    """Stored JSON text as a Python value; SQL NULL is None."""
    return None if text is None else json.loads(text)


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value, as a store hands it back: what it holds stays its own."""
    return json.loads(json.dumps(value))
