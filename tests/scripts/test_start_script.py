"""scripts/start.sh says what it is doing before each slow step, and runs pip only when what it installs changed:
rehearsed on a stand-in environment whose `python` only records what it was asked to run (no pip, no dashboard)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORDER = '#!/usr/bin/env bash\necho "$*" >>"$(dirname "$0")/../asked.log"\n'


def fake_venv(root: Path) -> Path:
    """A folder start.sh takes for a built environment: bin/python writes its arguments to asked.log."""
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(RECORDER)
    python.chmod(0o755)
    return root


def start(venv: Path) -> tuple[str, list[str]]:
    """Run start.sh on `venv`: what it said, and what it asked its python to run (this run only)."""
    log = venv / "asked.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", "scripts/start.sh"],
        cwd=REPO,
        env={**os.environ, "VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, log.read_text().splitlines()


def test_pip_runs_once_and_every_step_is_said_first(tmp_path):
    venv = fake_venv(tmp_path / "venv")
    said, asked = start(venv)
    pips = [a for a in asked if a.startswith("-m pip install")]
    assert len(pips) == 3 and "installing requirements.txt" in said
    assert said.index("installing") < said.index("starting the dashboard")
    assert asked[-1].startswith("-m streamlit run app/streamlit_app.py")

    said, asked = start(venv)  # nothing changed: straight to the dashboard
    assert [a.split()[1] for a in asked] == ["streamlit"] and "no pip run" in said
