"""The README's picture of the dashboard is made by an explicit command (`scripts/readme_screenshot.py`), never by
the test suite: the command writes a 1400 x 1000 PNG where it is told, and leaves the tracked one alone."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # a dashboard server and Chromium

README_SHOT = REPO / "docs" / "images" / "dashboard.png"


def test_the_readme_picture_is_written_by_its_own_command(tmp_path):
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not (REPO / "data" / "models" / "skipdecode-opt-e2e" / "config.json").is_file():
        pytest.skip("the shipped default model is missing (scripts/train_default.sh makes it)")
    before = hashlib.sha256(README_SHOT.read_bytes()).hexdigest() if README_SHOT.is_file() else None
    out = tmp_path / "shot.png"
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "readme_screenshot.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    head = out.read_bytes()[:24]  # a PNG's signature, then its IHDR chunk: width and height, big-endian
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and (width, height) == (1400, 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shot.png"]  # replaced whole: no partial file left
    after = hashlib.sha256(README_SHOT.read_bytes()).hexdigest() if README_SHOT.is_file() else None
    assert after == before  # the tracked picture is the command's to write, when asked
