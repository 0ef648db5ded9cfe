"""The one rule for text rivet stores: what PostgreSQL (and JSON) cannot hold is refused.

PostgreSQL's text and jsonb types cannot hold NUL, and no UTF-8 encoding exists for a lone
surrogate (U+D800..U+DFFF), which is what Python makes of a ``\\ud800`` escape in JSON or of a
byte that is not UTF-8 in a command-line argument (``surrogateescape``). Such text is bad input,
refused with a message that says where, the same way for every store, the CLI, the HTTP API and
the effect service.
"""

from __future__ import annotations

import re

# An escaped NUL in JSON text: \u0000 preceded by an even number of backslashes.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_NUL = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Python's surrogateescape maps a byte 0x80..0xff that is not UTF-8 to U+DC80..U+DCFF.
_ESCAPED_BYTE = range(0xDC80, 0xDD00)


def unstorable(text: str, *, json_text: bool = False) -> str | None:
    """Why ``text`` cannot be stored, or None when it can.

    ``json_text``: ``text`` is encoded JSON, where a NUL appears as the escape ``\\u0000``.
    """
    # The common case, cheaply: ASCII holds no surrogate, and no NUL unless it spells one.
    if text.isascii() and ("\\u0000" not in text if json_text else _NUL not in text):
        return None
    nul = _JSON_NUL.search(text) if json_text else (_NUL in text or None)
    if nul:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if code in _ESCAPED_BYTE:
        return (
            f"is not valid UTF-8 (byte 0x{code - 0xDC00:02x} at character {found.start()}); "
            "send UTF-8 text"
        )
    return (
        f"contains a lone surrogate (U+{code:04X} at character {found.start()}), which is not "
        "valid Unicode text; a \\ud83d-style escape needs its pair"
    )


#: The characters of an idempotency key: visible ASCII (RFC 9110's VCHAR, 0x21-0x7E), with
#: spaces allowed between them, as in an HTTP field value (and the Idempotency-Key draft's
#: string). A header carries no encoding, so a byte above 0x7E would be read as Latin-1 by one
#: server and as UTF-8 by the next; a server strips a header's leading and trailing spaces, so
#: " k" would arrive as "k". Such a key is refused, never stored re-encoded.
KEY_CHARACTERS = "visible ASCII (0x21-0x7E), spaces allowed only between characters"


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid idempotency key's text, or None when it is."""
    if key.isascii() and key.isprintable() and key[:1] != " " and key[-1:] != " ":
        return None
    for index, char in enumerate(key):
        if not " " <= char <= "~":
            return f"has {char!r} at character {index}; a key is {KEY_CHARACTERS}"
    return f"starts or ends with a space; a key is {KEY_CHARACTERS}"
