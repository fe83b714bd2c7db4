"""The dashboard in a real browser: `streamlit run` on a free localhost port, driven by Playwright through
Debian's /usr/bin/chromium (Playwright cannot download its own browser here).

At 1400 px wide, every page is checked for a chart drawn wider than its column. It moves a designer slider
(and sees the design in the address), generates on the shipped default model, waits for the Plotly heatmap, downloads
the trace as Parquet and reads it back with `skipcore.traces.read_trace`, then loads it in the trace explorer.
Screenshots of every page go to artifacts/screenshots/ (CI keeps them). Skips, with the reason, when
chromium, Playwright or the shipped model is missing.
"""

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

from skipcore.traces import TRACE_COLUMNS, read_trace

REPO = Path(__file__).resolve().parents[1]
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
CHARTS = '[data-testid="stPlotlyChart"], [data-testid="stVegaLiteChart"]'


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
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": WIDTH, "height": 1100}, accept_downloads=True)
        pg = context.new_page()
        pg.set_default_timeout(UI_TIMEOUT_MS)
        try:
            yield pg
        finally:
            context.close()
            browser.close()


def _wait_idle(page) -> None:
    """Streamlit shows a 'running' status widget while a script runs; wait until it is gone."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=GENERATE_TIMEOUT_MS)


def _goto(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=title).click()
    page.get_by_role("heading", name=title).wait_for()
    _wait_idle(page)


def _shot(page, name: str) -> None:
    """The whole page: Streamlit scrolls inside its own container, so grow the viewport to fit it first."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll("
        "'[data-testid=stMain], [data-testid=stAppViewContainer]')]"
        ".map(e => e.scrollHeight), document.body.scrollHeight)"
    )
    page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), 8000)})
    page.wait_for_timeout(500)  # let plotly re-layout
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size(size)


def _overflowing_charts(page) -> list[str]:
    """Charts whose drawing reaches past their column (or the main area): 'kind: drawn px > column px'."""
    return page.evaluate(
        """(sel) => [...document.querySelectorAll(sel)].flatMap(el => {
            const box = (el.closest('[data-testid="stColumn"]') || el.closest('[data-testid="stMain"]'))
                .getBoundingClientRect();
            const drawn = [...el.querySelectorAll('svg.main-svg, canvas, svg.marks')]
                .map(d => d.getBoundingClientRect()).filter(r => r.width > 0);
            const right = Math.max(...drawn.map(r => r.right));
            return drawn.length && right > box.right + 1
                ? [`${el.dataset.testid}: drawn to ${right.toFixed(0)} px, column ends at ${box.right.toFixed(0)} px`]
                : [];
        })""",
        CHARTS,
    )


def _check_fit(page, where: str) -> None:
    assert page.viewport_size["width"] == WIDTH
    bad = _overflowing_charts(page)
    assert not bad, f"{where}: charts wider than their column: {bad}"


def _tiny_sweep(tmp_path: Path) -> Path:
    """Full depth, skip and exit at 2x and CALM on four dev examples: seconds on the shipped model."""
    from skipcore.evaluate import SweepConfig, run_sweep

    out = tmp_path / "sweep" / "tiny.parquet"
    cfg = SweepConfig(
        model=str(DEFAULT_MODEL),
        dataset=str(REPO / "data" / "e2e_synth"),
        out=out,
        split="dev",
        limit=4,
        targets=(2.0,),
        modes=("skip", "exit"),
        batch_sizes=(4,),
        calm_thresholds=(0.9,),
        max_new_tokens=24,
        device="cpu",
        threads=1,  # tiny matrices: one thread is fastest on a shared 2-core machine
        progress=False,
    )
    run_sweep(cfg)
    return out


def test_dashboard_in_browser(page, server, tmp_path):
    page.goto(server, wait_until="domcontentloaded")
    page.get_by_role("heading", name="Schedule designer").wait_for(timeout=60_000)
    _wait_idle(page)
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()

    # move the "Min layers" slider one step with the keyboard and see the schedule follow
    ceiling = int(
        page.locator('[data-testid="stSlider"]', has_text="Max layers").locator("input").input_value()
    )
    slider = page.locator('[data-testid="stSlider"]', has_text="Min layers")
    thumb = slider.locator('input[type="range"]')
    before = int(thumb.input_value())
    step, key = (1, "ArrowRight") if before < ceiling else (-1, "ArrowLeft")
    thumb.focus()
    thumb.press(key)
    slider.get_by_test_id("stSliderThumbValue").get_by_text(str(before + step), exact=True).wait_for()
    _wait_idle(page)
    after = int(thumb.input_value())
    assert after == before + step
    page.get_by_text(f"->{after} (").first.wait_for()  # the schedule's description carries the new floor
    assert f"min_layers={after}" in page.url  # the design is kept in the address
    _check_fit(page, "designer")
    _shot(page, "1-designer")

    # generate on the default model with the designed schedule
    _goto(page, "Generate and trace")
    page.get_by_role("button", name="Generate", exact=True).click()
    heatmap = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first
    heatmap.wait_for(timeout=GENERATE_TIMEOUT_MS)
    _wait_idle(page)
    assert page.locator(".js-plotly-plot .heatmaplayer").count() >= 1
    _check_fit(page, "generate")
    _shot(page, "2-generate")

    # download the trace and read it back with skipcore's own reader
    with page.expect_download(timeout=UI_TIMEOUT_MS) as dl:
        page.get_by_role("button", name="Download Parquet").click()
    saved = tmp_path / dl.value.suggested_filename
    dl.value.save_as(saved)
    assert saved.suffix == ".parquet"
    trace, meta = read_trace(saved)
    assert set(TRACE_COLUMNS) <= set(trace.columns) and len(trace) > 0
    assert meta["schedule"]["min_layers"] == after
    assert meta["model"].endswith("skipdecode-opt-e2e")

    # the same file in the trace explorer
    _goto(page, "Trace explorer")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(saved))
    page.get_by_text("schema OK").wait_for(timeout=UI_TIMEOUT_MS)
    page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first.wait_for()
    _wait_idle(page)
    _check_fit(page, "explorer")
    _shot(page, "5-explorer")

    _goto(page, "Trade-offs")
    if not SWEEP.is_file():  # no shipped sweep yet: upload a tiny one made with skipcore.evaluate
        page.get_by_text("Upload a sweep file").click()
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(
            str(_tiny_sweep(tmp_path))
        )
    page.locator('[data-testid="stVegaLiteChart"]').first.wait_for(timeout=UI_TIMEOUT_MS)
    _wait_idle(page)
    page.locator(
        '[data-testid="stVegaLiteChart"] svg.marks, [data-testid="stVegaLiteChart"] canvas'
    ).first.wait_for()
    _check_fit(page, "trade-offs")  # the chart was a fixed ~1140 px in a ~1100 px column
    _shot(page, "3-tradeoffs")

    _goto(page, "Compare policies")
    page.get_by_role("button", name="Run all").click()
    page.get_by_role("heading", name="Layers per token").wait_for(timeout=GENERATE_TIMEOUT_MS)
    _wait_idle(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 4  # full depth, skip, exit, middle, calm
    _check_fit(page, "compare")
    _shot(page, "4-compare")
    assert not page.locator('[data-testid="stException"]').count(), "a page showed a traceback"
