"""scripts/gpu_probe.py, the GPU run's exactness and profile questions, rehearsed on the CPU (tiny shapes): it runs
from the repository root as the device tool runs it, and its table has a row per model, dtype and batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def test_a_device_fault_ends_the_fold_table_said_and_the_probe_ends_well(monkeypatch, capsys):
    """A kernel that faults the device (cuDNN's "misaligned address", which leaves the CUDA context taking no more
    work) ends the table at its cell: the cells and rows after it say they were not run, nothing more is sent to the
    device, and the probe returns, so the check's fold stage does not fail on a kernel the step never calls; a
    refusal (an input a kernel does not take) leaves the table going."""
    import importlib.util

    import torch.nn.functional as F

    spec = importlib.util.spec_from_file_location("gpu_probe", REPO / "scripts/gpu_probe.py")
    gpu_probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_probe)
    monkeypatch.setattr(gpu_probe, "fold_shapes", lambda: [(2, 4, 2, 16, 9), (1, 4, 2, 16, 7)])
    real, calls = F.scaled_dot_product_attention, []

    def faulting_on_the_third(*args, **kw):
        calls.append(1)
        if (
            len(calls) == 3
        ):  # the first row's MATH reference, EFFICIENT (refused on the CPU), then MATH: faults
            raise torch.AcceleratorError("CUDA error: misaligned address\nCompile with TORCH_USE_CUDA_DSA")
        return real(*args, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", faulting_on_the_third)
    gpu_probe.fold_kernels()
    out = capsys.readouterr().out
    first, second = (line.split("|")[4:7] for line in out.splitlines() if line.startswith(("| 2 |", "| 1 |")))
    assert (
        first[0].strip().startswith("refused")
        and first[1].strip() == "faulted: CUDA error: misaligned address"
    )
    assert first[2].strip() == "not run (the device faulted)" and len(calls) == 3
    assert [c.strip() for c in second] == ["not run (the device faulted)"] * 3
    assert "a kernel faulted the device" in out


def test_a_step_cost_that_noise_made_negative_is_said_not_printed(monkeypatch):
    """A step's cost is the run of 2T tokens less the run of T: on a busy machine the rehearsal printed
    '-12.087' ms per step and a negative bandwidth, and the stage said ok. Such a row says n/a and why."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_probe", REPO / "scripts/gpu_probe.py")
    gpu_probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_probe)
    costs = iter([(481.0, -0.012, -0.0005), (481.0, 0.002, 0.003)])
    monkeypatch.setattr(gpu_probe, "_step_costs", lambda *args: next(costs))
    unfused, fused = (line.split("|")[1:-1] for line in gpu_probe.fused_profile("llama-tiny", 1, 4))
    assert [c.strip() for c in unfused[4:7]] == ["n/a"] * 3 and "took no longer" in unfused[7], unfused
    assert (float(fused[4]), float(fused[5])) == (2.0, 3.0)  # a cost above zero is printed as it was
