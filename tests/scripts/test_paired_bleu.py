"""scripts/paired_bleu.py: two sweeps' outputs rebuilt from their per-token traces score what the sweeps scored
(the script refuses otherwise), and their BLEU gap comes with a paired bootstrap interval around it, for one split
or pooled over several."""

from __future__ import annotations

import re
import subprocess
import sys

import pandas as pd

from tests.helpers import REPO

SWEEPS = REPO / "data/sweeps/smollm2_whole_splits"
MODEL = "skipdecode-smollm2-e2e-4x-top-1800steps"
GAP = r"gap: ([-+][\d.]+) BLEU \[([-+][\d.]+), ([-+][\d.]+)\] over (\d+) MRs \(([\d.]+) against ([\d.]+);"


def paired_bleu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/paired_bleu.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def bleu(sweep: str, mode: str) -> float:
    table = pd.read_parquet(SWEEPS / f"{sweep}.parquet")
    return float(table[table["mode"] == mode]["bleu"].iloc[0])


def test_a_gap_on_one_split_and_pooled_over_two():
    one = paired_bleu("--model", f"{SWEEPS}/test_{MODEL}.parquet:skip", "--reference",
                      f"{SWEEPS}/test_smollm2-e2e.parquet", "--resamples", "20")  # fmt: skip
    assert one.returncode == 0, one.stderr
    gap, lo, hi, n, model, reference = map(float, re.search(GAP, one.stdout).groups())
    assert n == 300 and lo <= hi
    assert model == round(bleu(f"test_{MODEL}", "skip"), 2)
    assert reference == round(bleu("test_smollm2-e2e", "full"), 2)
    assert abs(gap - (model - reference)) < 0.011
    pooled = paired_bleu(
        "--model", f"{SWEEPS}/test_{MODEL}.parquet:skip,{SWEEPS}/dev_{MODEL}.parquet:skip",
        "--reference", f"{SWEEPS}/test_smollm2-e2e.parquet,{SWEEPS}/dev_smollm2-e2e.parquet",
        "--split", "test,dev", "--resamples", "20",
    )  # fmt: skip
    assert pooled.returncode == 0, pooled.stderr
    both = re.search(GAP, pooled.stdout).groups()
    assert int(both[3]) == 600 and float(both[4]) not in (model, bleu(f"dev_{MODEL}", "skip"))


def test_a_row_is_picked_by_its_mode_and_a_wrong_split_or_mode_is_refused():
    default = paired_bleu("--model", f"{SWEEPS}/test_{MODEL}.parquet", "--reference",
                          f"{SWEEPS}/test_smollm2-e2e.parquet", "--resamples", "1")  # fmt: skip
    assert default.returncode == 0  # two rows, one of them skip: that one
    no_row = paired_bleu("--model", f"{SWEEPS}/test_smollm2-e2e.parquet:skip", "--reference",
                         f"{SWEEPS}/test_smollm2-e2e.parquet")  # fmt: skip
    assert no_row.returncode != 0 and "names 0 sweep rows; add :MODE" in no_row.stderr
    # test outputs scored against dev's references do not score what the sweep wrote
    wrong = paired_bleu("--model", f"{SWEEPS}/test_{MODEL}.parquet:skip", "--reference",
                        f"{SWEEPS}/test_smollm2-e2e.parquet", "--split", "dev")  # fmt: skip
    assert wrong.returncode != 0 and "rebuilt scores" in wrong.stderr
