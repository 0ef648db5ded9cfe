"""Load a .sql file of named query blocks into a dict, once, when a store module is imported.

A block starts with ``-- name: <name>``, then a ``-- <description>`` line (one line, by habit),
then the SQL up to the next block. Comment lines before the first block describe the file and
are skipped. Descriptions stay out of the query text: drivers scan comments for placeholders.
Each line's indentation is dropped too (no query has a string literal spanning lines): psycopg
caches the parsing of a query text only up to 4 096 characters, and the longest query (the
PostgreSQL store's settle_claim) fits only without it.
"""

from __future__ import annotations

import re
from pathlib import Path

NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$")


class SqlFileError(ValueError):
    """A .sql file of named blocks is malformed; the message names the file and the block."""


def parse_queries(text: str, source: str = "<sql>") -> dict[str, str]:
    """Named blocks of ``text`` as {name: sql}; refuses duplicates, missing docs, empty bodies."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = NAME_LINE.match(line.strip())
        if match is not None:
            blocks.append((match["name"], []))
        elif blocks:
            blocks[-1][1].append(line)
    queries: dict[str, str] = {}
    for name, lines in blocks:
        if name in queries:
            raise SqlFileError(f"{source}: query {name!r} is defined twice")
        queries[name] = _block(source, name, lines)
    return queries


def _block(source: str, name: str, lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or not lines[0].startswith("--"):
        raise SqlFileError(f"{source}: query {name!r} needs a '-- description' line first")
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)  # the description, and any comment lines continuing it
    sql = "\n".join(line.strip() for line in lines).strip()
    if not sql:
        raise SqlFileError(f"{source}: query {name!r} has no SQL")
    return sql


def load_queries(path: Path) -> dict[str, str]:
    """The named blocks of the .sql file at ``path``."""
    return parse_queries(path.read_text(encoding="utf-8"), source=path.name)
