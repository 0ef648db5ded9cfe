"""Check, or rewrite (--write), the settings tables of docs/ that rivet/settings_table.py draws.

docs/reference/settings.md (every settings.RIVET key) and docs/workers.md (every flag of
rivet_worker) each hold a table between the lines rivet.settings_table.DOC_BEGIN and DOC_END.
Without --write: exit 1, with a diff, when a page's table is not the one the table draws now
(tests/unit/test_settings_table.py and the docs build check the same). With --write: rewrite it.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rivet.settings_table import DOC_TABLES, fill_doc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale tables")
    write = parser.parse_args().write
    stale = 0
    for page, draw in DOC_TABLES.items():
        path = ROOT / "docs" / page
        text = path.read_text()
        drawn = fill_doc(text, draw())
        if drawn == text:
            continue
        if write:
            path.write_text(drawn)
            print(f"rewrote the table of docs/{page}")
            continue
        stale += 1
        sys.stdout.writelines(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                drawn.splitlines(keepends=True),
                f"docs/{page}",
                f"docs/{page} (drawn)",
            )
        )
    if stale:
        print("stale: run python scripts/settings_docs.py --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
