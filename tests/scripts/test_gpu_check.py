"""scripts/gpu_check.sh, the GPU run in one command, rehearsed on the CPU: the same stages and flags on tiny
shapes, writing the files a real run writes, so a typo or a missing file is caught here and not on a GPU lent
for minutes; scripts/gpu_wheels.sh's choice of what travels to the GPU machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
# what a real run leaves in OUTDIR; the device tool returns at most 8 files, named in letters, digits, '.',
# '_', '-'
WRITTEN = [
    "bench_cuda.json",
    "bench_cuda.md",
    "env.txt",
    "gpu_check.log",
    "smoke.json",
    "smoke.md",
    "summary.md",
]


def gpu_check(*args: str, budget: int = 300, **env: str) -> subprocess.CompletedProcess:
    """The script as the device tool runs it, with this interpreter; `budget` (seconds) leaves room for a
    loaded CI machine: alone on two cores the rehearsal takes about a minute."""
    full_env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_BUDGET": str(budget), **env}
    return subprocess.run(
        ["bash", "scripts/gpu_check.sh", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def stages(summary: str) -> dict[str, str]:
    """stage -> outcome, from the summary's first table."""
    table = summary.split("| stage |", 1)[1].split("\n\n", 1)[0]
    return dict(re.findall(r"^\| (\w+) \| ([^|]+) \|", table, re.M))


@pytest.mark.slow
def test_the_rehearsal_runs_the_whole_plan_and_writes_what_a_real_run_writes(tmp_path):
    out = tmp_path / "gpu"
    done = gpu_check("--rehearse", str(out))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = (out / "summary.md").read_text()
    outcome = stages(summary)
    # the real stage's sweep where SmolLM2 is installed (the test command prepares it)
    written = WRITTEN + (["real.csv"] if outcome["real"] == "ok" else [])
    assert sorted(p.name for p in out.iterdir()) == sorted(written)
    assert len(written) <= 8 and all(re.fullmatch(r"[\w.-]+", name) for name in written)
    assert list(outcome) == [
        "wheels",
        "env",
        "imports",
        "tests",
        "smoke",
        "fused",
        "real",
        "compiled",
        "reduced",
        "speculative",
        "fold",
        "profile",
        "long",
    ]
    ran = {s: o for s, o in outcome.items() if not o.startswith("skipped")}
    assert set(ran.values()) == {"ok"} and {
        "imports",
        "tests",
        "smoke",
        "reduced",
        "fused",
        "speculative",
        "compiled",
        "fold",
        "profile",
        "long",
    } <= set(ran)
    # the plan's every setting, for the short and the long generation, at both batch sizes
    result = json.loads((out / "bench_cuda.json").read_text())
    assert result["complete"] and result["device"] == "cpu"
    rows = result["rows"]
    short = {(r["model"], r["batch_size"], r["setting"]) for r in rows if r["new_tokens"] == 4}
    captured = ["full", "skip 2x", "skip 3x", "skip 4x"]
    later = ["full (no graphs)", "speculative k=1 (3x drafts)", "speculative k=2 (3x drafts)"]
    models = ("llama-tiny", "opt-tiny")
    assert {(m, b, s) for m in models for b in (1, 2) for s in [*captured, "generate()"]} <= short
    # the speculative stage's settings at every batch size but the largest
    assert {(m, b, s) for m in models for b in (1,) for s in later} <= short
    assert not {(m, b, s) for m, b, s in short if s in later and b == 2}
    assert {(m, 1, "generate() static+compile") for m in models} <= short
    # the fused stage: every batch size but the largest
    fused = ["full (fused)", "skip 2x (fused)", "skip 4x (fused)", "speculative k=1 (3x drafts) (fused)"]
    assert {(m, 1, s) for m in models for s in fused} <= short
    assert not {(m, b, s) for m, b, s in short if s.endswith("(fused)") and b != 1}
    assert "The fused step:" in summary
    log = (out / "gpu_check.log").read_text()
    assert "| llama-tiny | 1 | fused |" in log  # the profile stage's table
    assert (
        "| batch | heads / kv heads | keys | EFFICIENT_ATTENTION | MATH | CUDNN_ATTENTION |" in log
    )  # fold's
    assert {r["setting"] for r in rows if r["new_tokens"] == 6} == set(captured)
    assert all(r["same_tokens_as_full"] == 1 for r in rows if r["setting"].startswith("speculative"))
    assert json.loads((out / "smoke.json").read_text())["complete"]
    # the end of the output, all a short lease may bring back, is the summary: per-setting lines and the
    # targets
    assert done.stdout.rstrip().endswith(summary.rstrip().splitlines()[-1])
    assert "| llama-tiny | 6 | 2 |" in summary and "Targets:" in summary
    if outcome["real"] == "ok":  # the skip-aware SmolLM2's drafts on E2E prompts, judged in the targets
        real = pd.read_csv(out / "real.csv")
        spec = real[real["policy"] == "speculative"]
        assert sorted(spec["draft_tokens"]) == [1, 2] and set(spec["batch_size"]) == {1}
        assert (spec["same_as_full_depth"] == 1).all() and (spec["tokens_per_full_pass"] >= 1).all()
        assert "Real drafts (real.csv)" in summary
        judged = next(
            line for line in summary.splitlines() if "SmolLM2 >= 1.5x full depth at batch 1" in line
        )
        assert "(E2E prompts) b1 T8 speculative k=1 (3x drafts)" in judged and "not measured" not in judged
    assert "no CUDA device" in (out / "env.txt").read_text()


@pytest.mark.slow
def test_a_missing_package_is_named_and_stops_the_run_before_any_bench(tmp_path):
    """A package that a module the run imports needs is named with the module, and nothing is measured."""
    fake = tmp_path / "site" / "plotly"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'narwhals'\", name='narwhals')\n"
    )
    out = tmp_path / "gpu"
    done = gpu_check("--rehearse", str(out), PYTHONPATH=str(tmp_path / "site"))
    assert done.returncode == 1
    assert (
        "missing: narwhals (for tests.lens.test_lens): make their wheels here with bash scripts/gpu_wheels.sh"
        in (done.stdout)
    )
    assert stages((out / "summary.md").read_text())["imports"].startswith("failed")
    assert not (out / "bench_cuda.json").exists() and not (out / "smoke.json").exists()


def test_a_python_without_torch_has_torch_named_once():
    """The imports stage of a Python with no torch said 'missing: torch, ..., torch (for skipcore.commands.bench),
    torch (for ...)': each package once, the first module that lacks it said only where the plan's own list does
    not name it."""
    script = (REPO / "scripts" / "gpu_check.sh").read_text()
    imports = script.split("IMPORTS=$(\n  cat <<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    done = subprocess.run(  # -S: no site-packages, so none of the plan's packages is there
        [sys.executable, "-S", "-", "1"], input=imports, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    said = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and said.startswith("missing: torch, transformers,"), said
    names = [
        name.split(" (for ")[0] for name in said.removeprefix("missing: ").split(": make")[0].split(", ")
    ]
    assert len(names) == len(set(names)) and "torch (for" not in said, said


def test_gpu_check_needs_one_output_folder(tmp_path):
    done = gpu_check("--rehearse")
    assert (
        done.returncode == 2 and done.stderr.strip() == "usage: bash scripts/gpu_check.sh [--rehearse] OUTDIR"
    )


def test_the_wheels_that_travel_are_the_requirements_the_gpu_image_lacks():
    """requirements.txt less torch, less what the GPU machine's image holds, less what the GPU run never
    imports."""
    done = subprocess.run(
        ["bash", "scripts/gpu_wheels.sh", "--list"],
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names = [re.split(r"[=<>]", line)[0] for line in done.stdout.split()]
    assert {"datasets", "gguf", "plotly", "altair", "rouge-score"} <= set(names)
    present_or_unused = {"torch", "transformers", "accelerate", "peft", "numpy", "pytest", "ray", "streamlit"}
    assert not present_or_unused & set(names)
    assert all("==" in line for line in done.stdout.split())  # pinned as requirements.txt pins them


@pytest.mark.slow
def test_a_failed_stage_fails_the_check_and_is_named_on_the_last_line(tmp_path):
    """A check that fails says so last, where a short lease's output shows it, and in summary.md: here the
    rehearsal's budget leaves the benches no time, which a rehearsal counts as failing."""
    out = tmp_path / "gpu"
    done = gpu_check("--rehearse", str(out), budget=40)
    assert done.returncode == 1
    last = done.stdout.rstrip().splitlines()[-1]
    summary = (out / "summary.md").read_text()
    short = [s for s, o in stages(summary).items() if o.startswith(("failed", "stopped", "skipped: no time"))]
    assert short and last == f"GPU CHECK FAILED: {' '.join(short)}" + last[last.index(" (") :], last
    assert summary.rstrip().endswith(last)


def test_a_stage_that_fell_back_says_so_beside_ok(tmp_path):
    """A stage whose run printed fallback warnings (a capture or a compile that fell back: the path ran, but not
    as meant) is recorded as ok with their count, which the summary shows; a clean one as plain ok. The script's
    own `stage` function, run alone."""
    script = (REPO / "scripts/gpu_check.sh").read_text()
    stage = re.search(r"^stage\(\) \{.*?^\}$", script, re.S | re.M).group(0)
    harness = f"""
LOG={tmp_path}/log; : >"$LOG"; DEADLINE=$((SECONDS + 60)); STAGES=()
say() {{ echo "$*" >>"$LOG"; }}
record() {{ STAGES+=("| $1 | $2 |"); }}
{stage}
stage fell 10 printf 'warning: CUDA graph capture failed, decoding without graphs: x\\nFallbackWarning: y\\n'
stage clean 10 echo fine
printf '%s\\n' "${{STAGES[@]}}"
"""
    out = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, check=True).stdout
    assert "| fell | ok; 2 fallback warnings (in the log) |" in out
    assert "| clean | ok |" in out


def test_a_stage_that_must_finish_fails_the_check_at_its_deadline(tmp_path):
    """The tests (and what they need) count only when they finish: one stopped at its deadline (a capture that hangs,
    a compile per shape) is a failure, where a bench stopped at its deadline keeps what it measured. The script's
    own `stage` function, run alone."""
    script = (REPO / "scripts/gpu_check.sh").read_text()
    stage = re.search(r"^stage\(\) \{.*?^\}$", script, re.S | re.M).group(0)
    must = re.search(r"^MUST_FINISH=.*$", script, re.M).group(0)
    harness = f"""
LOG={tmp_path}/log; : >"$LOG"; DEADLINE=$((SECONDS + 60)); STAGES=()
{must}
say() {{ echo "$*" >>"$LOG"; }}
record() {{ STAGES+=("| $1 | $2 |"); }}
{stage}
stage tests 5 sleep 30
stage long 5 sleep 30
printf '%s\\n' "${{STAGES[@]}}"
"""
    out = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, timeout=120).stdout
    assert "| tests | failed: stopped at its 5s deadline before it finished |" in out
    assert "| long | stopped at its 5s deadline (what it wrote is kept) |" in out
