"""`skipcore tune` from Python on a tiny model and corpus: every trial a sweep-format row, the front, the chosen
schedule that `Schedule.read_json` loads, the report, the held-out evaluation that never reads a searched row, a
run stopped mid-trial resumed without scoring a finished trial again, the floor no setting meets said with the best
found, the search space drawn from the declarations, the output folder's own files only, and the Ray path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.evaluate.sweep import InProcessExecutor, RayExecutor
from skipcore.evaluate.sweep.store import read_sweep
from skipcore.evaluate.tune import TuneSettings, check_settings, quality_at, run_tune, speedup_at
from skipcore.evaluate.tune import folder as tune_folder
from skipcore.evaluate.tune import study as tune_study
from skipcore.evaluate.tune import trials as tune_trials
from skipcore.evaluate.tune.choice import outcome
from skipcore.evaluate.tune.holdout import held_out_examples
from skipcore.evaluate.tune.space import SearchSpace, bounds, paper_linear
from skipcore.policies import SpeculativePolicy
from skipcore.policies.params import params_of
from skipcore.schedule import Schedule

SWEEP_COLUMNS = ["setting_id", "model", "model_role", "policy", "shape", "mode", "warmup", "target_speedup",
                 "max_layers", "min_layers", "batch_size", "draft_tokens", "bleu", "rougeL", "chrf", "layer_speedup",
                 "flops_speedup_decode", "flops_speedup_with_prompt", "batch_layer_speedup", "schedule_speedup",
                 "wall_speedup_decode", "timing_runs", "device", "dtype", "hardware", "num_layers", "dataset",
                 "split", "limit", "max_new_tokens", "decay_span", "speedup_over", "trace_path", "sweep_run_id"]  # fmt: skip


@pytest.fixture(scope="module")
def echo_data(model_dirs, tmp_path_factory) -> Path:
    """dev and test splits whose references are the tiny OPT model's own full-depth outputs (so full depth scores
    100 BLEU and a schedule that changes the text scores less); the splits share one source, which a held-out
    evaluation must leave out."""
    from skipcore import SkipEngine, load_model
    from skipcore.data import format_prompt

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    root = tmp_path_factory.mktemp("echo")
    sources = {"dev": [f"name[Place {i}], food[F{i % 3}]" for i in range(8)]}
    sources["test"] = [sources["dev"][0]] + [f"name[Spot {i}], area[A{i % 2}]" for i in range(5)]
    for split, srcs in sources.items():
        texts = engine.generate([format_prompt("generic", s) for s in srcs], None, 6).texts
        lines = [
            json.dumps({"source": s, "target": t.split("\n")[0].strip() or "x"}) for s, t in zip(srcs, texts)
        ]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def settings(model_dirs, data: Path, out: Path, **kw) -> TuneSettings:
    base = dict(model=str(model_dirs["opt"]), dataset=str(data), out=out, limit=8, batch_size=4, prune_after=4,
                max_new_tokens=6, trials=3, device="cpu", dtype="float32", progress=False, max_drop=100.0,
                shapes=("linear", "constant"))  # fmt: skip
    return TuneSettings(**{**base, **kw})


@pytest.mark.slow
def test_a_tune_writes_trials_front_chosen_schedule_and_report(model_dirs, echo_data, tmp_path):
    out = tmp_path / "tune"
    said = []
    s = settings(model_dirs, echo_data, out, evaluate_split="test", baseline_targets=(2.0,))
    result = run_tune(s, say=said.append)
    assert result.met
    trials, meta = read_sweep(out / "trials.parquet")  # a sweep's file: the Trade-offs page reads it
    assert [c for c in SWEEP_COLUMNS if c not in trials] == []
    assert list(trials.columns[: len(SWEEP_COLUMNS[:11])]) == SWEEP_COLUMNS[:11]  # in the sweep's order
    assert pd.read_csv(out / "trials.csv")["setting_id"].tolist() == trials["setting_id"].tolist()
    assert (trials["tune_state"] == "reference").sum() == 1 and trials["setting_id"].is_unique
    assert trials.loc[trials["tune_state"] == "reference", "bleu"].iloc[0] == pytest.approx(100.0)
    assert set(trials["tune_state"]) <= {"reference", "trial", "pruned"}
    assert (
        len([line for line in said if line.startswith("trial ")]) == 3
    )  # one line per trial (no progress bar)
    # the chosen schedule: the fastest row meeting the floor, as Schedule.read_json loads it
    chosen = Schedule.read_json(out / "best_schedule.json", 6)
    scored = trials[trials["tune_state"].isin(["trial", "reference"])]
    fastest = scored.loc[scored["layer_speedup"].idxmax()]
    assert chosen == Schedule.from_dict(json.loads(fastest["schedule_json"]))
    assert result.outcome.chosen["setting_id"] == fastest["setting_id"]
    front = pd.read_csv(out / "front.csv")
    assert (
        fastest["tune_label"] in front["tune_label"].tolist()
        and front["layer_speedup"].is_monotonic_increasing
    )
    report = (out / "report.md").read_text()
    assert (
        "**Floor**" in report
        and "**Chosen**" in report
        and f"--schedule-json {out / 'best_schedule.json'}" in report
    )
    assert "## Held out: test" in report and "paper's linear schedule" in report
    assert "| **chosen**: " in report and "| the paper's linear: " in report  # two 'linear 12->4' told apart
    assert "- **Few rows**: These scores come from 8 examples" in report  # the pages' small-sample rule
    # the held-out rows: scored on test less the source the search had read
    held, _ = read_sweep(out / "evaluation.parquet")
    assert set(held["split"]) == {"test"} and (held["num_examples"] == 5).all()
    assert {"chosen", "reference", "paper linear"} <= set(held["tune_state"])
    assert "left out, as the search had scored their sources: 1" in report
    record = json.loads((out / "tune.json").read_text())
    assert {"study.db", "trials.parquet", "best_schedule.json", "report.md"} <= set(record["files"])


@pytest.mark.slow
def test_a_stopped_tune_resumes_without_scoring_a_finished_trial_again(
    model_dirs, echo_data, tmp_path, monkeypatch
):
    out = tmp_path / "tune"
    scored = []
    real = tune_trials.score_task

    def counting(engine, job, task):
        scored.append(task.number)
        if task.number == 1 and scored.count(1) == 1:
            raise KeyboardInterrupt  # the run is stopped while trial 1 runs
        return real(engine, job, task)

    monkeypatch.setattr(tune_trials, "score_task", counting)
    with pytest.raises(KeyboardInterrupt):
        run_tune(settings(model_dirs, echo_data, out, trials=3))
    assert scored == [-1, 0, 1]
    said = []
    result = run_tune(settings(model_dirs, echo_data, out, trials=3), say=said.append)
    assert any("asked again" in line for line in said)
    assert f"resuming {out}: 1 of 3 trials kept, 2 to run" in said
    assert scored[3] == 2 and not {-1, 0} & set(
        scored[3:]
    )  # trial 1's point is asked again first, as trial 2
    # the trial the interruption left running is no failure: it is said as such, and not counted as a trial
    assert result.counts["complete"] == 3 and result.counts["failed"] == 0 and result.counts["stopped"] == 1
    assert "- **Trials**: 3 (3 scored on every row, 0 stopped after" in (out / "report.md").read_text()
    assert "0 failed; 1 left running by an interrupted run, asked again)" in (out / "report.md").read_text()
    # a few seconds of trials are said in seconds (not "0.1 min"), and none reads as nothing spent
    spent = re.search(
        r"\); ([\d.]+) (s|min|h) of trials in all, ([\d.]+) (s|min|h) this run\.",
        (out / "report.md").read_text(),
    )
    assert spent and spent[2] == spent[4] == "s" and float(spent[1]) > 0 and float(spent[3]) > 0, spent
    study = optuna.load_study(study_name="skipcore-tune", storage=f"sqlite:///{out / 'study.db'}")
    assert study.trials[2].params == study.trials[1].params
    # asked for fewer trials than the study holds: nothing runs, said without '3 of 2 trials kept'
    said.clear()
    run_tune(settings(model_dirs, echo_data, out, trials=2), say=said.append)
    assert f"resuming {out}: 3 trials kept, at least the 2 asked for; none to run" in said
    trials, _ = read_sweep(out / "trials.parquet")
    assert trials["setting_id"].is_unique and len(trials) == 1 + len(set(trials["tune_trial"]) - {-1})


@pytest.mark.slow
def test_a_floor_no_setting_meets_names_the_best_found(model_dirs, echo_data, tmp_path):
    out = tmp_path / "tune"
    s = settings(model_dirs, echo_data, out, model=str(model_dirs["gpt2"]), reference_model=str(model_dirs["opt"]),
                 max_drop=0.5, evaluate_split="test", prune_after=0)  # fmt: skip
    said = []
    result = run_tune(s, say=said.append)
    assert not result.met and result.outcome.best_found is not None
    line = result.outcome.line()
    assert line.startswith("no setting met the floor bleu 99.50 (full depth 100.00); the best found: ")
    assert not (out / "best_schedule.json").exists() and not (out / "evaluation.parquet").exists()
    assert "nothing to score on the held-out split" in said[-1]
    assert "No setting met the floor" in (out / "report.md").read_text()


def row(label, bleu, speed, state="trial"):
    return {
        "tune_label": label,
        "bleu": bleu,
        "layer_speedup": speed,
        "tune_state": state,
        "schedule_json": "",
    }


def test_a_floor_every_score_reaches_is_said():
    """Full depth scoring 0.12 BLEU on a few short rows, less the default drop of 1: a floor of -0.88, which every
    setting meets, so the fastest is chosen whatever it says; said, where a floor above 0 is not."""
    from skipcore.evaluate.tune.choice import floor_note

    assert "not above 0, which every score reaches" in floor_note("bleu", -0.88)
    assert floor_note("bleu", 0.5) is None


def test_the_fastest_setting_at_or_above_the_floor_is_chosen():
    table = pd.DataFrame([row("full", 60, 1.0, "reference"), row("a", 59.5, 1.5), row("b", 58, 2.5),
                          row("c", 59.0, 2.0), row("stopped", 10, 4.0, "pruned")])  # fmt: skip
    o = outcome(table, "bleu", "layer_speedup", 59.0, 60.0, model_is_reference=True)
    assert o.chosen["tune_label"] == "c" and o.met
    assert o.front["tune_label"].tolist() == ["full", "a", "c", "b"]  # a stopped trial is never on it
    o = outcome(table, "bleu", "layer_speedup", 60.5, 61.5, model_is_reference=True)
    assert not o.met and o.best_found["tune_label"] == "full"
    assert "no setting met the floor bleu 60.50 (full depth 61.50); the best found: full" in o.line()
    # another model's full depth sets the floor: the model's own trials only are candidates
    o = outcome(table, "bleu", "layer_speedup", 59.8, 60.8, model_is_reference=False)
    assert not o.met and o.best_found["tune_label"] == "a"
    # only full depth meets the floor: chosen, and said to be no skipping setting (the page then shows no success)
    o = outcome(table, "bleu", "layer_speedup", 59.8, 60.0, model_is_reference=True)
    assert o.met and o.chose_full_depth and o.chosen["tune_label"] == "full"
    assert o.line().endswith("1.00x; no setting that skips layers met the floor")
    assert not outcome(table, "bleu", "layer_speedup", 59.0, 60.0, model_is_reference=True).chose_full_depth


def test_the_paper_front_is_read_at_equal_speedup_and_equal_quality():
    family = pd.DataFrame({"x": [1.0, 1.5, 2.0, 3.0, 2.5], "y": [64.0, 62.0, 59.0, 55.0, 50.0]})
    assert quality_at(family, "x", "y", 1.75) == pytest.approx(60.5)
    assert quality_at(family, "x", "y", 0.9) == 64.0 and quality_at(family, "x", "y", 3.5) != quality_at(
        family, "x", "y", 3.5
    )  # NaN beyond the fastest point
    assert speedup_at(family, "x", "y", 63.0) == pytest.approx(1.25)
    assert speedup_at(family, "x", "y", 65.0) != speedup_at(family, "x", "y", 65.0)  # never that good: NaN
    assert speedup_at(family, "x", "y", 40.0) == 3.0  # every point at least that good: its fastest


def test_the_search_draws_runnable_settings_from_the_declarations(model_dirs, tmp_path):
    s = check_settings(TuneSettings(out=tmp_path, model=str(model_dirs["opt"]), max_new_tokens=8,
                                    policies=("static", "speculative", "adaptive", "calm"),
                                    modes=("skip", "exit", "middle"), warmups=(0, 1, 2, 9)))  # fmt: skip
    space = SearchSpace.of(s, 6)
    assert space.warmups == (0, 1, 2)  # 9 cannot run on 6 layers
    draft = next(p for p in params_of(SpeculativePolicy) if p.name == "draft_tokens")
    assert bounds(draft, 6, 16) == (1, 8)  # declared low 1, no high: the largest value it offers
    assert bounds(draft, 6, 6) == (
        1,
        6,
    )  # no more than the tokens a request makes (7 and 8 were refused trials)
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=optuna.samplers.RandomSampler(0))
    seen = set()
    for _ in range(
        60
    ):  # a point a policy's own check refuses (adaptive: warmup above its floor) is drawn again
        trial, candidate = tune_study.ask(study, space.suggest, lambda c: c.build().check(6, 8))
        study.tell(trial, [0.0, 1.0])
        seen.add((candidate.policy, candidate.schedule.shape if candidate.schedule else None))
        assert candidate.words()
        sch = candidate.schedule
        # a schedule with no decay is one schedule whatever the shape drawn: one key, one name
        if candidate.policy == "static" and sch.max_layers == sch.min_layers:
            assert sch.shape == "constant", sch.describe()
        if sch is not None and sch.shape == "power":  # drawn in hundredths, and named so
            assert f"alpha {sch.alpha:g})" in sch.describe() and sch.alpha == round(sch.alpha, 2)
    assert {p for p, _ in seen} == {"static", "speculative", "adaptive", "calm"}
    assert {shape for p, shape in seen if p == "static"} == {"linear", "power", "step", "constant"}
    # the paper's schedule, asked as a point, is drawn exactly
    params = space.paper_params(2.0, 8, 6)
    study.enqueue_trial(params)
    assert space.suggest(study.ask()).schedule == paper_linear(6, 2.0, 8, 6).schedule


def test_a_model_trained_at_one_schedule_is_searched_from_it(model_dirs, tmp_path):
    """The search's first point for a model trained at one schedule (the per-target recipe) is that schedule,
    drawn exactly; one the space cannot hold (another mode, a warmup it leaves out) is not asked."""
    s = check_settings(TuneSettings(out=tmp_path, model=str(model_dirs["opt"]), max_new_tokens=40))
    space = SearchSpace.of(s, 6)
    trained = {"shape": "linear", "mode": "skip", "max_layers": 5, "min_layers": 2, "warmup_layers": 1,
               "decay_span": 9, "alpha": 0.9, "stages": 4, "budgets": None}  # fmt: skip
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=optuna.samplers.RandomSampler(0))
    study.enqueue_trial(space.trained_params(trained))
    assert space.suggest(study.ask()).schedule == Schedule(6, "linear", "skip", 5, 2, 1, 9)
    assert space.trained_params({**trained, "mode": "exit"}) is None
    assert space.trained_params({**trained, "warmup_layers": 3}) is None  # the space holds warmups (1,)
    assert space.trained_params({**trained, "max_layers": 7}) is None


def test_bad_settings_are_refused_in_one_line_naming_the_setting(model_dirs, tmp_path):
    base = dict(out=tmp_path / "o", model=str(model_dirs["opt"]), dataset="data/e2e_synth")
    for kw, field in (({"max_drop": -1.0}, "max_drop"), ({"metric": "bleurt"}, "metric"),
                      ({"evaluate_split": "dev"}, "evaluate_split"), ({"trials": 0}, "trials"),
                      ({"shapes": ("custom",)}, "shapes"), ({"baseline_targets": (0.5,)}, "baseline_targets")):  # fmt: skip
        with pytest.raises(UserError) as e:
            check_settings(TuneSettings(**base, **kw))
        assert e.value.field == field and "\n" not in str(e.value)
    for split, hint in (
        ("dev", "choose another (test)"),
        ("test", "choose another"),
    ):  # never the refused one
        with pytest.raises(UserError) as e:
            check_settings(TuneSettings(**base, split=split, evaluate_split=split))
        assert str(e.value).endswith(hint)
    assert not (tmp_path / "o").exists()


def test_numpys_numbers_are_taken_as_pythons(tmp_path):
    """`trials=np.int64(2)` was refused as no whole number, and a NumPy array of warmups as no list."""
    import numpy as np

    s = check_settings(TuneSettings(out=tmp_path / "o", trials=np.int64(2), max_drop=np.float32(0.5),
                                    warmups=np.array([1, 2]), baseline_targets=(np.float64(2),)))  # fmt: skip
    assert (s.trials, s.max_drop, s.warmups, s.baseline_targets) == (2, 0.5, (1, 2), (2.0,))
    assert type(s.trials) is int and type(s.max_drop) is float and {type(w) for w in s.warmups} == {int}
    with pytest.raises(UserError, match="trials must be a whole number >= 1, got 2.5"):
        check_settings(TuneSettings(out=tmp_path / "o", trials=2.5))


def test_held_out_rows_never_include_a_searched_source(echo_data, tmp_path):
    from skipcore.data import load_examples

    s = check_settings(TuneSettings(out=tmp_path, dataset=str(echo_data), evaluate_split="test"))
    searched = load_examples(echo_data, split="dev")
    kept, dropped = held_out_examples(s, searched)
    assert dropped == 1 and len(kept) == 5 and not {e.source for e in kept} & {e.source for e in searched}
    with pytest.raises(UserError, match="no row the search did not read"):
        held_out_examples(s, load_examples(echo_data, split="test"))


def test_the_output_folder_keeps_to_its_own_files(tmp_path):
    out = tmp_path / "tune"
    out.mkdir()
    (out / "report.md").write_text("mine")
    with pytest.raises(UserError, match="report.md, which this tune did not write"):
        tune_folder.TuneFolder(out, {"a": 1}, False).__enter__()
    (out / "report.md").unlink()
    (out / "notes.txt").write_text("mine too")
    with tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        f.write_text("report.md", "# a\n")
    with pytest.raises(UserError, match="tune of other settings: a=1 \\(not 2\\); pass overwrite to") as e:
        tune_folder.TuneFolder(out, {"a": 2}, False).__enter__()  # from Python: the settings' own names
    assert e.value.fields == ("out", "overwrite", "a") and "--" not in str(e.value)  # each differing setting
    (out / "report.md").write_text("edited")
    with pytest.raises(UserError, match="changed since the tune wrote it"):
        tune_folder.TuneFolder(out, {"a": 1}, False).__enter__()
    (out / "report.md").write_text("# a\n")
    with tune_folder.TuneFolder(out, {"a": 2}, True) as f:  # replaced: its files go, nothing else
        assert not (out / "report.md").exists() and (out / "notes.txt").read_text() == "mine too"
    assert not list(tmp_path.glob(".*.lock"))
    deeper = tmp_path / "new" / "tunes" / "one"  # --out is created, its folders too (the lock lies beside it)
    with tune_folder.TuneFolder(deeper, {"a": 1}, False) as f:
        f.write_text("report.md", "# a\n")
    assert (deeper / "report.md").is_file() and not list(deeper.parent.glob(".*.lock"))


@pytest.mark.slow
def test_trials_run_side_by_side_on_ray(model_dirs, echo_data, tmp_path, ray_address):
    out = tmp_path / "tune"
    result = run_tune(settings(model_dirs, echo_data, out, trials=2, parallel=2), RayExecutor())
    assert result.met and result.counts["complete"] == 2
    trials, _ = read_sweep(out / "trials.parquet")
    assert trials["host"].notna().all() and len(trials) >= 2


@pytest.mark.slow
def test_the_measured_objective_times_each_finished_trial_against_full_depth(model_dirs, echo_data, tmp_path):
    out = tmp_path / "tune"
    # too few paired runs are no measurement (flagged, never chosen): refused before any work
    with pytest.raises(UserError, match="repeats must be a whole number >= 3, got 2"):
        run_tune(settings(model_dirs, echo_data, out, trials=2, objective="measured", repeats=2))
    assert not out.exists()
    s = settings(model_dirs, echo_data, out, trials=2, objective="measured", repeats=3, timing_limit=4)
    result = run_tune(s)
    trials, _ = read_sweep(out / "trials.parquet")
    scored = trials[trials["tune_state"] == "trial"]
    assert (scored["timing_runs"] == 3).all() and (scored["timing_prompts"] == 4).all()
    assert scored["wall_speedup_decode"].notna().all()
    assert result.outcome.speedup == "wall_speedup_decode" and result.met
    assert (
        "repeats" in json.loads((out / "tune.json").read_text())["identity"]
    )  # timing settings make the study


@pytest.mark.slow
def test_a_tune_run_in_two_parts_draws_what_it_draws_run_whole(model_dirs, echo_data, tmp_path):
    """Each draw is seeded by what the study holds, not once per run: a search of 5 trials stopped after 2 and run
    again draws the same points as one run whole (a sampler seeded once per run started over at the resume)."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run_tune(settings(model_dirs, echo_data, whole, trials=5))
    run_tune(settings(model_dirs, echo_data, parts, trials=2))
    run_tune(settings(model_dirs, echo_data, parts, trials=5))
    drawn = [
        [
            t.params
            for t in optuna.load_study(
                study_name="skipcore-tune", storage=f"sqlite:///{out / 'study.db'}"
            ).trials
        ]
        for out in (whole, parts)
    ]
    assert len(drawn[0]) >= 5 and drawn[0] == drawn[1]
    # a resume with another seed would go neither seed's way: refused in one line, the study untouched
    before = (parts / "study.db").read_bytes()
    with pytest.raises(UserError, match=r"holds a tune of other settings: seed=0 \(not 1\)") as refused:
        run_tune(settings(model_dirs, echo_data, parts, trials=6, seed=1))
    # the command line names the flag (it said the study's own key, sampler_seed, no flag of the tune's)
    from skipcore.commands.tune import flag_names

    assert "--seed=0 (not 1)" in refused.value.said_as(flag_names())
    assert (parts / "study.db").read_bytes() == before


def test_a_tune_that_failed_before_its_first_score_leaves_nothing_its_corrected_rerun_must_overwrite(
    model_dirs, echo_data, tmp_path
):
    """A model folder without its weights fails at the floor's first load, after the study's folder was made; the
    rerun with the weights in place (other files: another identity) was refused as 'a tune of other settings'. A
    study with nothing scored is no study to keep: the rerun replaces it. One that scored is still refused."""
    import shutil

    from skipcore.errors import ModelError

    model, out = tmp_path / "model", tmp_path / "tune"
    shutil.copytree(model_dirs["opt"], model)
    weights = model / "model.safetensors"
    weights.rename(tmp_path / "weights")
    with pytest.raises((ModelError, UserError)):
        run_tune(settings(model_dirs, echo_data, out, model=str(model), trials=1))
    (tmp_path / "weights").rename(weights)
    run_tune(settings(model_dirs, echo_data, out, model=str(model), trials=1))  # not refused
    with pytest.raises(UserError, match="holds a tune of other settings"):
        run_tune(settings(model_dirs, echo_data, out, model=str(model), trials=1, max_drop=50.0))


@pytest.mark.parametrize("written_before", [False, True])
@pytest.mark.parametrize("stop", ["before the write", "after the write"])
def test_a_tune_stopped_about_a_files_write_knows_the_file_as_its_own(
    tmp_path, monkeypatch, stop, written_before
):
    """The file was written before the record named it: a stop in between left a report.md "this tune did not
    write" (or one "changed since"), refused on every rerun until deleted by hand."""
    import skipcore.evaluate.tune.folder as folder_lib

    out = tmp_path / "tune"
    with tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        if written_before:
            f.write_text("report.md", "# first\n")
    real = folder_lib._write_bytes

    def stops(path, data):
        if path.name == "report.md":
            if stop == "after the write":
                real(path, data)
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(folder_lib, "_write_bytes", stops)
    with pytest.raises(KeyboardInterrupt), tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        f.write_text("report.md", "# second\n")
    monkeypatch.setattr(folder_lib, "_write_bytes", real)
    with tune_folder.TuneFolder(out, {"a": 1}, False) as f:  # resumed, not refused
        f.write_text("report.md", "# third\n")
    with tune_folder.TuneFolder(out, {"a": 2}, True):  # replaced: the report goes with the study
        assert not (out / "report.md").exists()


def test_a_tune_stopped_twice_about_a_write_still_resumes_and_a_users_file_in_its_place_is_refused(
    tmp_path, monkeypatch
):
    """A resume dropped the name of the file being written: stopped after the write, then again before the
    next, the third run was refused ("changed since"). And a file only being written was taken whatever it held:
    a user's report in its place, after a stop before the write, would have been replaced."""
    import skipcore.evaluate.tune.folder as folder_lib

    out, real = tmp_path / "tune", folder_lib._write_bytes

    def stop_at_report(after_write: bool):
        def stops(path, data):
            if path.name == "report.md":
                if after_write:
                    real(path, data)
                raise KeyboardInterrupt
            real(path, data)

        monkeypatch.setattr(folder_lib, "_write_bytes", stops)

    with tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        f.write_text("report.md", "# first\n")
    stop_at_report(after_write=True)
    with pytest.raises(KeyboardInterrupt), tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        f.write_text("report.md", "# second\n")
    with pytest.raises(KeyboardInterrupt), tune_folder.TuneFolder(out, {"a": 1}, False):
        raise KeyboardInterrupt  # stopped again before writing the report
    monkeypatch.setattr(folder_lib, "_write_bytes", real)
    with tune_folder.TuneFolder(out, {"a": 1}, False) as f:
        f.write_text("report.md", "# third\n")

    other = tmp_path / "other"
    with tune_folder.TuneFolder(other, {"a": 1}, False):
        pass
    stop_at_report(after_write=False)
    with pytest.raises(KeyboardInterrupt), tune_folder.TuneFolder(other, {"a": 1}, False) as f:
        f.write_text("report.md", "# tune's\n")
    (other / "report.md").write_text("the user's own")
    with pytest.raises(UserError, match="changed since the tune wrote it"):
        tune_folder.TuneFolder(other, {"a": 1}, False).__enter__()
    assert (other / "report.md").read_text() == "the user's own"


def test_a_row_with_no_finite_number_is_told_failed_not_raised():
    """A NaN quality raised Optuna's 'NaN is not allowed' from the floor's constraint, a traceback mid-search."""
    study = optuna.create_study(directions=list(tune_study.DIRECTIONS))
    for quality, speed, said in ((float("nan"), 2.0, "no bleu"), (60.0, float("inf"), "no layer_speedup")):
        trial = study.ask()
        told = tune_study.tell(study, trial, dict(row("a", quality, speed), setting_id="a"), "bleu",
                               "layer_speedup", 59.0, 59.0)  # fmt: skip
        assert told == optuna.trial.TrialState.FAIL and said in study.trials[-1].user_attrs["refused"]
    trial = study.ask()
    assert tune_study.tell(study, trial, dict(row("b", 60.0, 2.0), setting_id="b"), "bleu", "layer_speedup",
                           59.0, 59.0) == optuna.trial.TrialState.COMPLETE  # fmt: skip
    assert study.trials[-1].values == [59.0, 2.0]  # quality counts up to the floor


def test_a_setting_whose_objective_is_no_number_does_not_stop_the_search(
    model_dirs, echo_data, tmp_path, monkeypatch
):
    """A trial whose objective was not finite (a measured speedup with no decode step to time) was told failed,
    which moves neither the trials done nor the sampler's seed, so the same point was drawn and failed again,
    forever (2,250 trials before it was killed). Now another point is drawn; and where every point fails, the
    search stops in one line."""
    real, tells = tune_trials.score_task, []
    real_tell = tune_study.tell

    def no_speed_for(numbers):
        def score(engine, job, task):
            row = real(engine, job, task)
            return {**row, "layer_speedup": float("nan")} if task.number in numbers else row

        return score

    def counted(*a, **k):
        tells.append(a[1].number)
        assert len(tells) < 40, "the search draws the failing point again and again"
        return real_tell(*a, **k)

    monkeypatch.setattr(tune_study, "tell", counted)
    monkeypatch.setattr(tune_trials, "score_task", no_speed_for({1}))
    said = []
    result = run_tune(
        settings(model_dirs, echo_data, tmp_path / "one", trials=3, prune_after=0), say=said.append
    )
    assert result.counts["complete"] + result.counts["pruned"] == 3 and result.counts["failed"] >= 1
    assert any("no layer_speedup for this setting; another is drawn" in line for line in said), said
    assert "scored on every row, none stopped early, " in (tmp_path / "one" / "report.md").read_text()
    tells.clear()
    monkeypatch.setattr(tune_trials, "score_task", no_speed_for(set(range(100))))
    with pytest.raises(UserError, match=r"trials failed"):
        run_tune(settings(model_dirs, echo_data, tmp_path / "all", trials=3, prune_after=0))


def test_a_setting_that_fails_on_a_worker_is_not_drawn_again_and_again(
    model_dirs, echo_data, tmp_path, monkeypatch
):
    """A trial that failed for good on a worker (Ray's retries spent) was told failed with nothing that moved the
    next draw's seed: the same setting was drawn, failed, and drawn again until the search stopped with 'trials
    failed for good'. An executor that fails the sampler's first setting wherever it is drawn stands in for Ray."""
    from skipcore.evaluate.sweep.executors import Failure, InProcessExecutor

    failing, drawn = [], []

    class FailsOneSetting(InProcessExecutor):
        def run(self, job, units, on_row, say=None, on_failure=None):
            words = [u.settings[0].candidate.words() for u in units]
            drawn.extend(w for u, w in zip(units, words, strict=True) if u.settings[0].number >= 0)
            if (
                not failing and len(drawn) > 1
            ):  # the first is the paper's schedule, queued: one the sampler drew
                failing.append(drawn[1])
            ok = [u for u, w in zip(units, words, strict=True) if w not in failing]
            super().run(job, ok, on_row, say, on_failure)
            return [Failure(u, u.settings, "RuntimeError: fails here", 3) for u in units if u not in ok]

    s = settings(model_dirs, echo_data, tmp_path / "t", trials=3, prune_after=0)
    result = run_tune(s, FailsOneSetting(), say=lambda _: None)
    assert result.counts["complete"] == 3 and result.counts["failed"] >= 1
    assert drawn.count(failing[0]) <= 2, drawn  # drawn again at most by chance, not every time


def test_trials_at_once_in_this_process_are_refused_before_any_work(model_dirs, echo_data, tmp_path):
    """`parallel 1000` in this process chose another schedule than `parallel 1` on the same search (Optuna proposed
    each trial blind to the others'), with nothing run side by side to pay for it."""
    out = tmp_path / "tune"
    with pytest.raises(UserError, match="parallel 3 runs trials side by side on Ray") as refused:
        run_tune(settings(model_dirs, echo_data, out, parallel=3))
    assert refused.value.field == "parallel" and not out.exists()


class FinishedInReverse:
    """An executor handing a round's trials back last-asked first, as trials side by side on Ray may finish."""

    def __init__(self) -> None:
        self.inner = InProcessExecutor()

    def check(self, cfg) -> None:
        self.inner.check(cfg)

    def run(self, job, units, on_row, say=None, on_failure=None):
        return self.inner.run(job, list(reversed(units)), on_row, say, on_failure)


def test_the_trials_table_is_in_trial_order_whatever_order_they_finish_in(model_dirs, echo_data, tmp_path):
    """Tune on Ray wrote its trials in the order they finished (trial 1 before trial 0); a sweep's rows are put
    back in grid order, and a study's in trial order."""
    out = tmp_path / "tune"
    run_tune(settings(model_dirs, echo_data, out, trials=3, parallel=3, prune_after=0), FinishedInReverse())
    trials, _ = read_sweep(out / "trials.parquet")
    assert (
        trials["tune_trial"].tolist() == sorted(trials["tune_trial"]) and len(trials) == 4
    )  # full depth: -1
    assert pd.read_csv(out / "trials.csv")["tune_trial"].tolist() == trials["tune_trial"].tolist()


def test_a_baseline_target_beyond_the_models_reach_is_refused_before_any_trial(model_dirs, tmp_path):
    """The paper's linear schedule reaches 3x on the tiny 6-layer model: `baseline_targets=(2, 100)` scored 2x on
    the held-out split and dropped 100 without a word. It is refused, as `train --target-speedup 100` is, once the
    model's layers are known and before the output folder or any trial."""
    from skipcore.evaluate.tune.runner import Tune

    data = tmp_path / "data"
    data.mkdir()
    for split, name in (("dev", "Place"), ("test", "Spot")):
        rows = [json.dumps({"source": f"name[{name} {i}]", "target": f"{name} {i}."}) for i in range(4)]
        (data / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    out = tmp_path / "tune"
    s = settings(model_dirs, data, out, evaluate_split="test", baseline_targets=(2.0, 100.0))
    with pytest.raises(
        UserError, match=r"baseline_targets 100 out of reach: .* 6 layers .* up to 3\.00"
    ) as e:
        Tune(s, None, None, None)
    assert e.value.field == "baseline_targets" and not out.exists()
    Tune(
        settings(model_dirs, data, out, evaluate_split="test", baseline_targets=(2.0, 3.0)), None, None, None
    )


@pytest.mark.slow
def test_a_resume_that_runs_no_trial_asks_none_again(model_dirs, echo_data, tmp_path, monkeypatch):
    """A study that holds the trials asked for and one a stopped run left running: the resume said 'none to run'
    and then '1 trial left running by the last run asked again', and ran nothing (the point waited in the queue,
    counted as a trial in the report). It says only that none runs; a later run asking for more asks it first."""
    out = tmp_path / "tune"
    real = tune_trials.score_task
    stopped = []

    def stop_at_trial_1(engine, job, task):
        if task.number == 1 and not stopped:
            stopped.append(task.number)
            raise KeyboardInterrupt  # trial 0 done, trial 1 left running
        return real(engine, job, task)

    monkeypatch.setattr(tune_trials, "score_task", stop_at_trial_1)
    with pytest.raises(KeyboardInterrupt):
        run_tune(settings(model_dirs, echo_data, out, trials=3))
    said = []
    result = run_tune(settings(model_dirs, echo_data, out, trials=1), say=said.append)
    assert f"resuming {out}: 1 trial kept, at least the 1 asked for; none to run" in said
    assert not any("asked again" in line for line in said), said
    assert result.counts["total"] == 1 and result.counts["stopped"] == 0
    report = (out / "report.md").read_text()
    assert "- **Trials**: 1 (1 scored on every row" in report and "left running" not in report
    said.clear()
    result = run_tune(settings(model_dirs, echo_data, out, trials=2), say=said.append)
    assert "resuming: 1 trial left running by the last run asked again" in said
    assert result.counts["complete"] == 2 and result.counts["stopped"] == 1
    study = optuna.load_study(study_name="skipcore-tune", storage=f"sqlite:///{out / 'study.db'}")
    assert study.trials[2].params == study.trials[1].params  # the point left running, asked again first


def test_a_killed_tunes_trials_lock_is_taken_over_as_a_tunes(model_dirs, echo_data, tmp_path):
    """The trials table's lock a killed tune left was taken over 'left by a sweep': the tool is the tune's."""
    import subprocess
    import sys
    import warnings

    out = tmp_path / "tune"
    run_tune(settings(model_dirs, echo_data, out, trials=1))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process holds now
    (out / f".{tune_folder.TRIALS}.lock").write_text(str(gone.pid))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_tune(settings(model_dirs, echo_data, out, trials=2))
    said = [str(w.message) for w in caught if "taking over" in str(w.message)]
    assert said and all("left by a tune that is no longer running" in s for s in said), said


def test_a_sweep_never_replaces_a_tunes_trials(model_dirs, echo_data, tmp_path):
    """`sweep --overwrite --out TUNE/trials.parquet` replaced the tune's trials with its own rows, and the tune
    could neither resume nor be overwritten: a sweep refuses a tune's table, --overwrite or not."""
    from skipcore.evaluate.sweep import run_sweep
    from tests.helpers import sweep_config

    out = tmp_path / "tune"
    run_tune(settings(model_dirs, echo_data, out, trials=1))
    before, listed = (out / "trials.parquet").read_bytes(), sorted(out.rglob("*"))
    for overwrite in (False, True):
        cfg = sweep_config(model_dirs, echo_data, out / "trials.parquet", limit=1, overwrite=overwrite)
        with pytest.raises(
            UserError, match=r"trials\.parquet holds a tune's trials; a sweep does not add to"
        ):
            run_sweep(cfg)
    assert (out / "trials.parquet").read_bytes() == before and sorted(out.rglob("*")) == listed
    run_tune(settings(model_dirs, echo_data, out, trials=2))  # the tune goes on
    assert len(read_sweep(out / "trials.parquet")[0]) > 2


def test_the_time_between_a_stopped_tune_and_its_resume_is_no_trials_time():
    """A trial a stopped run left running is told failed when the next run begins: its span, start to that
    moment, held the whole pause (a minute's pause read '72 s of trials' where the trials took 6)."""
    import datetime

    import optuna
    from optuna.distributions import IntDistribution
    from optuna.trial import FrozenTrial, TrialState

    study = optuna.create_study()
    x = {"x": IntDistribution(0, 3)}
    study.add_trial(optuna.trial.create_trial(params={"x": 1}, distributions=x, value=1.0))
    began = datetime.datetime.now() - datetime.timedelta(seconds=60)  # a minute before the resume
    left = FrozenTrial(0, TrialState.RUNNING, None, began, None, {"x": 2}, x, {}, {}, {}, 0)
    study.add_trial(left)
    assert tune_study.settle_stopped(study) == 1
    assert tune_study.seconds_spent(study) < 5


def test_a_chosen_setting_past_the_papers_fastest_point_is_said_so():
    """Held out, a chosen setting faster than every paper linear point read 'the paper's linear schedule: nan at
    that speedup' on the console and 'scores -' in the report: its front ends before that speedup."""
    from skipcore.evaluate.tune.holdout import HeldOut, paper_at_speedup

    rows = pd.DataFrame(
        [
            {**row("full", 60.0, 1.0, "reference"), "model_role": "model"},
            {**row("2x", 58.0, 2.0, "paper linear"), "model_role": "model"},
            {**row("chosen", 59.0, 3.0, "chosen"), "model_role": "model"},
        ]
    )
    held = HeldOut("bleu", "layer_speedup", rows, 0)
    assert (
        paper_at_speedup(held.comparison()) == "does not reach that speedup (its fastest point here: 2.00x)"
    )
    slower = rows.assign(layer_speedup=[1.0, 2.0, 1.5])
    assert paper_at_speedup(HeldOut("bleu", "layer_speedup", slower, 0).comparison()) == "scores 59.00"
