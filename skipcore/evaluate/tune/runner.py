"""Running a tune: `run_tune` checks everything, opens the output folder and the study, scores the floor's full
depth, runs trials in rounds through an executor of the sweep's (this process, or Ray tasks side by side) until
the study holds `trials` finished ones, writes the tables, the front, the chosen schedule and the report, and, where
asked, scores the choice once on the held-out split.

Every scored row goes to the trials table as it comes (`skipcore.evaluate.sweep.store`: atomic, keyed), and every
trial to the study (SQLite) as its row is written, so a run stopped anywhere resumes where it was: the floor and
every finished trial are taken from the files, a trial left running is asked again (`skipcore.evaluate.tune.study`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

import skipcore.evaluate.tune.folder as files
import skipcore.evaluate.tune.study as studies
from skipcore.data import rows_digest
from skipcore.errors import SkipcoreWarning, UserError
from skipcore.evaluate.identity import DATA, SAMPLER_SEED, with_data, with_models
from skipcore.evaluate.sweep.executors import InProcessExecutor, SweepExecutor
from skipcore.evaluate.sweep.settings import ModelFacts, batch_that_fills, limit_said
from skipcore.evaluate.sweep.store import SweepStore, read_own_sweep
from skipcore.evaluate.sweep.units import WorkUnit
from skipcore.evaluate.tune.choice import TuneOutcome, floor_note, outcome, speedup_said, timing_flag_of
from skipcore.evaluate.tune.holdout import (
    HeldOut,
    check_baseline_targets,
    first_tasks,
    held_out_examples,
    paper_at_speedup,
    paper_tasks,
)
from skipcore.evaluate.tune.report import report_text, timing_said
from skipcore.evaluate.tune.settings import TuneSettings, check_settings, repeated_notes
from skipcore.evaluate.tune.space import PAPER_TARGETS, Candidate, SearchSpace, full_depth
from skipcore.evaluate.tune.table import candidate_of, finished_row
from skipcore.evaluate.tune.trials import PRUNED, Task, TuneJob, prefix_rows, prune_note, task_rows
from skipcore.models.generation_defaults import trained_schedule_of
from skipcore.threads import keeps_torch_threads

Say = Callable[[str], None]
FRONT_COLUMNS = ("tune_trial", "tune_label", "policy", "shape", "mode", "warmup", "max_layers", "min_layers",
                 "decay_span", "alpha", "stages", "draft_tokens", "layer_speedup", "batch_layer_speedup",
                 "flops_speedup_decode", "flops_speedup_with_prompt", "wall_speedup_decode", "schedule_json")  # fmt: skip


@dataclass
class TuneResult:
    """What a tune found and wrote: the outcome on the rows searched, the held-out rows where asked, the files."""

    settings: TuneSettings
    outcome: TuneOutcome
    held: HeldOut | None
    files: dict[str, Path]
    counts: dict[str, int] = field(default_factory=dict)
    timing: str = ""  # how the measured speedups were timed (`timing_said`); '' where none was

    @property
    def met(self) -> bool:
        return self.outcome.met

    def text(self) -> str:
        """What the command prints: the outcome, how its measured speedups were timed (where they were), the held-out
        comparison and where the files are."""
        lines = [self.outcome.line()] + (
            [f"timing: measured speedups are {self.timing}"] if self.timing else []
        )
        cmp = self.held.comparison() if self.held is not None else {}
        if cmp:
            at = speedup_said(self.held.chosen, self.held.speedup)
            lines.append(
                f"held out ({self.settings.evaluate_split}): {self.outcome.metric} {cmp['quality']:.2f} at {at} "
                f"(full depth reference {cmp['reference_quality']:.2f}); at that speedup the paper's linear "
                f"schedule {paper_at_speedup(cmp)}, {_at_quality(cmp['paper_speedup_at_quality'])}"
            )
        return "\n".join(lines + [f"{k}: {p}" for k, p in self.files.items()])


def _at_quality(speedup: float) -> str:
    return (
        f"and at that quality runs {speedup:.2f}x" if speedup == speedup else "and never reaches that quality"
    )


class Tune:
    """One run of `run_tune`: the checked settings, what they read, and the rows scored so far."""

    def __init__(self, settings: TuneSettings, executor, say: Say | None, on_trial) -> None:
        from skipcore.data import load_examples
        from skipcore.evaluate.sweep.units import load_refs, warn_formats, warn_training_rows

        self.s = s = check_settings(settings)
        self.executor = executor or InProcessExecutor()
        self.executor.check(s)
        if s.parallel > 1 and isinstance(self.executor, InProcessExecutor):
            # Optuna asked for several trials at once proposes each without the others' results: a different
            # search, with nothing run side by side to pay for it
            raise UserError(
                f"parallel {s.parallel} runs trials side by side on Ray (a RayExecutor: --executor ray); in this "
                "process they run one after another, and asking the search for several at once only changes which "
                "it tries: leave parallel at 1",
                field="parallel",
            )
        self.say, self.on_trial = say or (lambda _: None), on_trial
        models = _Models(s)
        self.refs = load_refs(models)
        facts = {m: _model_facts(self.refs[m], s) for m in self.refs}
        for m, f in facts.items():
            f.check_new_tokens(s.max_new_tokens, m)
        self.layers = {m: f.num_layers for m, f in facts.items()}
        if s.evaluate_split:  # the paper's schedules are scored on the held-out rows alone
            check_baseline_targets(s, self.layers[s.model])
        self.space = SearchSpace.of(s, self.layers[s.model])
        self.examples = load_examples(s.dataset, split=s.split, limit=s.limit)
        if not self.examples:
            where = f"{s.dataset}{f' [{s.split}]' if s.split else ''}"  # a single file has no split to name
            raise UserError(f"{where} has no rows to search on", field="dataset")
        _check_metric(s, self.examples, self.refs)
        warn_formats(self.examples, self.refs)
        warn_training_rows(self.refs, s.dataset, s.split, "searched")
        if s.evaluate_split:
            warn_training_rows(self.refs, s.dataset, s.evaluate_split, "evaluated")
        self.held = held_out_examples(s, self.examples) if s.evaluate_split else None
        self.s = s = fit_batch(s, len(self.examples), len(self.held[0]) if self.held else None)
        # what the study and its tables are held to
        self.identity = with_models(with_data(s.identity(), self.examples), [s.model, s.reference_model])
        if "speculative" in s.policies and s.objective != "measured":
            warnings.warn(
                "speculative decoding's layer and FLOPs speedups count its verification (below 1x); it pays only "
                "in time: --objective measured",
                SkipcoreWarning,
                stacklevel=3,
            )
        self.prefix = prefix_rows(s.prune_after, s.batch_size, len(self.examples))
        self.run_id = "t" + uuid.uuid4().hex[:11]

    def key(self, task: Task, split: str | None, limit: int | None) -> str:
        """A row's identity: its setting, what the row is (a trial, or a held-out row that may run the same
        setting as another: the chosen one and the paper's at its speed), and the run-wide settings."""
        run = {"model": task.model, "role": task.role, "state": task.state, "split": split, "limit": limit}
        run.update(self.s.identity())
        return task.candidate.key(run)

    def score(
        self, store: SweepStore, job: TuneJob, tasks: list[Task], split, limit, on_row=None
    ) -> list[dict]:
        """Score `tasks` (those not yet in `store`) through the executor, each row written as it comes."""
        rows, todo = {}, []
        for t in tasks:
            k = self.key(t, split, limit)
            old = next((r for r in store.rows if r["setting_id"] == k), None)
            if old is not None:
                rows[id(t)] = old
            else:
                todo.append(t)

        def finished(task: Task, row: dict, _) -> None:
            full = finished_row(row, task, self.key(task, split, limit), self.s, split, limit, self.run_id)
            store.add(full)
            rows[id(task)] = full
            if on_row is not None:
                on_row(task, full)

        units = [WorkUnit(t.model, self.s.batch_size, (t,)) for t in todo]
        failures = self.executor.run(job, units, finished, None, None) if units else []
        for f in failures:
            self.say(f"error: {f.line()}")
        return [rows[id(t)] for t in tasks if id(t) in rows]


@dataclass(frozen=True)
class _Models:
    """The models a tune loads, as the sweep's `load_refs` reads a config."""

    s: TuneSettings

    @property
    def models(self) -> list[tuple[str, str]]:
        out = [(self.s.model, "model")]
        return out + ([(self.s.reference_model, "reference")] if self.s.reference_model else [])


def _check_metric(s: TuneSettings, examples: list, refs: dict) -> None:
    """A slot metric needs rows that carry it (E2E meaning representations with the slot) as each model reads them
    (`for_model`: a fine-tune reads them in the format it was trained on): refused before any work."""
    from skipcore.evaluate.sweep.quality import slot_columns
    from skipcore.evaluate.sweep.units import for_model, model_name

    if not s.metric.startswith("slot_"):
        return
    for ref in refs.values():
        read, note = for_model(examples, ref)
        if s.metric in slot_columns(read):
            continue
        if note:  # the data has the slots; the model reads them in another task's format
            raise UserError(f"metric {s.metric} has no slots to check: {note}, which carry none; choose bleu, "
                            "rougeL or chrf", field="metric")  # fmt: skip
        raise UserError(
            f"metric {s.metric} needs E2E meaning representations with the slots it checks (name[...], near[...]); "
            f"{s.dataset} has none as {model_name(ref)} reads it: choose bleu, rougeL or chrf",
            field="metric",
        )


def _model_facts(ref, s: TuneSettings) -> ModelFacts:
    """A model's depth and positions from its config alone (no weights)."""
    from skipcore.models.loading import load_config

    return ModelFacts.of_config(load_config(ref, s.trust_remote_code))


@keeps_torch_threads
def run_tune(
    settings: TuneSettings,
    executor: SweepExecutor | None = None,
    say: Say | None = None,
    on_trial: Callable[[dict], None] | None = None,
) -> TuneResult:
    """Tune `settings.model`'s schedule on `settings.split`; see the module's docstring. `say` hears the run's
    notes and failures, and one line per finished trial where `settings.progress` is off (a progress bar shows
    them); `on_trial` gets the floor's full-depth row and then each trial's row as it is written (the dashboard
    draws them).
    Everything is checked, and refused in one line, before any work."""
    started = time.perf_counter()
    run = Tune(settings, executor, say, on_trial)
    s = run.s
    if s.threads is not None:
        import torch

        torch.set_num_threads(s.threads)
    folder = files.TuneFolder(s.out, {**run.identity, SAMPLER_SEED: s.seed}, s.overwrite)
    with folder, studies.storage_said(folder.path(files.STUDY)):
        study = studies.open_study(folder.path(files.STUDY), s.seed, s.trials)
        notes = [*repeated_notes(settings), prune_note(s.prune_after, s.batch_size, len(run.examples))]
        for note in filter(None, notes):  # after every refusal: a refused run says one line
            run.say(note)
        trials_file = folder.path(files.TRIALS)
        folder.remember(files.TRIALS)
        folder.remember("trials.csv")
        with SweepStore(trials_file, run.identity, False, folder.path(files.TRIALS_TRACES), "tune") as store:
            job = TuneJob(s, run.examples, run.refs, task_rows, run.prefix)
            floor = _floor(run, store, job, study)
            run.say(
                f"floor: {s.metric} {floor['floor']:.2f} (full depth {floor['quality']:.2f} - {s.max_drop:g})"
            )
            if note := floor_note(s.metric, floor["floor"]):
                run.say(f"note: {note}")
            counts = _search(run, store, job, study, floor)
            # trial order, as a study reads: trials side by side on Ray hand their rows back as they finish
            store.reorder([r["setting_id"] for r in sorted(store.rows, key=lambda r: r["tune_trial"])])
            table = store.frame()
            o = outcome(table, s.metric, s.objective_column, floor["floor"], floor["quality"],
                        not s.reference_model)  # fmt: skip
        written = _write_results(run, folder, o)
        held = None
        if run.held is not None and o.met:
            held = _held_out(run, folder, o)
        elif run.held is not None:
            run.say("no setting met the floor: nothing to score on the held-out split")
        seconds = studies.seconds_spent(study)
        text = report_text(
            s, o, counts, seconds, time.perf_counter() - started, len(run.examples), run.prefix, held, table
        )
        written["report"] = folder.write_text(files.REPORT, text)
        folder.note(floor=floor, chosen=None if o.chosen is None else o.chosen["tune_label"], counts=counts)
    timed = pd.concat([table, held.rows if held is not None else table.iloc[:0]], ignore_index=True)
    return TuneResult(s, o, held, written, counts, timing_said(timed))


def _floor(run: Tune, store: SweepStore, job: TuneJob, study) -> dict:
    """The floor's full depth, scored once (kept in the study and the trials table)."""
    s = run.s
    if "floor" in study.user_attrs:
        return study.user_attrs["floor"]
    role = "reference" if s.reference_model else "model"
    task = Task(-1, "reference", s.reference, role, full_depth(run.layers[s.reference]))
    run.say(f"scoring the floor's full depth ({s.reference}) on {len(run.examples)} rows")
    (row,) = run.score(store, job, [task], s.split, s.limit)
    if run.on_trial is not None:  # the reference point, drawn beside the trials
        run.on_trial(row)
    q, p = float(row[s.metric]), float(row["tune_prefix_quality"])
    floor = {"quality": q, "floor": q - s.max_drop, "prefix_quality": p, "prefix_floor": p - s.max_drop}
    study.set_user_attr("floor", floor)
    return floor


def _search(run: Tune, store: SweepStore, job: TuneJob, study, floor: dict) -> dict:
    """Rounds of `parallel` trials until the study holds `trials` finished ones."""
    from tqdm.auto import tqdm

    s = run.s
    L, T = run.layers[s.model], s.max_new_tokens
    kept = studies.done(study)
    if kept >= s.trials:  # a study that holds the trials asked for, or more: nothing runs
        run.say(
            f"resuming {s.out}: {kept} trial{'s' if kept != 1 else ''} kept, at least the {s.trials} asked for; "
            "none to run"
        )
    elif kept:
        run.say(f"resuming {s.out}: {kept} of {s.trials} trials kept, {s.trials - kept} to run")
    # a trial the last run left running is asked again first by a run that runs trials; one that runs none leaves
    # it as it is (not counted, not said asked again) for a run asking for more
    stale = studies.settle_stopped(study) if kept < s.trials else 0
    if stale:
        run.say(f"resuming: {stale} trial{'s' if stale > 1 else ''} left running by the last run asked again")
    seeds = [
        run.space.paper_params(t, s.speedup_over, s.decay_span)
        for t in PAPER_TARGETS[: max(1, s.trials // 10)]
    ]
    trained = trained_schedule_of(s.model)  # a model trained at one schedule: the search starts from it
    own = run.space.trained_params(trained) if trained else None
    studies.seed_with(study, [p for p in [own, *seeds] if p is not None])
    prune_below = floor["prefix_floor"] - s.prune_margin if run.prefix else None
    bar = tqdm(total=s.trials, initial=studies.done(study), disable=not s.progress, unit="trial")
    failed = 0

    def told(trial, row: dict) -> None:
        nonlocal failed
        state = studies.tell(
            study, trial, row, s.metric, s.objective_column, floor["floor"], floor["prefix_floor"]
        )
        if state == studies.TrialState.FAIL:
            failed += 1
            run.say(
                f"trial {trial.number}: {row['tune_label']}: {trial.user_attrs['refused']}; another is drawn"
            )
        else:
            bar.update(1)
            if not s.progress:
                run.say(_trial_line(trial.number, row, s.metric, s.objective_column, run.prefix))
        if run.on_trial is not None:
            run.on_trial(row)

    check = _checker(L, T)
    with getattr(run.executor, "session", contextlib.nullcontext)():
        while studies.done(study) < s.trials:
            asked = {}
            for _ in range(min(s.parallel, s.trials - studies.done(study))):
                trial, candidate = studies.ask(study, run.space.suggest, check, s.seed, s.trials)
                task = Task(trial.number, "trial", s.model, "model", candidate, prune_below)
                known = next(
                    (r for r in store.rows if r["setting_id"] == run.key(task, s.split, s.limit)), None
                )
                if known is not None:  # a point already scored (asked again, or drawn twice): its row stands
                    told(trial, known)
                else:
                    asked[trial.number] = (trial, task)
            if asked:
                run.score(store, job, [t for _, t in asked.values()], s.split, s.limit, _teller(asked, told))
            for trial, _task in asked.values():  # failed for good on a worker (said by `score`)
                trial.set_user_attr("refused", "failed on a worker")  # the next draw's seed moves past it
                study.tell(trial, state=studies.TrialState.FAIL)
            failed += len(asked)
            if failed > s.trials:
                raise UserError(f"{failed} trials failed for good; see the errors above")
    bar.close()
    return trial_counts(study)


def fit_batch(s: TuneSettings, searched: int, held_out: int | None) -> TuneSettings:
    """`s` with its batch size as the batch each part of the tune fills (`batch_that_fills`): the rows searched,
    those timed (a measured objective's first `timing_limit`) and the held-out rows scored."""
    batch = batch_that_fills(
        s.batch_size, searched, f"searched{limit_said('limit', s.limit, searched)}", "batch_size"
    )
    if s.objective == "measured" and s.timing_limit < searched:
        what = f"timed{limit_said('timing_limit', s.timing_limit, s.timing_limit)}"
        batch = batch_that_fills(batch, s.timing_limit, what, "batch_size")
    if held_out is not None:
        batch = batch_that_fills(batch, held_out, f"held out of {s.evaluate_split} and scored", "batch_size")
    return s if batch == s.batch_size else replace(s, batch_size=batch)


def trial_counts(study) -> dict[str, int]:
    """The study's trials by how they ended: scored on every row, stopped under the floor, failed, and `stopped`:
    left running by an interrupted run (told failed, and asked again as another trial), which is no failure. The
    total counts the trials that ended, not one waiting to be asked (a seed or a point asked again) or one a
    stopped run left running that no run has settled yet."""
    trials = study.get_trials(deepcopy=False)
    asked_again = {t.user_attrs.get("asked_again_for") for t in trials}
    states = pd.Series(
        ["STOPPED" if t.state.name == "FAIL" and t.number in asked_again else t.state.name for t in trials]
    )
    count = {k: int((states == k.upper()).sum()) for k in ("complete", "pruned", "fail", "stopped")}
    return {"total": count["complete"] + count["pruned"] + count["fail"], "complete": count["complete"], "pruned": count["pruned"],
            "failed": count["fail"], "stopped": count["stopped"]}  # fmt: skip


def _teller(asked: dict, told):
    """A scored trial's row to its Optuna trial (the one asked for its number)."""

    def on_row(task: Task, row: dict) -> None:
        told(asked.pop(task.number)[0], row)

    return on_row


def _checker(num_layers: int, max_new_tokens: int):
    def check(candidate: Candidate) -> None:
        candidate.build().check(num_layers, max_new_tokens)

    return check


def _trial_line(number: int, row: dict, metric: str, speedup: str, prefix: int) -> str:
    """A finished trial in a line: its quality and the objective's speedup (a measured one with its 95% interval,
    and its timing flag where one was raised: such a trial is on no front and never chosen)."""
    from skipcore.labels import COLUMN_TITLES

    said = f"trial {number}: {row['tune_label']}: {COLUMN_TITLES.get(metric, metric)} "
    if row["tune_state"] == PRUNED:
        return said + f"{row['tune_prefix_quality']:.2f} on the first {prefix} rows: stopped, under the floor"
    said += f"{row[metric]:.2f}, {COLUMN_TITLES.get(speedup, speedup)} {speedup_said(row, speedup)}"
    flag = timing_flag_of(row) if speedup.startswith("wall_speedup") else ""
    return said + (f"; timing flagged (on no front, never chosen): {flag}" if flag else "")


def _write_results(run: Tune, folder, o: TuneOutcome) -> dict[str, Path]:
    """front.csv, best_schedule.json (where a setting met the floor) and the tables' paths."""
    front = o.front.reindex(
        columns=[c for c in (*FRONT_COLUMNS[:2], o.metric, *FRONT_COLUMNS[2:]) if c in o.front]
    )
    out = {
        "trials": folder.path(files.TRIALS),
        "front": folder.write_text(files.FRONT, front.to_csv(index=False)),
    }
    schedule = o.schedule()
    if schedule is not None:
        out["best_schedule"] = folder.write_json(files.BEST, schedule.to_dict())
    return out


def _held_out(run: Tune, folder, o: TuneOutcome) -> HeldOut:
    """The chosen setting, both full depths and the paper's schedule on the held-out rows (scored once: a rerun
    takes the rows from evaluation.parquet while the choice is the same)."""
    s = run.s
    examples, dropped = run.held
    identity = {**run.identity, "evaluate_split": s.evaluate_split, "evaluate_limit": s.evaluate_limit,
                "evaluate_" + DATA: rows_digest(examples), "chosen": o.chosen["setting_id"],
                "baseline_targets": list(s.baseline_targets)}  # fmt: skip
    path = folder.path(files.EVALUATION)
    # a file of that name no sweep wrote is never replaced, and said in a writer's words
    found = read_own_sweep(path)
    replace = found is not None and found[1].get("identity") != identity
    folder.remember(files.EVALUATION)
    folder.remember("evaluation.csv")
    job = TuneJob(s, examples, run.refs, task_rows, 0)
    L, split, limit = run.layers[s.model], s.evaluate_split, s.evaluate_limit
    run.say(f"scoring the chosen setting and the paper's schedule on {len(examples)} rows of {split}")
    with SweepStore(path, identity, replace, folder.path(files.EVALUATION_TRACES), "tune") as store:
        tasks = first_tasks(s, candidate_of(o.chosen), run.layers)
        rows = run.score(store, job, tasks, split, limit)
        chosen = next((r for r in rows if r["tune_state"] == "chosen"), None)
        if chosen is not None:  # the paper's schedule at the chosen setting's realised speedup
            run.score(store, job, paper_tasks(s, [max(1.0, chosen["layer_speedup"])], L), split, limit)
        store.finish()
        table = store.frame()
    return HeldOut(s.metric, s.objective_column, table, dropped)
