"""scripts/fused_agreement.py: the fused step against the unfused one on a split's prompts, as a table a reader can
rerun (docs/gpu.md quotes it on SmolLM2): on the CPU its plain bodies are the unfused step's bits under every
policy, and speculative decoding on it gives its own full depth."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO


def test_the_plain_fused_step_agrees_with_the_unfused_one_on_every_policy(model_dirs):
    args = ["--model", str(model_dirs["llama"]), "--limit", "3", "--new-tokens", "6", "--batch-size", "2"]
    args += ["--dtype", "float32", "--target", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "scripts/fused_agreement.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| plain |")]
    assert [r[1].strip() for r in rows] == ["full depth", "skip 2x", "speculative k=2 (3x drafts)"]
    for r in rows:
        assert r[2].strip() == "3/3" and r[4].strip() == "100.0%"
        assert r[5] == r[6]  # the same texts: the same BLEU
    assert "gives the fused step's full depth on 3/3 prompts" in done.stdout
