"""The sweep on a tiny random model and a tiny data set: every column, Parquet + CSV + traces, resuming
without recomputing finished rows, and refusing another model's results file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from skipcore import sweep
from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.trace import read_trace
from tests.conftest import as_trained_model

SOURCES = [
    ("name[The Eagle], eatType[pub]", ["The Eagle is a pub.", "The Eagle is a pub you can visit."]),
    ("name[Aromi], food[Italian]", ["Aromi serves Italian food."]),
    ("name[Green Man], area[riverside]", ["Green Man is in the riverside area."]),
]

COLUMNS = [
    "setting_id", "model", "model_role", "policy", "shape", "mode", "warmup", "target_speedup",
    "max_layers", "min_layers", "batch_size", "calm_threshold", "calm_measure", "calm_min_layers",
    "bleu", "rougeL", "chrf", "layer_speedup", "flops_speedup_decode", "flops_speedup_with_prompt",
    "batch_layer_speedup", "batch_flops_speedup_decode", "schedule_speedup",
    "seconds", "decode_seconds", "decode_ms_per_step", "tokens_per_s",
    "full_seconds", "full_decode_ms_per_step", "wall_speedup_total", "wall_speedup_decode",
    "kv_cache_bytes", "kv_cache_bytes_full", "kv_bytes_saved", "kv_saved_fraction",
    "timing_runs", "device", "dtype", "hardware", "num_layers", "dataset", "split", "max_new_tokens", "speedup_over", "trace_path",
]  # fmt: skip


@pytest.fixture
def dataset(tmp_path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in SOURCES))
    return path


@pytest.fixture
def csv_dataset(tmp_path) -> Path:
    d = tmp_path / "e2e"
    d.mkdir()
    rows = [{"mr": s, "ref": r} for s, refs in SOURCES for r in refs]
    pd.DataFrame(rows).to_csv(d / "test.csv", index=False)
    return d


def config(model_dirs, dataset, out, **kw) -> sweep.SweepConfig:
    base = dict(
        model=str(model_dirs["opt"]),
        dataset=str(dataset),
        out=out,
        split="test",
        limit=None,
        targets=(1.0, 2.0),
        modes=("skip", "exit"),
        batch_sizes=(1, 2),
        policies=("static", "calm"),
        calm_thresholds=(0.0,),
        max_new_tokens=10,
        device="cpu",
        dtype="float32",
        progress=False,
    )
    return sweep.SweepConfig(**{**base, **kw})


def count_runs(monkeypatch) -> list:
    calls = []
    real = sweep.run_setting

    def counting(engine, examples, setting, cfg):
        calls.append((setting, cfg.max_new_tokens))
        return real(engine, examples, setting, cfg)

    monkeypatch.setattr(sweep, "run_setting", counting)
    return calls


def test_sweep_writes_every_column_parquet_csv_and_traces(model_dirs, dataset, tmp_path):
    out = tmp_path / "res" / "sweep.parquet"
    df = sweep.run_sweep(config(model_dirs, dataset, out, baseline_model=str(model_dirs["gpt2"])))
    # per model and batch size: full, skip x2, exit x2, calm
    assert len(df) == 2 * 2 * 4
    missing = [c for c in COLUMNS if c not in df.columns]
    assert not missing, missing
    assert df["setting_id"].is_unique
    assert set(df["model_role"]) == {"model", "baseline"} and set(df["model"]) == {"opt", "gpt2"}
    assert set(df["mode"]) == {"full", "skip", "exit", "calm"}
    full = df[df["mode"] == "full"]
    assert (full["layer_speedup"] == 1.0).all() and (full["target_speedup"] == 1.0).all()
    skip = df[(df["mode"] == "skip")]
    assert (skip["layer_speedup"] > 1.0).all() and (skip["kv_bytes_saved"] > 0).all()
    calm = df[df["policy"] == "calm"]
    assert (calm["layer_speedup"] == df["num_layers"].iloc[0]).all()  # threshold 0: exit at layer 1
    assert calm["target_speedup"].isna().all() and (calm["kv_bytes_saved"] == 0).all()
    assert df[["bleu", "rougeL", "chrf", "wall_speedup_decode", "wall_speedup_total"]].notna().all().all()
    # CSV is the same table
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert list(csv.columns) == list(df.columns) and len(csv) == len(df)
    # one readable trace per row, with its setting in the metadata
    for rel, sid in zip(df["trace_path"], df["setting_id"], strict=True):
        trace, meta = read_trace(out.parent / rel)
        assert meta["setting_id"] == sid and len(trace) > 0
    assert (out.parent / "sweep_traces").is_dir()
    assert not list(out.parent.glob(".*tmp*"))  # no temporary files left behind


def test_resume_skips_finished_rows(model_dirs, dataset, tmp_path, monkeypatch):
    out = tmp_path / "sweep.parquet"
    calls = count_runs(monkeypatch)
    first = sweep.run_sweep(config(model_dirs, dataset, out, targets=(1.0, 2.0), policies=("static",)))
    assert len(first) == 2 * 3
    calls.clear()
    second = sweep.run_sweep(config(model_dirs, dataset, out, targets=(1.0, 2.0, 3.0)))
    run = [s for s, n in calls if n == 10]  # leave out the short warm-up
    # new: 2 targets of 3x and one calm per batch size; full depth re-timed as this run's reference
    assert sorted((s.mode, s.target_speedup) for s in run if not s.is_full and s.policy == "static") == [
        ("exit", 3.0),
        ("exit", 3.0),
        ("skip", 3.0),
        ("skip", 3.0),
    ]
    assert sum(s.is_full for s in run) == 2 and sum(s.policy == "calm" for s in run) == 2
    assert len(second) == 2 * 6
    kept = second.set_index("setting_id").loc[first["setting_id"]]
    assert (kept["created"].values == first["created"].values).all()  # finished rows untouched
    # a third run has nothing left to do and loads no model
    calls.clear()
    third = sweep.run_sweep(config(model_dirs, dataset, out, targets=(1.0, 2.0, 3.0)))
    assert calls == [] and len(third) == len(second)


def test_interrupted_sweep_keeps_finished_rows(model_dirs, dataset, tmp_path, monkeypatch):
    out = tmp_path / "sweep.parquet"
    real = sweep.run_setting
    seen = []

    def failing(engine, examples, setting, cfg):
        if cfg.max_new_tokens == 10:
            seen.append(setting)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(engine, examples, setting, cfg)

    monkeypatch.setattr(sweep, "run_setting", failing)
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(config(model_dirs, dataset, out, policies=("static",), batch_sizes=(1,)))
    saved = pd.read_parquet(out)
    assert len(saved) == 2 and len(pd.read_csv(out.with_suffix(".csv"))) == 2
    monkeypatch.setattr(sweep, "run_setting", real)
    calls = count_runs(monkeypatch)
    done = sweep.run_sweep(config(model_dirs, dataset, out, policies=("static",), batch_sizes=(1,)))
    assert len(done) == 3 and sum(n == 10 for _, n in calls) == 2  # full depth re-timed, one new row


def test_refuses_results_of_another_model_or_dataset(model_dirs, dataset, csv_dataset, tmp_path):
    out = tmp_path / "sweep.parquet"
    small = dict(targets=(1.0,), policies=("static",), batch_sizes=(1,))
    sweep.run_sweep(config(model_dirs, dataset, out, **small))
    with pytest.raises(UserError, match="another model"):
        sweep.run_sweep(config(model_dirs, dataset, out, model=str(model_dirs["gpt2"]), **small))
    with pytest.raises(UserError, match="another dataset"):
        sweep.run_sweep(config(model_dirs, csv_dataset, out, **small))
    df = sweep.run_sweep(config(model_dirs, csv_dataset, out, overwrite=True, **small))
    assert len(df) == 1 and set(df["dataset"]) == {str(csv_dataset)}
    other = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(other)
    with pytest.raises(UserError, match="not written by a sweep"):
        sweep.run_sweep(config(model_dirs, dataset, other, **small))


def test_cli_runs_a_sweep_and_reports_user_errors(model_dirs, csv_dataset, tmp_path, capsys):
    out = tmp_path / "cli.parquet"
    args = ["sweep", "--model", str(model_dirs["llama"]), "--dataset", str(csv_dataset), "--limit", "2"]
    args += ["--targets", "1,2", "--modes", "middle", "--batch-sizes", "2", "--policies", "static,calm"]
    args += ["--calm-thresholds", "0.5", "--max-new-tokens", "5", "--device", "cpu", "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0
    df = pd.read_parquet(out)
    assert sorted(df["mode"]) == ["calm", "full", "middle"] and (df["num_examples"] == 2).all()
    printed = capsys.readouterr().out
    assert "BLEU / ROUGE-L by target speedup (batch size 2)" in printed and "| 2x |" in printed
    assert "CALM-DEC (softmax confidence)" in printed and "Measured wall-clock speedup" in printed
    assert main([*args, "--out", str(out), "--modes", "sideways"]) == 2
    assert "--modes: unknown value 'sideways'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "x.csv")]) == 2
    assert "must be a .parquet file" in capsys.readouterr().err


def test_targets_are_met_over_the_models_typical_output_length(model_dirs, dataset, tmp_path):
    """A skipcore-trained model says its median output length; targets are met over it (+ EOS), not over
    max_new_tokens, which rows ending at EOS never reach."""
    from skipcore.schedule import schedule_for_speedup

    model = as_trained_model(model_dirs["opt"], tmp_path / "model", 16, 5, 6)
    cfg = sweep.resolve_lengths(config(model_dirs, dataset, tmp_path / "s.parquet", model=str(model)))
    assert (cfg.max_new_tokens, cfg.decay_span, cfg.speedup_over) == (10, 5, 7)
    short = sweep.resolve_lengths(
        config(model_dirs, dataset, tmp_path / "s.parquet", model=str(model), max_new_tokens=4)
    )
    assert short.speedup_over == 4  # never beyond what is generated
    cfg = sweep.resolve_lengths(
        config(
            model_dirs,
            dataset,
            tmp_path / "s.parquet",
            model=str(model),
            targets=(3.0,),
            modes=("skip",),
            policies=("static",),
            batch_sizes=(1,),
        )
    )
    df = sweep.run_sweep(cfg)
    row = df[df["target_speedup"] == 3.0].iloc[0]
    expected = schedule_for_speedup(6, 3.0, 7, "linear", "skip", 1, decay_span=5)
    assert (row["max_layers"], row["min_layers"]) == (expected.max_layers, expected.min_layers)
    assert row["schedule_speedup"] == pytest.approx(expected.layer_speedup(7)) and row["speedup_over"] == 7
    with pytest.raises(UserError, match="speedup-over"):
        sweep.resolve_lengths(config(model_dirs, dataset, tmp_path / "s.parquet", speedup_over=1))
