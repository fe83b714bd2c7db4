"""The browser tests' dashboard server and Chromium (`server`, `browser`), one of each per test file, and their
tabs: `page`, one shared by a file's walk through the pages, and `fresh`, a new session per test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.driving import (
    APP,
    CHROMIUM,
    CHROMIUM_ARGS,
    DEFAULT_MODEL,
    START_TIMEOUT_S,
    new_tab,
)
from tests.helpers import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"streamlit did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """`streamlit run` on a free port, started from a directory outside the repository (paths must not
    depend on the CWD); stopped at the end whatever happens."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if not (DEFAULT_MODEL / "config.json").is_file():
        missing = DEFAULT_MODEL.relative_to(REPO)
        pytest.skip(f"the shipped default model {missing} is missing (scripts/train_default.sh makes it)")
    work = tmp_path_factory.mktemp("streamlit")
    log = work / "streamlit.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPCORE_APP_")}  # the real default
    env["SKIPCORE_APP_RUNS"] = str(work / "runs")  # the run history of this test, not the user's
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.headless", "true",
        "--server.address", "127.0.0.1",
        "--server.port", str(port),
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _open_tab(browser) -> Iterator:
    """A tab of `new_tab`'s, its context closed when the fixture ends."""
    context, tab = new_tab(browser)
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture(scope="module")
def page(browser):
    """One tab for the walk through every page."""
    yield from _open_tab(browser)


@pytest.fixture
def fresh(browser):
    """A tab in a context of its own: a new session (Streamlit reconnects a reloaded tab to its old session)."""
    yield from _open_tab(browser)
