"""Comments and docstrings say why, not where a change came from: no issue numbers in code."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The project's own Python: the package, the projects beside it, their tools and tests.
TREES = ("rivet", "chaos_project", "effect_project", "bench", "scripts", "tests")
#: "issue 22", "issues 8 and 9", "#22" in prose: a tracker's numbering, which the reader of
#: the code does not have.
CITATION = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/])#\d+\b", re.IGNORECASE)


def prose(path: Path) -> list[tuple[int, str]]:
    """The comments and string literals of one file, with their line numbers."""
    found = []
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            found.append((token.start[0], token.string))
    return found


def citations() -> list[str]:
    hits = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path == Path(__file__).resolve():  # its own examples
                continue
            for line, text in prose(path):
                hits += [
                    f"{path.relative_to(ROOT)}:{line + text.count(chr(10), 0, match.start())}: "
                    f"{match.group(0)!r}"
                    for match in CITATION.finditer(text)
                ]
    return hits


def test_no_comment_or_docstring_cites_an_issue_number():
    assert citations() == []


def test_the_pattern_finds_a_citation(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Slow (issue 22\'s figures)."""\n# see #14\nx = "#fff"\n')
    texts = [text for _, text in prose(sample)]
    assert [m.group(0) for t in texts for m in CITATION.finditer(t)] == ["issue 22", "#14"]
