"""Writes the README's picture of the dashboard (docs/images/dashboard.png): the schedule designer as a newcomer
first sees it, at 1400 x 1000, on the shipped model. Run it when the designer changes:

    .venv/bin/python scripts/readme_screenshot.py [--out PATH]

It starts `streamlit run` on a free localhost port (a run history of its own, in a temporary folder), drives
Debian's /usr/bin/chromium with Playwright, and replaces the file whole. The test suite never writes it.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app" / "streamlit_app.py"
OUT = REPO / "docs" / "images" / "dashboard.png"
CHROMIUM = "/usr/bin/chromium"
SIZE = {"width": 1400, "height": 1000}
START_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(folder: Path) -> tuple[subprocess.Popen, str]:
    """The dashboard on a free port, started in `folder` (its run history there too); its address once it answers."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPCORE_APP_")}
    env.update(SKIPCORE_APP_RUNS=str(folder / "runs"), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true"]
    cmd += [
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
    ]
    log = (folder / "streamlit.log").open("w")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamlit exited with {proc.returncode}; see {folder / 'streamlit.log'}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"streamlit did not answer within {START_TIMEOUT_S} s")


def shoot(out: Path) -> Path:
    """Take the picture and write it to `out` (replaced whole, never half written)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _serve(Path(tmp))
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless"])
                try:
                    page = browser.new_page(viewport=SIZE)
                    page.goto(url, wait_until="domcontentloaded")
                    page.get_by_role("heading", name="Schedule designer").wait_for(timeout=60_000)
                    page.locator('[data-testid="stPlotlyChart"]').nth(1).wait_for(timeout=60_000)
                    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=60_000)
                    page.wait_for_timeout(800)  # plotly's last layout
                    out.parent.mkdir(parents=True, exist_ok=True)
                    partial = out.with_name(f".{out.stem}.{os.getpid()}.tmp.png")
                    page.screenshot(path=str(partial))
                    os.replace(partial, out)
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the picture goes (default: %(default)s)")
    print(shoot(parser.parse_args().out))


if __name__ == "__main__":
    main()
