"""rivet.stores.sqlfile: named query blocks, and the malformed files it refuses."""

from __future__ import annotations

import pytest

from rivet.stores.sqlfile import SqlFileError, parse_queries

GOOD = """-- a file header, skipped
-- name: claim
-- Lease tasks.
-- (a second comment line continuing the description)
SELECT 1
FROM t;

-- name: ack
-- Mark done; keeps '--' inside strings.
UPDATE t SET note = '-- not a comment'
"""


def test_blocks_are_read_by_name_without_their_comments() -> None:
    queries = parse_queries(GOOD)
    assert queries == {
        "claim": "SELECT 1\nFROM t;",
        "ack": "UPDATE t SET note = '-- not a comment'",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\n-- one\nSELECT 1\n-- name: a\n-- two\nSELECT 2\n", "defined twice"),
        ("-- name: a\nSELECT 1\n", "description"),
        ("-- name: a\n-- only a description\n\n", "no SQL"),
    ],
)
def test_malformed_files_are_refused_by_block_name(text: str, message: str) -> None:
    with pytest.raises(SqlFileError, match=message) as refused:
        parse_queries(text, source="bad.sql")
    assert "bad.sql" in str(refused.value) and "'a'" in str(refused.value)
