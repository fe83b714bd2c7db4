"""The sweep on a tiny random model and a tiny data set: every column, Parquet + CSV + traces, resuming
without recomputing finished rows, and refusing another model's results file."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.evaluate.sweep import grid, rows, units
from skipcore.evaluate.sweep.grid import POLICY_GRID, build_grid, policy_for
from skipcore.evaluate.sweep.quality import quality_tables
from skipcore.evaluate.sweep.runner import run_sweep
from skipcore.evaluate.sweep.settings import NAN, Setting, check_config, resolve_lengths
from skipcore.evaluate.sweep.store import SweepStore, read_sweep
from skipcore.measure.pareto import fronts
from skipcore.plots.tradeoffs import tradeoff_chart
from skipcore.traces import read_trace
from tests.helpers import SOURCES, as_trained_model, bench_argv, refused, speculative_config, sweep_config

COLUMNS = [
    "setting_id", "model", "model_role", "policy", "shape", "mode", "warmup", "target_speedup",
    "max_layers", "min_layers", "batch_size", "calm_threshold", "calm_measure", "calm_min_layers",
    "bleu", "rougeL", "chrf", "layer_speedup", "flops_speedup_decode", "flops_speedup_with_prompt",
    "batch_layer_speedup", "batch_flops_speedup_decode", "schedule_speedup",
    "seconds", "decode_ms_per_step", "tokens_per_s",
    "full_seconds", "full_decode_ms_per_step", "wall_speedup_total", "wall_speedup_decode",
    "wall_speedup_decode_lo", "wall_speedup_decode_hi", "wall_speedup_total_lo", "wall_speedup_total_hi",
    "timing_flag", "timing_prompts",
    "kv_cache_bytes", "kv_cache_bytes_full", "kv_bytes_saved", "kv_saved_fraction",
    "timing_runs", "device", "dtype", "hardware", "num_layers", "dataset", "split", "max_new_tokens", "speedup_over", "trace_path",
]  # fmt: skip


@pytest.fixture
def csv_dataset(tmp_path) -> Path:
    d = tmp_path / "e2e"
    d.mkdir()
    rows = [{"mr": s, "ref": r} for s, refs in SOURCES for r in refs]
    pd.DataFrame(rows).to_csv(d / "test.csv", index=False)
    return d


def count_runs(monkeypatch) -> list:
    calls = []
    real = rows.evaluate_setting

    def counting(engine, examples, setting, cfg):
        calls.append((setting, cfg.max_new_tokens))
        return real(engine, examples, setting, cfg)

    monkeypatch.setattr(rows, "evaluate_setting", counting)
    return calls


@pytest.mark.slow
def test_sweep_writes_every_column_parquet_csv_and_traces(model_dirs, sweep_dataset, tmp_path):
    out = tmp_path / "res" / "sweep.parquet"
    df = run_sweep(sweep_config(model_dirs, sweep_dataset, out, baseline_model=str(model_dirs["gpt2"])))
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
    # paired timing: an interval around each median, the repeats and the timed prompts said
    for m in ("decode", "total"):
        col = f"wall_speedup_{m}"
        assert (df[f"{col}_lo"] <= df[col] + 1e-12).all() and (df[col] <= df[f"{col}_hi"] + 1e-12).all()
    assert (df["timing_runs"] == 2).all() and (df["timing_prompts"] == len(SOURCES)).all()
    assert df["timing_flag"].map(lambda v: isinstance(v, str)).all()
    # CSV is the same table
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert list(csv.columns) == list(df.columns) and len(csv) == len(df)
    # each side's timed runs are written: a reader recomputes every median and interval from either file
    for table in (df, csv):
        for row in table.itertuples():
            assert_recomputed(row, "decode", "decode_ms_per_step")
            assert_recomputed(row, "total", "seconds")
    # one readable trace per row, with its setting in the metadata
    for rel, sid in zip(df["trace_path"], df["setting_id"], strict=True):
        trace, meta = read_trace(out.parent / rel)
        assert meta["setting_id"] == sid and len(trace) > 0
    assert (out.parent / "sweep_traces").is_dir()
    assert not list(out.parent.glob(".*tmp*"))  # no temporary files left behind


@pytest.mark.slow
def test_resume_skips_finished_rows(model_dirs, sweep_dataset, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep.parquet"
    calls = count_runs(monkeypatch)
    first = run_sweep(sweep_config(model_dirs, sweep_dataset, out, targets=(1.0, 2.0), policies=("static",)))
    assert len(first) == 2 * 3
    assert "resuming" not in capsys.readouterr().err
    calls.clear()
    second = run_sweep(sweep_config(model_dirs, sweep_dataset, out, targets=(1.0, 2.0, 3.0)))
    assert f"resuming {out}: 6 of 12 settings kept, 6 to run" in capsys.readouterr().err
    run = [s for s, _ in calls]
    # new: 2 targets of 3x and one calm per batch size; every row is timed against its own full-depth pairs
    assert sorted((s.mode, s.target_speedup) for s in run if not s.is_full and s.policy == "static") == [
        ("exit", 3.0),
        ("exit", 3.0),
        ("skip", 3.0),
        ("skip", 3.0),
    ]
    assert sum(s.is_full for s in run) == 0 and sum(s.policy == "calm" for s in run) == 2
    assert len(second) == 2 * 6
    kept = second.set_index("setting_id").loc[first["setting_id"]]
    assert (kept["created"].values == first["created"].values).all()  # finished rows untouched
    # a third run has nothing left to do and loads no model
    calls.clear()
    third = run_sweep(sweep_config(model_dirs, sweep_dataset, out, targets=(1.0, 2.0, 3.0)))
    assert calls == [] and len(third) == len(second)
    assert f"resuming {out}: 12 of 12 settings kept, 0 to run" in capsys.readouterr().err
    # its traces folder deleted: the resume said every setting kept, the rows naming files no longer there
    traced = third["trace_path"].dropna()
    assert len(traced) and all((out.parent / t).is_file() for t in traced)
    for t in traced:
        (out.parent / t).unlink()
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, targets=(1.0, 2.0, 3.0)))
    said = capsys.readouterr().err
    gone = f"12 of 12 settings kept, 0 to run; the traces of {len(traced)} kept settings are gone"
    assert gone in said, said


def test_interrupted_sweep_keeps_finished_rows(model_dirs, sweep_dataset, tmp_path, monkeypatch):
    out = tmp_path / "sweep.parquet"
    real = rows.evaluate_setting
    seen = []

    def failing(engine, examples, setting, cfg):
        seen.append(setting)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(engine, examples, setting, cfg)

    monkeypatch.setattr(rows, "evaluate_setting", failing)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, policies=("static",), batch_sizes=(1,)))
    saved = pd.read_parquet(out)
    assert len(saved) == 2 and len(pd.read_csv(out.with_suffix(".csv"))) == 2
    monkeypatch.setattr(rows, "evaluate_setting", real)
    assert not out.with_name(f".{out.name}.lock").exists()  # the lock goes with the interrupted run
    calls = count_runs(monkeypatch)
    done = run_sweep(sweep_config(model_dirs, sweep_dataset, out, policies=("static",), batch_sizes=(1,)))
    assert len(done) == 3 and len(calls) == 1  # only the missing row runs


def test_refuses_results_of_another_model_or_dataset(model_dirs, sweep_dataset, csv_dataset, tmp_path):
    out = tmp_path / "sweep.parquet"
    small = dict(targets=(1.0,), policies=("static",), batch_sizes=(1,))
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    with pytest.raises(UserError, match="other settings: model=") as refused:
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, model=str(model_dirs["gpt2"]), **small))
    from skipcore.commands.sweep import grid_flag_names

    assert "other settings: --model=" in refused.value.said_as(grid_flag_names())  # the command line's words
    with pytest.raises(UserError) as refused:
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, threads=2, attn="eager", **small))
    said = refused.value.said_as(grid_flag_names())
    assert (
        "other settings: --attn='sdpa' (not 'eager'), --threads not given (not 2); pass --overwrite" in said
    )
    with pytest.raises(UserError, match="other settings: dataset="):
        run_sweep(sweep_config(model_dirs, csv_dataset, out, **small))
    # every setting that changes results is part of the identity, and each difference is named
    with pytest.raises(
        UserError, match=r"max_new_tokens=10 \(not 6\), speedup_over=10 \(not 6\), repeats=2 \(not 3\)"
    ):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, max_new_tokens=6, repeats=3, **small))
    df = run_sweep(sweep_config(model_dirs, csv_dataset, out, overwrite=True, **small))
    assert len(df) == 1 and set(df["dataset"]) == {str(csv_dataset)}
    other = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(other)
    for overwrite in (False, True):  # a file that is not a sweep's is never replaced
        with pytest.raises(UserError, match="not a skipcore sweep's results"):
            run_sweep(sweep_config(model_dirs, sweep_dataset, other, overwrite=overwrite, **small))
    assert pd.read_parquet(other).equals(pd.DataFrame({"a": [1]}))


def test_cli_runs_a_sweep_and_reports_user_errors(model_dirs, csv_dataset, tmp_path, capsys):
    out = tmp_path / "cli.parquet"
    args = ["sweep", "--model", str(model_dirs["llama"]), "--dataset", str(csv_dataset), "--limit", "2"]
    args += ["--targets", "1,2", "--modes", "middle", "--batch-sizes", "2", "--policies", "static,calm"]
    args += ["--calm-thresholds", "0.5", "--max-new-tokens", "5", "--device", "cpu", "--no-progress"]
    assert main([*args, "--out", str(out), "--repeats", "2"]) == 0
    said = capsys.readouterr()
    assert said.err.count("measured decode") == 3  # --no-progress: one line per finished setting
    df = pd.read_parquet(out)
    assert sorted(df["mode"]) == ["calm", "full", "middle"] and (df["num_examples"] == 2).all()
    printed = said.out
    assert (
        "BLEU / ROUGE-L (realised layer speedup) by target speedup (batch size 2)" in printed
        and "| 2x |" in printed
    )
    assert "CALM-DEC (softmax confidence)" in printed and "Measured wall-clock speedup" in printed
    assert main([*args, "--out", str(out), "--modes", "sideways"]) == 2
    assert "--modes: unknown value 'sideways'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "x.csv")]) == 2
    assert "error: --out must be a .parquet file" in capsys.readouterr().err
    fresh = tmp_path / "fresh.parquet"
    assert main([*args, "--out", str(fresh), "--traces-dir", str(fresh)]) == 2
    assert f"error: --traces-dir {fresh} is the sweep's own fresh.parquet" in capsys.readouterr().err
    assert main([*args, "--out", str(fresh), "--traces-dir", str(out)]) == 2
    assert "(--traces-dir; by default beside --out, named after it) is a file" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--max-new-tokens", "4"]) == 2
    assert "pass --overwrite to replace it or choose another --out" in capsys.readouterr().err


def test_the_output_paths_are_refused_by_their_settings_names_from_python(
    model_dirs, sweep_dataset, tmp_path
):
    """From Python a refusal names `SweepConfig`'s fields (the command line says its flags, above)."""
    out = tmp_path / "s.parquet"
    (tmp_path / "a_file").write_text("mine")
    for kw, said, fields in (
        (dict(out=tmp_path / "s.csv"), "out must be a .parquet file", ("out",)),
        (dict(traces_dir=out), f"traces_dir {out} is the sweep's own s.parquet", ("traces_dir",)),
        (dict(traces_dir=tmp_path / "a_file"), "(traces_dir; by default beside out,", ("traces_dir", "out")),
        (dict(out=tmp_path / ("a" * 300 + ".parquet")), "out '", ("out",)),
        # the model's own folder: its traces were written in among the weights
        (dict(traces_dir=model_dirs["opt"]), "holds a model (config.json); name a folder", ("traces_dir",)),
    ):
        with pytest.raises(UserError) as e:
            run_sweep(sweep_config(model_dirs, sweep_dataset, kw.pop("out", out), **kw))
        assert said in str(e.value) and "--" not in str(e.value) and e.value.fields == fields, str(e.value)
    assert not out.exists() and (tmp_path / "a_file").read_text() == "mine"
    assert not list(Path(model_dirs["opt"]).glob("*.parquet"))


def test_a_traces_folder_holding_another_tools_config_is_taken(model_dirs, sweep_dataset, tmp_path):
    """Only a model's config (its model_type said) makes a folder a model's: a config.json of another tool's in
    the folder named for the traces is no reason to refuse it, and it is left as it was."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "config.json").write_text('{"theme": "dark"}')
    small = dict(limit=1, targets=(1.0,), modes=("skip",), policies=("static",), batch_sizes=(1,), repeats=1)
    run_sweep(sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", traces_dir=traces, **small))
    assert (traces / "config.json").read_text() == '{"theme": "dark"}' and list(traces.glob("*.parquet"))


def test_targets_are_met_over_the_models_typical_output_length(model_dirs, sweep_dataset, tmp_path):
    """A skipcore-trained model says its median output length; targets are met over it (+ EOS), not over
    max_new_tokens, which rows ending at EOS never reach."""
    from skipcore.schedule import schedule_for_speedup

    model = as_trained_model(model_dirs["opt"], tmp_path / "model", 16, 5, 6)
    cfg = resolve_lengths(sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", model=str(model)))
    assert (cfg.max_new_tokens, cfg.decay_span, cfg.speedup_over) == (10, 5, 7)
    short = resolve_lengths(
        sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", model=str(model), max_new_tokens=4)
    )
    assert short.speedup_over == 4  # never beyond what is generated
    cfg = resolve_lengths(
        sweep_config(
            model_dirs,
            sweep_dataset,
            tmp_path / "s.parquet",
            model=str(model),
            targets=(3.0,),
            modes=("skip",),
            policies=("static",),
            batch_sizes=(1,),
        )
    )
    df = run_sweep(cfg)
    row = df[df["target_speedup"] == 3.0].iloc[0]
    expected = schedule_for_speedup(6, 3.0, 7, "linear", "skip", 1, decay_span=5)
    assert (row["max_layers"], row["min_layers"]) == (expected.max_layers, expected.min_layers)
    assert row["schedule_speedup"] == pytest.approx(expected.layer_speedup(7)) and row["speedup_over"] == 7
    with pytest.raises(UserError, match="speedup_over must be >= 2"):
        resolve_lengths(sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", speedup_over=1))


def test_overwrite_deletes_only_its_own_old_traces_and_only_after_the_run(
    model_dirs, sweep_dataset, tmp_path
):
    out = tmp_path / "sweep.parquet"
    small = dict(targets=(1.0, 2.0), modes=("skip",), policies=("static",), batch_sizes=(1,))
    first = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    # a results table whose trace_path points outside the traces folder (hand-edited, or another tool's)
    victim = tmp_path / "precious.parquet"
    victim.write_bytes(b"not yours")
    tampered = first.copy()
    tampered.loc[0, "trace_path"] = "precious.parquet"
    store = SweepStore(
        out, sweep_config(model_dirs, sweep_dataset, out, **small).identity(), False, tmp_path / "x"
    )
    store.rows = tampered.to_dict("records")
    store.flush()
    old_traces = sorted((out.parent / "sweep_traces").glob("*.parquet"))
    seen_during = []

    def check(setting, row, result):  # old traces still there while the new run goes on
        seen_during.append(all(p.exists() for p in old_traces))

    new = run_sweep(
        sweep_config(model_dirs, sweep_dataset, out, overwrite=True, max_new_tokens=6, **small), check
    )
    assert victim.read_bytes() == b"not yours"
    assert seen_during and all(seen_during)
    assert len(new) == 2 and (new["max_new_tokens"] == 6).all()
    kept = {out.parent / r for r in new["trace_path"]}
    assert all(p.exists() for p in kept)
    for (
        p
    ) in old_traces:  # the old run's traces are gone, the one its table no longer listed too: by their names
        assert p.exists() == (p in kept), (
            p
        )  # and their metadata they are this sweep's own, and no row names them


def test_a_second_writer_is_refused_and_a_stale_lock_taken_over(model_dirs, sweep_dataset, tmp_path):
    import os

    out = tmp_path / "sweep.parquet"
    small = dict(targets=(1.0,), policies=("static",), batch_sizes=(1,))
    lock = out.with_name(f".{out.name}.lock")
    lock.write_text(str(os.getppid()))  # a live process holds it
    with pytest.raises(UserError, match=f"another sweep \\(pid {os.getppid()}\\) is writing"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    assert not out.exists() and lock.read_text() == str(os.getppid())
    lock.write_text("999999999")  # no such process: a crashed sweep's lock
    with pytest.warns(UserWarning, match="no longer running"):
        df = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    assert len(df) == 1 and not lock.exists()
    # x.PARQUET writes the same x.csv copy: one lock for both names
    lock.write_text(str(os.getppid()))
    with pytest.raises(UserError, match="another sweep"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out.with_suffix(".PARQUET"), **small))
    lock.unlink()


def test_a_pipe_as_output_is_refused_not_waited_on(model_dirs, sweep_dataset, tmp_path, capsys):
    """A named pipe as --out: the sweep read it and waited forever; the bench replaced it with --overwrite."""
    import os

    pipe = tmp_path / "p.parquet"
    os.mkfifo(pipe)
    with pytest.raises(UserError, match="is not a regular file"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, pipe, targets=(1.0,), batch_sizes=(1,)))
    os.mkfifo(tmp_path / "b.json")
    said = refused(capsys, [*bench_argv("opt-tiny", 4, 4, tmp_path / "b.json"), "--overwrite"])
    assert "is not a regular file" in said and (tmp_path / "b.json").is_fifo()


def test_timing_alternates_full_depth_and_the_setting_after_a_warm_up(model_dirs, sweep_dataset, monkeypatch):
    from skipcore import SkipEngine, load_model
    from skipcore.policies import CalmPolicy

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu", dtype="float32"))
    order = []
    real = engine.generate

    def recording(prompts, policy=None, *a, **kw):
        order.append("full" if policy is None else "setting")
        return real(prompts, policy, *a, **kw)

    monkeypatch.setattr(engine, "generate", recording)
    from skipcore.measure.paired_timing import measure_against_full

    cols = measure_against_full(engine, ["MR: name[Aromi]\nText:"], CalmPolicy(0.5), 10, 1, 3)
    assert order == ["full", "setting"] * 4  # one warm-up pair, then three timed pairs
    assert cols["timing_runs"] == 3
    assert cols["wall_speedup_decode_lo"] <= cols["wall_speedup_decode"] <= cols["wall_speedup_decode_hi"]


# -- adaptive SkipDecode in the sweep ------------------------------------------------------------------------
ADAPTIVE = dict(
    targets=(1.0, 2.0),
    modes=("skip",),
    batch_sizes=(2,),
    policies=("static", "adaptive"),
    policy_values={"adaptive_threshold": (0.0, 1.0), "adaptive_drop": (2,), "adaptive_min_layers": (2,)},
    repeats=0,
)


def adaptive(**values) -> dict:
    """ADAPTIVE with some parameter columns' values replaced."""
    return {**ADAPTIVE, "policy_values": {**ADAPTIVE["policy_values"], **values}}


def test_adaptive_rows_carry_their_parameters_and_realised_speedup(model_dirs, sweep_dataset, tmp_path):
    out = tmp_path / "adaptive.parquet"
    df = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **ADAPTIVE))
    adaptive = df[df["policy"] == "adaptive"].set_index("adaptive_threshold")
    assert sorted(adaptive.index) == [0.0, 1.0] and len(df) == 4
    assert (adaptive["adaptive_drop"] == 2).all() and (adaptive["adaptive_min_layers"] == 2).all()
    assert (adaptive["adaptive_signal"] == "max_prob").all() and adaptive["target_speedup"].isna().all()
    assert (adaptive["min_layers"] == 2).all() and adaptive["schedule_speedup"].isna().all()
    L = int(df["num_layers"].iloc[0])
    # threshold 0: every step is confident, so the budget falls by 2 a step to the floor; 1.0: never confident (a top probability below 1)
    never = adaptive.loc[1.0]
    assert never["layer_speedup"] == 1.0 and never["bleu"] == df[df["mode"] == "full"]["bleu"].iloc[0]
    always = adaptive.loc[0.0]
    trace, meta = read_trace(out.parent / always["trace_path"])
    decode = trace[(trace["step"] >= 1) & ~trace["finished"]]
    budgets = decode.groupby("step")["budget"].first()
    assert budgets.is_monotonic_decreasing and budgets.iloc[0] == L - 2 and budgets.min() >= 2
    # the realised speedup is the trace's own: L x tokens / layers run (as for CALM)
    assert always["layer_speedup"] == pytest.approx(L * len(decode) / decode["num_layers_run"].sum())
    assert always["layer_speedup"] > 1.0
    assert meta["setting"]["adaptive_threshold"] == 0.0
    # no timing asked for: the timing columns are there, empty, and say so
    assert (df["timing_runs"] == 0).all() and df["wall_speedup_decode"].isna().all()
    assert (df["timing_flag"] == "").all()


def test_adaptive_parameters_are_part_of_a_rows_identity(model_dirs, sweep_dataset, tmp_path, monkeypatch):
    out = tmp_path / "adaptive.parquet"
    first = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **ADAPTIVE))
    calls = count_runs(monkeypatch)
    # a new floor and a new drop: only those rows run, finished ones are kept
    more = adaptive(adaptive_min_layers=(2, 3), adaptive_drop=(2, 1))
    second = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **more))
    run = sorted(
        tuple(s.value(f"adaptive_{k}") for k in ("threshold", "drop", "min_layers")) for s, _ in calls
    )
    assert run == sorted((th, d, m) for th in (0.0, 1.0) for d in (2, 1) for m in (2, 3) if (d, m) != (2, 2))
    assert len(second) == len(first) + 6 and second["setting_id"].is_unique
    kept = second.set_index("setting_id").loc[first["setting_id"]]
    assert (kept["created"].values == first["created"].values).all()
    # the signal changes what a threshold means: another row, not a resumed one
    calls.clear()
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **adaptive(adaptive_signal=("entropy",))))
    assert len(calls) == 2 and all(s.value("adaptive_signal") == "entropy" for s, _ in calls)
    # timing is part of the file's identity: a timed rerun on an untimed file is refused, naming it
    with pytest.raises(UserError, match=r"repeats=0 \(not 2\)"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, **{**ADAPTIVE, "repeats": 2}))


def test_rows_of_older_sweeps_keep_their_ids():
    """A setting without adaptive or speculative parameters hashes as before they existed, so older files
    resume."""
    s = Setting("m", "model", "calm", 8, mode="calm", target_speedup=NAN, params=(("calm_threshold", 0.9),))
    later = ("draft_tokens", "assistant_exit")
    fields = {k: v for k, v in s.to_dict().items() if not k.startswith("adaptive_") and k not in later}
    assert fields["calm_measure"] is None and "params" not in fields  # every column of the first sweeps
    import hashlib

    blob = json.dumps([fields, {"a": 1}], sort_keys=True, default=str)
    assert s.setting_id({"a": 1}) == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_every_policy_is_one_grid_entry(model_dirs, sweep_dataset, tmp_path):
    cfg = sweep_config(model_dirs, sweep_dataset, tmp_path / "x.parquet", **adaptive(calm_threshold=(0.5,)))
    cfg = resolve_lengths(cfg)
    assert set(POLICY_GRID) == {"static", "calm", "adaptive", "speculative", "transformers"}
    grid = build_grid(replace(cfg, policies=("static", "calm", "adaptive")))
    assert [s.policy for s in grid] == ["static", "static", "calm", "adaptive", "adaptive"]
    for s in grid:
        policy, columns = policy_for(s, 6, cfg)
        assert policy.name == s.policy and set(columns) == {"max_layers", "min_layers", "schedule_speedup"}
        assert s.label().startswith("model b2 ")
    with pytest.raises(UserError, match="unknown sweep policy 'sideways'"):
        build_grid(replace(cfg, policies=("sideways",)))


def test_an_adaptive_floor_the_model_cannot_hold_is_refused_before_any_row(
    model_dirs, sweep_dataset, tmp_path, monkeypatch
):
    calls = count_runs(monkeypatch)
    out = tmp_path / "bad.parquet"
    with pytest.raises(UserError, match="adaptive_min_layers must be in") as refused:
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, **adaptive(adaptive_min_layers=(99,))))
    assert refused.value.field == "adaptive_min_layers"
    assert calls == []


def test_cli_sweeps_adaptive_without_timing(model_dirs, csv_dataset, tmp_path, capsys):
    out = tmp_path / "cli.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(csv_dataset), "--limit", "2"]
    args += ["--targets", "1,2", "--modes", "skip", "--batch-sizes", "2", "--policies", "static,adaptive"]
    args += ["--adaptive-thresholds", "0,0.5", "--adaptive-drops", "1", "--adaptive-min-layers", "2"]
    args += ["--max-new-tokens", "5", "--device", "cpu", "--no-progress", "--repeats", "0"]
    assert main([*args, "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert said.err.count("timing not measured (--repeats 0)") == 4
    assert "Adaptive SkipDecode (max_prob signal)" in said.out
    assert "Wall-clock timing not measured" in said.out and "Measured wall-clock speedup" not in said.out
    df = pd.read_parquet(out)
    assert sorted(df.loc[df["policy"] == "adaptive", "adaptive_threshold"]) == [0.0, 0.5]
    assert main([*args, "--out", str(out), "--adaptive-drops", "0"]) == 2
    assert "--adaptive-drops must be >= 1" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--adaptive-min-layers", "0"]) == 2
    assert "--adaptive-min-layers must be >= 1" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--repeats", "-1"]) == 2
    assert "--repeats must be >= 0" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--adaptive-thresholds", "0.5,1.5"]) == 2
    assert "never reaches it" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--adaptive-min-layers", "40"]) == 2
    err = capsys.readouterr().err  # the grid's setting is named with the flag's complaint
    assert "setting 'model b2 adaptive" in err and "got 40" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--warmup", "20"], "--warmup must be in [0, 5]"),
        (["--decay-span", "0"], "--decay-span must be >= 1, got 0"),
        (["--targets", "100"], "--targets 100x is out of reach"),
        (["--max-layers", "0"], "--max-layers 0 is outside [1, 6]"),
    ],
)
def test_a_grid_schedule_setting_is_refused_by_its_sweep_flag(
    model_dirs, csv_dataset, tmp_path, capsys, flags, said
):
    """A static setting's schedule fields are said as the sweep's own flags (not the library's names), and a layer
    count out of range is blamed on itself, not on the target a fit would then miss."""
    out = tmp_path / "cli.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(csv_dataset), "--limit", "2"]
    args += ["--max-new-tokens", "5", "--device", "cpu", "--no-progress", "--repeats", "0", "--out", str(out)]
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not out.exists()


def assert_recomputed(row, speedup: str, runs: str) -> None:
    """The row's measured speedup and its interval, recomputed from its two sides' timed runs (`*_runs`)."""
    import json

    from skipcore.measure.paired_timing import paired_ratio

    setting, full = (json.loads(getattr(row, f"{side}{runs}_runs")) for side in ("", "full_"))
    assert len(setting) == len(full) == row.timing_runs
    again = paired_ratio(full, setting)
    assert (again.median, again.lo, again.hi) == tuple(
        getattr(row, f"wall_speedup_{speedup}{end}") for end in ("", "_lo", "_hi")
    )


def test_speculative_and_transformers_rows_beside_full_depth(model_dirs, sweep_dataset, tmp_path, capsys):
    """Lossless rows score as full depth does; transformers' rows run at batch size 1 only, with no trace."""
    cfg = speculative_config(model_dirs, sweep_dataset, tmp_path / "spec.parquet", targets=(1.0,))
    df = run_sweep(cfg).set_index("batch_size", drop=False)
    full = df[df.policy == "static"]
    spec = df[df.policy == "speculative"]
    hf = df[df.policy == "transformers"]
    assert list(spec.batch_size) == [1, 2] and list(hf.batch_size) == [1, 1]
    for b, row in spec.iterrows():
        assert row.bleu == full.loc[b, "bleu"] and row.chrf == full.loc[b, "chrf"]
        assert 1 <= row.tokens_per_full_pass <= 3 and 0 <= row.draft_acceptance <= 1
        assert row.flops_speedup_with_prompt < 1 and (tmp_path / row.trace_path).exists()
        assert row.draft_tokens == 2 and row.wall_speedup_decode == row.wall_speedup_decode
    plain, assisted = hf[hf.assistant_exit.isna()].iloc[0], hf[hf.assistant_exit == 3].iloc[0]
    for row in (plain, assisted):
        assert row.bleu == full.loc[1, "bleu"] and row.trace_path == ""
        assert row.wall_speedup_total > 0 and row.timing_runs == 2
        assert row.wall_speedup_decode != row.wall_speedup_decode  # not measured apart for generate()
        assert_recomputed(row, "total", "seconds")
    # torch's count of generate() is our convention's full depth, up to the rotary tables it also counts
    assert plain.flops_speedup_with_prompt == pytest.approx(1.0, rel=1e-3)
    assert plain.tokens_per_full_pass == 1.0 and assisted.flops_speedup_with_prompt < 1
    assert assisted.draft_tokens == 2 and 0 <= assisted.draft_acceptance <= 1
    table = quality_tables(df.reset_index(drop=True))
    assert "Speculative decoding (lossless)" in table and "assistant_early_exit=3, k=2" in table


def test_transformers_rows_need_batch_one_and_a_llama_family_model(
    model_dirs, sweep_dataset, tmp_path, monkeypatch
):
    cfg = sweep_config(
        model_dirs, sweep_dataset, tmp_path / "t.parquet", policies=("transformers",), batch_sizes=(2,)
    )
    with pytest.raises(UserError, match="add 1 to --batch-sizes"):
        build_grid(cfg)
    loads = []
    monkeypatch.setattr(units.EngineCache, "get", lambda self, *a, **k: loads.append(a))
    cfg = replace(cfg, batch_sizes=(1,), policy_values={**cfg.policy_values, "assistant_exit": (3,)})
    with pytest.raises(UserError, match="assistant_early_exit runs on llama models; on this opt model"):
        run_sweep(cfg)
    for model_type in (
        "qwen2",
        "mistral",
    ):  # on skipcore's Llama adapter, not transformers' Llama code: it crashed
        with pytest.raises(UserError, match=f"on this {model_type} model it fails"):
            run_sweep(replace(cfg, model=str(model_dirs[model_type])))
    # a Llama model first and an OPT baseline second: refused from the configs, before the first model loads
    two = replace(cfg, model=str(model_dirs["llama"]), baseline_model=str(model_dirs["opt"]))
    with pytest.raises(
        UserError, match="setting 'baseline b1 transformers assistant_early_exit=3, .*this opt model"
    ):
        run_sweep(two)
    with pytest.raises(UserError, match=r"assistant exit layer must be in \[1, "):
        run_sweep(replace(two, baseline_model=None, policy_values={"assistant_exit": (99,)}))
    assert loads == [] and not (tmp_path / "t.parquet").exists()


def test_the_in_process_executor_is_the_default_and_keeps_its_model_between_units(
    model_dirs, sweep_dataset, tmp_path, monkeypatch
):
    loads = []
    get = units.EngineCache.get

    def counting(self, job, model, say=None):
        loads.append(self.key is None or self.key[0] != job.refs[model])
        return get(self, job, model, say)

    monkeypatch.setattr(units.EngineCache, "get", counting)
    cfg = sweep_config(
        model_dirs, sweep_dataset, tmp_path / "s.parquet", repeats=0, baseline_model=str(model_dirs["gpt2"])
    )
    df = run_sweep(cfg)  # no executor: this process
    assert len(df) == 16 and len(loads) == 16 and sum(loads) == 2  # a unit each, each model loaded once
    # two folders of one name (runs/model, base/model): the tables' columns still say which is which
    head = quality_tables(df.assign(model="model")).splitlines()[2]
    assert "| model skip |" in head and "| model · base model skip |" in head, head


def test_measured_speedups_from_two_machines_are_never_one_front(model_dirs, sweep_dataset, tmp_path):
    df = run_sweep(sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", repeats=1, timing_limit=2))
    one = quality_tables(df)
    assert (
        one.count("Measured wall-clock speedup against full depth") == 1 and "different machines" not in one
    )
    two = df.assign(hardware=df["batch_size"].map({1: "GPU A", 2: "GPU B"}))
    text = quality_tables(two)
    assert "Measured on 2 different machines: one table each, never one front across them" in text
    assert "skip mode on GPU A):" in text and "skip mode on GPU B):" in text
    assert text.count("Measured wall-clock speedup against full depth") == 2
    two = two.assign(timing_flag="")  # believed: a tiny model's timings may be flagged (on no front)
    measured = fronts(two, "wall_speedup_decode", "bleu")
    assert set(measured["machine"]) == {"GPU A", "GPU B"}
    for machine, front in measured.groupby("machine"):  # each front made of its own machine's rows only
        assert len(front) and set(front["setting_id"]) <= set(
            two.loc[two["hardware"] == machine, "setting_id"]
        )
    assert set(fronts(two, "layer_speedup", "bleu")["machine"]) == {""}  # theory: one front
    title = tradeoff_chart(two, "wall_speedup_decode", "bleu").to_dict()["title"]
    title = title["text"] if isinstance(title, dict) else title  # a dict where a far point adds a subtitle
    assert "(measured on 2 machines: a front each)" in title


def test_a_lossless_rows_line_says_whether_its_output_is_full_depths(
    model_dirs, tmp_path, capsys, monkeypatch
):
    from skipcore.commands.sweep import report_row

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t{i}"}) + "\n" for i in range(3)))
    cfg = speculative_config(
        model_dirs, data, tmp_path / "spec.parquet", targets=(1.0,), repeats=0, batch_sizes=(1,)
    )
    lines = []
    df = run_sweep(cfg, on_row=lambda s, row, _: lines.append((s, row)))
    spec = df[df.policy == "speculative"].iloc[0]
    assert spec["same_as_full_depth"] == 1.0 and (df["same_as_full_depth"].notna()).all()
    for setting, row in lines:
        report_row(setting, row, progress=False)
    err = capsys.readouterr().err
    assert "speculative" in err and "output = full depth's for 100% of prompts" in err
    setting, row = next((s, r) for s, r in lines if s.policy == "speculative")
    report_row(setting, {**row, "same_as_full_depth": 2 / 3}, progress=True)  # said even under a progress bar
    assert "output differs from full depth's for 33% of prompts" in capsys.readouterr().err
    # a resumed sweep whose full-depth row was done before still compares: full depth is generated once
    monkeypatch.setattr(grid, "FULL_DEPTH", grid.FullDepthOutputs())
    again = run_sweep(
        speculative_config(
            model_dirs,
            data,
            tmp_path / "b.parquet",
            targets=(1.0,),
            repeats=0,
            batch_sizes=(1,),
            policies=("speculative",),
        )
    )
    assert (again["same_as_full_depth"] == 1.0).all()


def test_an_overwrite_stopped_part_way_has_its_old_traces_removed_by_the_run_that_finishes_it(
    model_dirs, sweep_dataset, tmp_path
):
    """The old run's traces were known only in memory: an --overwrite stopped after its first row left them for
    good (no later run removed them). The record names them until a run finishes: a resume removes them, only
    those, and only then."""
    out = tmp_path / "sweep.parquet"
    small = dict(targets=(1.0, 2.0, 3.0), modes=("skip",), policies=("static",), batch_sizes=(1,))
    first = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    old = {(out.parent / r).resolve() for r in first["trace_path"]}

    def stop(setting, row, result):
        raise KeyboardInterrupt

    new = sweep_config(model_dirs, sweep_dataset, out, overwrite=True, max_new_tokens=6, **small)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(new, stop)
    assert all(p.exists() for p in old)  # not yet: the new run has not finished
    done = run_sweep(dataclasses.replace(new, overwrite=False))
    assert len(done) == 3 and (done["max_new_tokens"] == 6).all()
    now = set((out.parent / "sweep_traces").glob("*.parquet"))
    assert {p.resolve() for p in now} == {(out.parent / r).resolve() for r in done["trace_path"]}
    assert not any(p.exists() for p in old)


@pytest.mark.parametrize("launcher", ["python -m skipcore", "skipcore"])
def test_a_killed_sweep_stops_as_an_interrupted_one(model_dirs, sweep_dataset, tmp_path, launcher):
    """SIGTERM (a scheduler's or a container's stop) left the sweep's lock behind, for the next run to take over
    with a warning; it stops the run as Ctrl-C does: exit 130, its rows whole, its lock gone. The installed
    `skipcore` command too (it ended at once, exit 143, without a word: its handler was `python -m`'s alone)."""
    import signal
    import subprocess
    import sys
    import time

    if launcher == "skipcore":
        command = [str(Path(sys.executable).parent / "skipcore")]
        if not Path(command[0]).is_file():
            pytest.skip("the skipcore command is not installed beside this Python (pip install -e .)")
    else:
        command = [sys.executable, "-m", "skipcore"]

    out = tmp_path / "s.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--out", str(out)]
    args += ["--targets", "1,1.5,2,2.5,3", "--modes", "skip,exit,middle", "--batch-sizes", "1,2"]
    args += [
        "--policies",
        "static",
        "--repeats",
        "0",
        "--max-new-tokens",
        "24",
        "--no-progress",
        "--threads",
        "1",
    ]
    run = subprocess.Popen([*command, *args], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not out.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until its first row is written
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    said = re.search(rf"error: interrupted; {re.escape(str(out))} keeps the (\d+) settings? finished so far: the same "
                     "command resumes the rest", err)  # fmt: skip
    assert run.returncode == 130 and said, err
    assert not out.with_name(f".{out.name}.lock").exists()
    assert len(pd.read_parquet(out)) == len(pd.read_csv(out.with_suffix(".csv"))) == int(said[1]) >= 1


def test_a_config_takes_what_a_notebook_passes(model_dirs, sweep_dataset, tmp_path):
    """Text where a path belongs (`out`, `traces_dir`) was an AttributeError, a `Path` to the dataset was read as a
    hub name after the first setting had run (its trace left behind), and one value of an axis (`targets=2.0`,
    `modes="skip"`) a TypeError or a refusal of the value 's'."""
    out = tmp_path / "sweep.parquet"
    cfg = sweep_config(model_dirs, sweep_dataset, str(out), traces_dir=str(tmp_path / "traces"), targets=2.0,
                       modes="skip", batch_sizes=np.int64(1), policies="static",
                       policy_values={"calm_threshold": 0.5})  # fmt: skip
    assert cfg.policy_values["calm_threshold"] == (0.5,)
    cfg = replace(cfg, dataset=Path(sweep_dataset))
    assert cfg.out == out and cfg.traces_dir == tmp_path / "traces" and cfg.dataset == str(sweep_dataset)
    assert (cfg.targets, cfg.modes, cfg.batch_sizes, cfg.policies) == ((2.0,), ("skip",), (1,), ("static",))
    df = run_sweep(cfg)
    assert sorted(df["target_speedup"].fillna(1.0)) == [1.0, 2.0] and out.is_file()
    assert len(list((tmp_path / "traces").iterdir())) == 2


def test_a_configs_counts_take_numpys_and_refuse_other_kinds_before_any_work(
    model_dirs, sweep_dataset, tmp_path
):
    """NumPy's counts (`limit=np.int64(2)`, `repeats`, `threads`, `max_layers`) ran every setting, then the
    results' JSON record refused them: a traceback, no table, the traces left. Other kinds (`limit=2.0`,
    `"2"`) were a TypeError mid-run."""
    out = tmp_path / "sweep.parquet"
    small = dict(targets=(np.float32(1.5),), modes="skip", policies="static", batch_sizes=np.array([2]))
    cfg = sweep_config(model_dirs, sweep_dataset, out, limit=np.int64(2), repeats=np.int64(0),
                       threads=np.int64(1), max_layers=np.int64(5), max_new_tokens=np.int64(6), **small)  # fmt: skip
    df = run_sweep(cfg)
    assert len(df) == 2 and (df["num_examples"] == 2).all() and out.with_suffix(".csv").is_file()
    assert run_sweep(cfg).equals(df)  # the record reads back: the rerun resumes every row
    assert check_config(replace(cfg, limit=2.0, decay_span=25.0)).limit == 2  # a JSON writer's whole floats
    for kw, said in (({"limit": 2.5}, "limit must be a whole number, got 2.5"),
                     ({"limit": "2"}, "limit must be a whole number, got '2'"),
                     ({"repeats": True}, "repeats must be a whole number, got True"),
                     ({"batch_sizes": ("2",)}, "batch_sizes must all be whole numbers, got '2'"),
                     ({"targets": (2, "3")}, "targets must all be numbers, got '3'"),
                     ({"batch_sizes": ()}, "batch_sizes is empty: give at least one")):  # fmt: skip
        fresh = tmp_path / "fresh.parquet"
        with pytest.raises(UserError, match=re.escape(said)) as e:
            run_sweep(replace(cfg, out=fresh, traces_dir=None, **kw))
        assert (
            e.value.field == next(iter(kw))
            and not fresh.exists()
            and not (tmp_path / "fresh_traces").exists()
        )


def test_an_end_to_end_ratio_from_too_few_runs_is_starred_in_the_speculative_table():
    """The table starred only the decode column, by the row's flag: a total from one paired run, or transformers'
    generate() (timed end to end only, and flagged by nothing), read as a measurement."""
    from skipcore.evaluate.sweep.quality import speculative_table

    def row(policy: str, runs: int, decode: float, flag: str = "") -> dict:
        return {"model_role": "model", "batch_size": 1, "policy": policy, "mode": "full" if policy == "static"
                else None, "bleu": 60.0, "rougeL": 60.0, "flops_speedup_with_prompt": 1.0, "tokens_per_s": 10.0,
                "wall_speedup_decode": decode, "wall_speedup_decode_lo": decode, "wall_speedup_decode_hi": decode,
                "wall_speedup_total": 1.5, "wall_speedup_total_lo": 1.4, "wall_speedup_total_hi": 1.6,
                "timing_runs": runs, "timing_flag": flag, "draft_tokens": 2}  # fmt: skip

    nan = float("nan")
    table = pd.DataFrame(
        [
            row("static", 5, 1.0),
            row("speculative", 5, 1.8),
            row("speculative", 1, 1.8),
            row("transformers", 5, nan),
        ]
    )
    totals = [
        line.split(" | ")[-2]
        for line in speculative_table(table, {}, "BLEU")
        if line.startswith("| model | 1 |")
    ]
    assert totals == ["1.50x [1.40, 1.60]", "1.50x [1.40, 1.60]", "1.50x [1.40, 1.60]*", "1.50x [1.40, 1.60]"]
    flagged = table.assign(timing_flag=["", "", "", "two paired runs: ..."])
    totals = [
        line.split(" | ")[-2]
        for line in speculative_table(flagged, {}, "BLEU")
        if line.startswith("| model | 1 |")
    ]
    assert totals[-1].endswith("*")  # timed end to end only: its own flag stars its only ratio


def test_what_a_stop_left_of_its_own_trace_writes_goes_when_the_sweep_completes(
    model_dirs, sweep_dataset, tmp_path
):
    """A stop between a trace's write and its row's left a trace no row names, and a kill mid-write a hidden
    temporary file: neither a resume nor --overwrite removed them. The completed run removes both, and nothing of
    another sweep's or a user's beside them."""
    small = dict(limit=1, targets=(1.0,), modes=("skip",), policies=("static",), batch_sizes=(1,), repeats=1)
    out = tmp_path / "s.parquet"
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))
    rows, _ = read_sweep(out)
    kept = out.parent / rows["trace_path"].iloc[0]
    traces, owner = kept.parent, kept.stem.rsplit("-", 1)[1]
    unrecorded = shutil.copy(kept, traces / f"{'0' * 16}-{owner}.parquet")  # its metadata names this sweep
    cut_short = traces / f".{'1' * 16}-{owner}.{'ab' * 8}.tmp.parquet"
    cut_short.write_bytes(b"PAR1 half")
    others = [traces / f"{'2' * 16}-0badc0de.parquet", traces / "notes.parquet", traces / f".x-{owner}.tmp"]
    shutil.copy(kept, others[0])
    for p in others[1:]:
        p.write_text("mine")
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **small))  # every row kept: it completes at once
    assert kept.is_file() and not Path(unrecorded).exists() and not cut_short.exists()
    assert all(p.is_file() for p in others)


def test_the_tables_keep_every_shape_and_warmup_apart():
    """Two shapes and two warmups at one target are four settings: each its own column of the quality table and its
    own row of the measured one, never their mean (a score no setting had) nor the first row alone."""
    rows = [dict(mode="full", shape="full", warmup=0, target_speedup=1.0, bleu=70.0, wall=1.0)]
    for shape, warmup, bleu, wall in [
        ("linear", 1, 73.6, 2.5),
        ("linear", 3, 60.1, 2.6),
        ("step", 1, 75.9, 2.7),
        ("step", 3, 50.0, 2.8),
    ]:
        rows.append(dict(mode="skip", shape=shape, warmup=warmup, target_speedup=3.0, bleu=bleu, wall=wall))
    rows.append(dict(mode="exit", shape="linear", warmup=0, target_speedup=3.0, bleu=20.0, wall=2.9))
    df = pd.DataFrame(rows).assign(
        policy="static",
        batch_size=1,
        model_role="model",
        model="m",
        rougeL=50.0,
        layer_speedup=3.0,
        batch_layer_speedup=3.0,
        timing_runs=5,
        timing_flag="",
    )
    df = df.assign(wall_speedup_decode=df.pop("wall"))
    df = df.assign(
        wall_speedup_decode_lo=df.wall_speedup_decode - 0.1,
        wall_speedup_decode_hi=df.wall_speedup_decode + 0.1,
    )
    text = quality_tables(df)
    head, _, _, three = text.splitlines()[2:6]
    words = [
        "linear/skip warmup 1",
        "linear/skip warmup 3",
        "step/skip warmup 1",
        "step/skip warmup 3",
        "linear/exit",
    ]
    assert head == "| target speedup | " + " | ".join(f"m {w}" for w in words) + " |"
    assert three.split(" | ")[1:] == [
        "73.6 / 50.0 (3.00x)",
        "60.1 / 50.0 (3.00x)",
        "75.9 / 50.0 (3.00x)",
        "50.0 / 50.0 (3.00x)",
        "20.0 / 50.0 (3.00x) |",
    ]
    measured = text.split("Measured wall-clock speedup")[1].splitlines()
    for words, wall in [
        ("linear warmup 1", 2.5),
        ("linear warmup 3", 2.6),
        ("step warmup 1", 2.7),
        ("step warmup 3", 2.8),
    ]:
        assert f"| 3x {words} | 3.00 / 3.00 / {wall:.2f} [{wall - 0.1:.2f}, {wall + 0.1:.2f}] |" in measured
    # one shape and one warmup: the tables say the mode alone, as they always did
    one = quality_tables(df[(df["shape"] != "step") & (df["warmup"] != 3)])
    assert "| target speedup | m skip | m exit |" in one and "| 3x | 3.00 / 3.00 / 2.50" in one
