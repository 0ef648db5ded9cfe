"""The JSON parser of rivet's HTTP API and of the effect service: UTF-8 only, depth-bounded.

DRF's own JSONParser decodes a body with whatever charset its Content-Type declares, so ``é``
sent as UTF-8 under ``charset=latin-1`` would be stored as ``Ã©``; JSON between systems is
UTF-8 (RFC 8259, which gives application/json no charset parameter), so any other declared
charset is refused with 415 rather than guessed. And Python's parser recurses once per nesting
level, so the depth is read from the text first (``rivet.text.MAX_JSON_DEPTH``): a body nested
deeper is a 400 before the parser runs, never a RecursionError and a 500.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.http import parse_header_parameters
from rest_framework import parsers
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.utils.json import strict_constant

from rivet.text import MAX_JSON_DEPTH, json_depth_problem

#: How the one charset JSON is sent in may be spelled (case aside).
UTF8_NAMES = frozenset({"utf-8", "utf8"})


def declared_charset(media_type: str | None) -> str | None:
    """The charset parameter of a Content-Type, lower-cased, or None when it names none."""
    if not media_type:
        return None
    _, params = parse_header_parameters(media_type)
    charset = params.get("charset")
    return charset.strip().lower() if charset is not None else None


def charset_problem(media_type: str | None) -> str | None:
    """Why a body of this Content-Type is refused for its charset, or None."""
    charset = declared_charset(media_type)
    if charset is None or charset in UTF8_NAMES:
        return None
    return (
        f"Content-Type declares charset={charset}; a JSON body is UTF-8 (RFC 8259): send "
        "its UTF-8 bytes with charset=utf-8 or no charset"
    )


def parse_json_body(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body's JSON: UTF-8, no NaN or Infinity, nested at most ``max_depth``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"JSON parse error - {exc}") from exc
    problem = json_depth_problem(text, max_depth)
    if problem:
        raise ParseError(f"JSON parse error - the body {problem}")
    try:
        return json.loads(text, parse_constant=strict_constant)
    except ValueError as exc:
        raise ParseError(f"JSON parse error - {exc}") from exc


class JSONParser(parsers.JSONParser):
    """DRF's JSONParser, refusing other charsets (415) and bodies nested too deeply (400).

    ``max_depth``: MAX_JSON_DEPTH for a body that is itself the document (an effect); more
    where a payload sits inside the request's own objects, whose depth the payload's own check
    (``rivet.validation.encode_payload``) then bounds.
    """

    max_depth = MAX_JSON_DEPTH

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        problem = charset_problem(media_type)
        if problem:
            raise UnsupportedMediaType(media_type, detail=problem)
        return parse_json_body(stream.read() if stream is not None else b"", self.max_depth)


class EnvelopeJSONParser(JSONParser):
    """rivet's HTTP API: a payload of MAX_JSON_DEPTH levels inside a bulk call's
    ``{"tasks": [{"payload": ...}]}``, so the payload's own check says what is wrong with it."""

    max_depth = MAX_JSON_DEPTH + 3
