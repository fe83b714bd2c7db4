"""scripts/gpu_probe.py, the GPU run's exactness and profile questions, rehearsed on the CPU (tiny shapes): it runs
from the repository root as the device tool runs it, and its table has a row per model, dtype and batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def probe(*args: str) -> subprocess.CompletedProcess:
    """The probe run from the repository root, as the device tool runs it."""
    env = {**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "scripts/gpu_probe.py", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_probe_runs_from_the_root_and_answers_both_questions():
    done = probe()
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("| llama-tiny") or line.startswith("| opt-tiny")
    ]
    assert len(rows) == 8  # 2 models x float32, bfloat16 x batch 1, 8
    # float32: our full depth, its fixed-shape steps and speculative decoding give generate()'s tokens
    for row in (r for r in rows if "| float32 |" in r):
        assert row.split("|")[4:7] == [" 100% ", " 100% ", " 100% "], row
    assert done.stdout.count("## profile:") == 2


@pytest.mark.slow
def test_the_probe_says_what_a_fused_step_is_made_of():
    """`gpu_probe.py fused`: kernels, their time and the step's per step, unfused and fused, one row each."""
    done = probe("fused")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| llama-tiny")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [("1", "unfused"), ("1", "fused")]
    assert all(float(r[3]) > 0 for r in rows)  # kernels (on the CPU: top-level torch ops) per step


def test_the_probe_runs_the_folded_layout_on_each_kernel():
    """`gpu_probe.py fold`: a row per shape with a cell per kernel, the step's own first, cuDNN's last; on the CPU
    math alone takes it, within bfloat16's rounding of float32."""
    done = probe("fold")
    assert done.returncode == 0, done.stderr[-2000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| batch |"))
    assert header.split("|")[4:7] == [" EFFICIENT_ATTENTION ", " MATH ", " CUDNN_ATTENTION "]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 2 |")).split("|")
    assert row[4].strip().startswith("refused") and row[6].strip().startswith("refused")
    assert 0 < float(row[5].split()[-1]) < 0.05
