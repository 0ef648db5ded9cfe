"""The documentation site as a reader gets it: built by ``scripts/build_docs.py`` (mkdocs
--strict), served locally, read in a real headless Chromium at a laptop's width.

- nothing is fetched from another host (the site is meant to be read offline): no repository
  widget asking api.github.com, no CDN;
- no code block runs past its right edge, and no name in a table breaks inside a word;
- the pages that had no headings have them, so their table of contents is there;
- the API reference shows every public field and parameter and nothing internal.

Screenshots of the pages go to the screenshot folder (tests/chromium.py).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

#: The pages whose code blocks ran off the edge, and the pages that had no headings.
WIDE_PAGES = ("get-started", "http-api", "troubleshooting")
HEADED_PAGES = ("troubleshooting", "http-api", "operations")
#: A laptop's browser window.
VIEWPORT = {"width": 1280, "height": 800}


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the name is http.server's
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site") / "site"
    done = subprocess.run(
        [sys.executable, "scripts/build_docs.py", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


@pytest.fixture(scope="module")
def served(site):
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_no_page_asks_another_host_for_anything(site):
    """Scripts, styles, pictures and fonts come from the site; no repository widget."""
    assert len(pages(site)) >= 25
    for page in pages(site):
        html = page.read_text()
        assert 'data-md-component="source"' not in html, page
        assert "md-source" not in html, page
        fetched = re.findall(r'<(?:script|img|iframe)\b[^>]*\bsrc="(https?:[^"]+)"', html)
        fetched += re.findall(r'<link\b[^>]*\bhref="(https?:[^"]+)"', html)
        assert fetched == [], (page, fetched)
    config = (ROOT / "mkdocs.yml").read_text()
    assert not re.search(r"^repo_url:", config, flags=re.MULTILINE)


def test_a_browser_reading_the_site_fetches_only_from_it(served, in_browser):
    def steps(page):
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        for name in ("", "get-started/", "http-api/", "reference/api/", "reference/openapi/"):
            page.goto(f"{served}/{name}", wait_until="networkidle")
        return requests

    requests = in_browser(steps)
    assert len(requests) > 10
    elsewhere = [url for url in requests if not url.startswith((served, "data:", "blob:"))]
    assert elsewhere == []


def test_no_code_block_runs_past_its_right_edge(served, in_browser, screenshot_dir):
    def steps(page):
        page.set_viewport_size(VIEWPORT)
        found = {}
        for name in WIDE_PAGES:
            page.goto(f"{served}/{name}/", wait_until="networkidle")
            found[name] = page.eval_on_selector_all(
                "pre > code",
                """blocks => blocks.map(block => ({
                    overflow: block.scrollWidth - block.clientWidth,
                    right: block.getBoundingClientRect().right,
                    width: window.innerWidth,
                    text: block.innerText.slice(0, 60),
                }))""",
            )
            page.screenshot(path=screenshot_dir / f"docs-{name}.png", full_page=True)
        return found

    found = in_browser(steps)
    for name, blocks in found.items():
        assert len(blocks) >= 8, (name, len(blocks))
        cut = [
            block for block in blocks if block["overflow"] > 0 or block["right"] > block["width"]
        ]
        assert cut == [], (name, cut)


def test_a_name_in_a_table_stays_whole(served, in_browser):
    """http-api's permission column: rivet.requeue_deadletter on one line, never split."""

    def steps(page):
        page.set_viewport_size(VIEWPORT)
        page.goto(f"{served}/http-api/", wait_until="networkidle")
        return page.eval_on_selector_all(
            "td code",
            """names => names.map(name => ({
                text: name.innerText,
                lines: name.getClientRects().length,
            }))""",
        )

    names = in_browser(steps)
    permissions = [name for name in names if re.fullmatch(r"rivet\.\w+", name["text"])]
    assert {name["text"] for name in permissions} >= {
        "rivet.requeue_deadletter",
        "rivet.purge_deadletter",
        "rivet.view_task",
    }
    split = [name for name in names if name["lines"] != 1]
    assert split == []


@pytest.mark.parametrize("name", HEADED_PAGES)
def test_the_pages_that_had_no_headings_have_a_table_of_contents(site, name):
    html = (site / name / "index.html").read_text()
    headings = re.findall(r'<h2 id="([^"]+)"', html)
    assert len(headings) >= 3, (name, headings)
    toc = html.split('data-md-component="toc"', 1)
    assert len(toc) == 2, name
    for anchor in headings:
        assert f'href="#{anchor}"' in toc[1], (name, anchor)


def test_the_api_reference_shows_every_public_field_and_nothing_internal(site):
    html = (site / "reference" / "api" / "index.html").read_text()
    ids = set(re.findall(r'id="(rivet\.[\w.]+)"', html))
    assert "rivet.JobContext.is_last_attempt" in ids
    fields = [name for name in ids if name.startswith("rivet.TaskRecord.")]
    assert len(fields) == 22, sorted(fields)
    assert {"rivet.EnqueueResult.task_id", "rivet.EnqueueResult.duplicate"} <= ids
    assert {
        "rivet.errors.IdempotencyMismatch.existing_id",
        "rivet.errors.InvalidInput.field",
    } <= ids
    text = re.sub(r"<[^>]+>", " ", html)
    assert not re.search(r"(?<![\w.])_stop\b", text)
    assert "for_claimed" not in text
    enqueue = text.split("rivet.enqueue", 1)[1]
    for parameter in ("delay", "run_at", "priority", "max_attempts", "unique_key", "using"):
        assert re.search(rf"\b{parameter}\b", enqueue), parameter
    assert re.search(r"\btimeout\b", text) and re.search(r"\bunique\b", text)
