"""A setting's label is written once (`skipcore.labels.setting_label`): the sweep grid and its progress lines, the
quality tables, the dashboard and the notebooks give the same words for the same setting."""

from __future__ import annotations

import ast
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from skipcore.evaluate import SweepConfig, build_grid
from skipcore.labels import setting_label

REPO = Path(__file__).resolve().parents[1]


def every_kind_of_setting() -> list:
    """One setting of every policy and mode the sweep has, transformers' plain and assisted generate() included."""
    cfg = SweepConfig(
        model="m",
        dataset="d",
        out=Path("unused.parquet"),
        batch_sizes=(1,),
        policies=("static", "calm", "adaptive", "speculative", "transformers"),
        targets=(1.0, 3.0),
        calm_thresholds=(0.8,),
        adaptive_thresholds=(0.3,),
        adaptive_min_layers=(3,),
        speculative_targets=(3.0,),
        draft_tokens=(4,),
        assistant_exits=(4,),
    )
    return build_grid(cfg)


def test_every_setting_has_its_own_label_in_the_agreed_words():
    labels = [setting_label(s) for s in every_kind_of_setting()]
    assert len(set(labels)) == len(labels)
    assert labels == [
        "full depth",
        "linear/skip x3",
        "linear/exit x3",
        "linear/middle x3",
        "calm softmax>=0.8",
        "adaptive max_prob>=0.3 drop 2 min 3",
        "speculative k=4, draft linear/skip x3",
        "transformers generate()",
        "transformers assistant_early_exit=4, k=4",
    ]


def test_a_sweep_row_and_its_setting_have_the_same_label():
    """The grid labels Setting objects; the dashboard, the tables and the notebooks label rows of a sweep table,
    where ints come back as floats and None as NaN."""
    settings = every_kind_of_setting()
    table = pd.DataFrame([asdict(s) for s in settings])
    for setting, row, (_, series) in zip(settings, table.itertuples(), table.iterrows(), strict=True):
        assert setting.label() == f"model b1 {setting_label(setting)}"  # the grid's and the CLI's
        assert setting_label(row) == setting_label(setting) == setting_label(series)


def test_the_quality_tables_say_the_same_label():
    from skipcore.evaluate.quality import speculative_table

    settings = [
        s for s in every_kind_of_setting() if s.policy in ("speculative", "transformers") or s.is_full
    ]
    table = pd.DataFrame([asdict(s) for s in settings]).assign(
        bleu=60.0, rougeL=60.0, flops_speedup_with_prompt=1.0, tokens_per_s=10.0
    )
    lines = "\n".join(speculative_table(table, {}, "BLEU"))
    for s in settings:
        assert f"| {setting_label(s)} |" in lines


def test_the_cli_prints_the_label(capsys):
    from skipcore.commands.sweep import report_row

    s = every_kind_of_setting()[5]
    report_row(s, {"bleu": 60.0, "timing_runs": 0}, progress=False)
    assert capsys.readouterr().err.startswith(f"model b1 {setting_label(s)}: BLEU 60.0")


def _python_sources() -> dict[str, str]:
    files = [*(REPO / "skipcore").rglob("*.py"), *(REPO / "app").rglob("*.py")]
    out = {str(p.relative_to(REPO)): p.read_text() for p in files}
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        out[str(nb.relative_to(REPO))] = "\n".join(
            line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
    return out


@pytest.mark.parametrize("where", ["app/sections/explorer.py", "notebooks/06_beyond_the_paper.ipynb"])
def test_the_dashboard_and_the_notebooks_take_the_label_from_skipcore(where):
    tree = ast.parse(_python_sources()[where])
    imported = {
        (node.module, a.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    assert ("skipcore.labels", "setting_label") in imported


def test_no_second_label_function():
    """Only skipcore.labels writes a setting's label: no other `label()` function formats one. (`Setting.label`
    prefixes it with the model's role and batch size; a policy object's `label()` describes its resolved budgets,
    `linear 12->4 (skip, w=1)`, for the generate command's summary line.)"""
    allowed = {"skipcore/labels.py", "skipcore/evaluate/settings.py"}
    for where, source in _python_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name in (
                "label",
                "setting_label",
                "_speculative_label",
            ):
                assert where in allowed or where.startswith("skipcore/policies/"), (
                    f"{where} defines {node.name}()"
                )
