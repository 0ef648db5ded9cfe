#!/usr/bin/env python3
"""Build the documentation site with ``mkdocs build --strict`` into a temporary folder.

``make docs`` and ``make test`` run it. Strict mode turns every warning into a failure: a link
to a page or an anchor that does not exist, a page missing from the nav, a mkdocstrings
reference (``::: rivet.name``) that no longer resolves, a schema drf-spectacular warns about
(scripts/mkdocs_hooks.py). Then it checks that the built site holds what the issue asked for:
the API reference rendered from docstrings, and the OpenAPI schema with its page; and that
README.md's links (README is not a page of the site) name files and headings that exist.

The site goes to a temporary folder, removed afterwards, so the checkout is never written to;
``--site-dir DIR`` keeps it in DIR instead (outside the checkout, or under the ignored build/).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).with_name("mkdocs")
#: Files of the built site, and a text each must hold: the proof that the part was rendered.
EXPECTED = {
    "reference/api/index.html": "Enqueue one task; a key used before with the same work",
    "reference/store/index.html": "entity-then-verb",
    "reference/settings/index.html": "LEASE_TTL_SECS",
    "reference/openapi/index.html": "POST /rivet/tasks/bulk/",
    "reference/openapi.yaml": "openapi: 3.",
    "img/bench-throughput.png": "",
    "img/chaos-timeline.png": "",
    "img/scaling.png": "",
    "img/scaling-vacuumed.png": "",
}


def build(site: Path) -> float:
    """Runs mkdocs build --strict into ``site``; returns the seconds it took.

    Not ``--quiet``: mkdocs 1.6 counts strict mode's warnings from the log, and ``--quiet``
    drops them before they are counted, so a broken link would pass. The INFO lines are left
    out of the output instead; on a failure everything is shown.
    """
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's notice about its successor
    started = time.monotonic()
    command = [str(MKDOCS), "build", "--strict", "--site-dir", str(site)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        sys.stderr.write(output)
        raise SystemExit(f"docs: mkdocs build --strict failed (exit {done.returncode}); see above")
    shown = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    if shown:
        print("\n".join(shown), file=sys.stderr)
    return time.monotonic() - started


def missing(site: Path) -> list[str]:
    """What the built site lacks of EXPECTED, one line each."""
    problems = []
    for name, text in EXPECTED.items():
        path = site / name
        if not path.is_file():
            problems.append(f"{name} was not built")
        elif text and text not in path.read_text(errors="replace"):
            problems.append(f"{name} does not contain {text!r}")
    return problems


def readme_link_problems() -> list[str]:
    """README.md is not a page of the site: its links to files and anchors are checked here.

    Anchors are GitHub's (the slugs the site uses too, mkdocs.yml's toc ``slugify``).
    """
    from pymdownx.slugs import slugify

    slug = slugify(case="lower")
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        name, _, anchor = target.partition("#")
        path = ROOT / (name or "README.md")
        if not path.exists():
            problems.append(f"README.md links {target}: there is no {name}")
        elif anchor and path.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", fenced_out(path.read_text()), flags=re.MULTILINE)
            if anchor not in {slug(heading, "-") for heading in headings}:
                problems.append(f"README.md links {target}: {path.name} has no such heading")
    return problems


def fenced_out(markdown: str) -> str:
    """``markdown`` without its fenced code blocks (a ``# comment`` there is no heading)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--site-dir", type=Path, help="keep the built site here")
    args = parser.parse_args()
    folder = None if args.site_dir else tempfile.mkdtemp(prefix="rivet-docs-")
    site = args.site_dir.resolve() if args.site_dir else Path(folder) / "site"
    try:
        secs = build(site)
        problems = missing(site) + readme_link_problems()
        pages = sum(1 for _ in site.rglob("index.html"))
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    if problems:
        listed = "\n  ".join(problems)
        print(f"docs: the site is incomplete, or a README link broke:\n  {listed}", file=sys.stderr)
        return 1
    where = site if args.site_dir else "a temporary folder, now removed"
    print(f"docs: mkdocs build --strict: {pages} pages in {secs:.1f} s, into {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
