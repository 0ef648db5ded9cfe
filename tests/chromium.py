"""Fixtures for the admin's browser tests: a real headless Chromium (Debian's, through Playwright).

Playwright's sync API runs an event loop in the thread that drives it, and Django refuses
database calls from a thread with a running loop. So the browser runs in a thread of its own
(``in_browser``), and the test's own thread keeps the database: it writes the rows before and
checks them after. No ``DJANGO_ALLOW_ASYNC_UNSAFE``.

Screenshots go to a temporary folder, so a test run leaves the checkout as it found it;
``RIVET_SCREENSHOT_DIR`` names a folder to keep them (``make screenshots`` sets it to docs/img/,
the pictures the docs show).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.tools import required_tool

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium_path() -> str:
    return required_tool("chromium")


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("RIVET_SCREENSHOT_DIR")
    if not chosen:
        return tmp_path_factory.mktemp("screenshots")
    folder = Path(chosen)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def in_browser(chromium_path: str) -> Callable[[Callable[[Any], Any]], Any]:
    """Run ``steps(page)`` in a fresh browser page on a thread of its own; return its result."""

    def run(steps: Callable[[Any], Any]) -> Any:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="browser") as pool:
            return pool.submit(_drive, chromium_path, steps).result()

    return run


def _drive(chromium_path: str, steps: Callable[[Any], Any]) -> Any:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.set_default_timeout(15_000)
            return steps(context.new_page())
        finally:
            browser.close()
