"""Driving the dashboard in a real browser: where Chromium and the shipped model are, how long to wait, and the
steps every browser test takes (a tab at the tests' width, a page opened from a link, the sidebar's pages, the
wait for Streamlit to finish a run). The server and the browser themselves are conftest.py's fixtures."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.helpers import REPO

APP = REPO / "app" / "streamlit_app.py"
CHROMIUM = Path("/usr/bin/chromium")
DEFAULT_MODEL = REPO / "data" / "models" / "skipdecode-opt-e2e"
SWEEP = REPO / "data" / "sweeps" / "default.parquet"
SHOTS = REPO / "artifacts" / "screenshots"
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
START_TIMEOUT_S = 90
GENERATE_TIMEOUT_MS = 180_000
UI_TIMEOUT_MS = 30_000
WIDTH = 1400  # the width the dashboard's layout bugs were found at


def new_tab(browser):
    """A tab at the tests' width in a browser context of its own (a new session), downloads allowed."""
    context = browser.new_context(viewport={"width": WIDTH, "height": 1100}, accept_downloads=True)
    tab = context.new_page()
    tab.set_default_timeout(UI_TIMEOUT_MS)
    return context, tab


def wait_idle(page) -> None:
    """Streamlit shows a 'running' status widget while a script runs; wait until it is gone."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=GENERATE_TIMEOUT_MS)


def goto(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).click()
    page.get_by_role("heading", name=title).wait_for()
    wait_idle(page)


def open_page(page, server: str, path: str, query: dict, heading: str) -> None:
    """A link to a page with settings in its address, opened in a fresh tab's state (a new session)."""
    page.goto(f"{server}/{path}?{urllib.parse.urlencode(query, doseq=True)}", wait_until="domcontentloaded")
    page.get_by_role("heading", name=heading).wait_for(timeout=60_000)
    wait_idle(page)


def address_of(page) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)


def clean(page, where: str) -> None:
    assert not page.locator('[data-testid="stException"]').count(), f"{where}: a traceback on the page"
