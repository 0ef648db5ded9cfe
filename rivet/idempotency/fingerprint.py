"""The request fingerprint: what makes two requests with one Idempotency-Key "the same"."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace, so equal values encode equally."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_fingerprint(method: str, path: str, data: Any) -> str:
    """sha256 hex of the method, the path and the canonical JSON of the parsed body."""
    digest = hashlib.sha256()
    for part in (method.upper(), path, canonical_json(data)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()
