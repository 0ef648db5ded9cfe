"""rivet.text.json_depth_problem reads the nesting depth of JSON text without parsing it."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from rivet.text import MAX_JSON_DEPTH, json_depth_problem

# Strings full of what could be mistaken for structure: brackets, quotes, backslashes.
TEXT = st.text(alphabet='[]{}"\\,:ab\u00e9\n', max_size=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=30,
)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def reported(text: str, limit: int) -> int | None:
    problem = json_depth_problem(text, limit)
    if problem is None:
        return None
    return int(re.search(r"(\d+) levels deep", problem).group(1))


@given(VALUES, st.booleans())
def test_the_depth_read_from_the_text_is_the_depth_of_the_value(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    true_depth = depth(value)
    # With a limit of 0 any container is over it, and the depth is reported exactly.
    assert reported(text, 0) == (true_depth or None)
    assert json_depth_problem(text, true_depth) is None


def test_the_limit_itself_is_taken_and_one_level_more_is_not():
    assert json_depth_problem("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is None
    over = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    assert reported(over, MAX_JSON_DEPTH) == MAX_JSON_DEPTH + 1
