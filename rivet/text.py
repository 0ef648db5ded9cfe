"""The one rule for text rivet stores: what PostgreSQL (and JSON) cannot hold is refused.

PostgreSQL's text and jsonb types cannot hold NUL, and no UTF-8 encoding exists for a lone
surrogate (U+D800..U+DFFF), which is what Python makes of a ``\\ud800`` escape in JSON or of a
byte that is not UTF-8 in a command-line argument (``surrogateescape``). Such text is bad input,
refused with a message that says where, the same way for every store, the CLI, the HTTP API and
the effect service.
"""

from __future__ import annotations

import functools
import re
from itertools import accumulate

#: A queue or kind name: ASCII letters, digits and ``_ . : -``, starting with a letter or digit.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")

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


#: The characters of an idempotency key: visible ASCII (RFC 9110's VCHAR, 0x21-0x7E) but the
#: comma, with spaces allowed between them, as in an HTTP field value. A header carries no
#: encoding, so a byte above 0x7E would be read as Latin-1 by one server and as UTF-8 by the
#: next; a server strips a header's leading and trailing spaces, so " k" would arrive as "k";
#: and a server joins a header sent twice into one value with a comma (``a,b`` under Django's
#: runserver, ``a, b`` under waitress), so a key holding a comma could not be told from two
#: keys. Such a key is refused on every way in, never stored re-encoded.
KEY_CHARACTERS = (
    "visible ASCII (0x21-0x7E) except the comma, spaces allowed only between characters"
)


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid idempotency key's text, or None when it is."""
    if (
        key.isascii()
        and key.isprintable()
        and "," not in key
        and key[:1] != " "
        and key[-1:] != " "
    ):
        return None
    for index, char in enumerate(key):
        if char == ",":
            return (
                f"has ',' at character {index}; a key is {KEY_CHARACTERS} (a server joins a "
                "header sent twice with a comma, so a comma could not be told from two keys)"
            )
        if not " " <= char <= "~":
            return f"has {char!r} at character {index}; a key is {KEY_CHARACTERS}"
    return f"starts or ends with a space; a key is {KEY_CHARACTERS}"


#: How deeply arrays and objects may nest in a payload, a request body or an effect, on every
#: way in. Real payloads nest a few levels; Python's JSON parser and encoder recurse once per
#: level and fail near the interpreter's recursion limit (1000 by default, less the depth of
#: the stack already in use), which a server reached as a 500.
MAX_JSON_DEPTH = 100

# A JSON string (its escapes included): what may hold brackets that are not structure.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth_problem(text: str, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why JSON ``text`` nests deeper than ``limit`` levels, or None; read from the text, before
    any parser recurses into it (malformed text is the parser's to refuse). ``limit`` exceeds
    MAX_JSON_DEPTH where the payload sits inside a request's own objects (rivet's HTTP API)."""
    if text.count("[") + text.count("{") <= limit:  # cannot be deeper: the usual case
        return None
    brackets = _BRACKET.findall(_JSON_STRING.sub("", text))
    deepest = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if deepest <= limit:
        return None
    return depth_message(deepest, limit)


def depth_message(depth: int | None = None, limit: int = MAX_JSON_DEPTH) -> str:
    """The one wording of the nesting limit."""
    found = "more levels deep than the encoder follows" if depth is None else f"{depth} levels deep"
    rule = (
        f"a payload or an effect nests at most {MAX_JSON_DEPTH} levels (rivet.text.MAX_JSON_DEPTH)"
    )
    if limit != MAX_JSON_DEPTH:
        rule += f", inside at most {limit - MAX_JSON_DEPTH} of the request's own"
    return f"nests arrays and objects {found}; {rule}"


@functools.lru_cache(maxsize=4096)
def name_problem(value: str, limit: int) -> str | None:
    """What is wrong with a queue or kind name, or None; remembered, as a producer repeats a
    few names."""
    if len(value) > limit:
        return f"{value[:20]!r}... is {len(value)} characters; at most {limit}"
    if not NAME_RE.fullmatch(value):
        return (
            f"{value!r} may use only ASCII letters (a-z, A-Z), digits and '_.:-', "
            "and must start with a letter or digit"
        )
    return None
