"""scripts/paired_bleu.py: two sweeps' outputs rebuilt from their per-token traces score what the sweeps scored,
and their BLEU gap comes with a paired bootstrap interval around it."""

from __future__ import annotations

import re
import subprocess
import sys

import pandas as pd

from tests.helpers import REPO

SWEEPS = REPO / "data/sweeps/smollm2_whole_splits"


def test_outputs_rebuilt_from_traces_score_as_the_sweeps_did():
    model = SWEEPS / "test_skipdecode-smollm2-e2e-4x-top-1800steps.parquet"
    reference = SWEEPS / "test_smollm2-e2e.parquet"
    done = subprocess.run(
        [sys.executable, "scripts/paired_bleu.py", "--model", f"{model}:skip", "--reference", str(reference),
         "--resamples", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = re.findall(r"^(model|reference): .*?BLEU ([\d.]+) \(the sweep's ([\d.]+)\)", done.stdout, re.M)
    said = {side: (ours, sweeps) for side, ours, sweeps in found}
    assert said["model"][0] == said["model"][1] and said["reference"][0] == said["reference"][1]
    bleu = pd.read_parquet(model).query("mode == 'skip'")["bleu"].iloc[0]
    assert float(said["model"][0]) == round(bleu, 2)
    gap, lo, hi = map(
        float, re.search(r"gap: ([-+][\d.]+) BLEU \[([-+][\d.]+), ([-+][\d.]+)\]", done.stdout).groups()
    )
    assert lo <= hi and abs(gap - (float(said["model"][0]) - float(said["reference"][0]))) < 0.011


def test_a_row_is_picked_by_its_mode_and_a_missing_one_is_refused():
    done = subprocess.run(
        [sys.executable, "scripts/paired_bleu.py", "--model",
         str(SWEEPS / "test_skipdecode-smollm2-e2e-4x-top-1800steps.parquet"), "--reference",
         str(SWEEPS / "test_smollm2-e2e.parquet"), "--resamples", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0  # two rows, one of them skip: that one
    wrong = subprocess.run(
        [sys.executable, "scripts/paired_bleu.py", "--model", f"{SWEEPS / 'test_smollm2-e2e.parquet'}:skip",
         "--reference", str(SWEEPS / "test_smollm2-e2e.parquet")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert wrong.returncode != 0 and "names 0 sweep rows; add :MODE" in wrong.stderr
