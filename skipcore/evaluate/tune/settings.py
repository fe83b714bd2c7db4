"""What a tune is asked: `TuneSettings`, each setting declared once with the flag that sets it (the command line
builds its parser from these declarations, `tune_flags`), and checked in one line before any work (`check_settings`).

A tune searches one model's schedules on a held-out split (dev by default) for the fastest one whose quality stays
above a floor: the full-depth quality of the model itself, or of a `reference_model` (a full-depth fine-tune beside
a per-target skip-aware one), minus `max_drop`, scored on the same rows. Lengths left out (new tokens, the decay
span of the paper's schedule, the horizon a schedule's own speedup is met over) come from the model's training
settings, as a sweep's do.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from skipcore.errors import UserError, flag_of, quoted
from skipcore.evaluate.sweep.settings import check_engine
from skipcore.files import check_output_name, check_utf8_name
from skipcore.measure.paired_timing import MIN_PAIRED_RUNS
from skipcore.plain_numbers import is_whole, python_number, whole_number
from skipcore.shipped import shipped_path
from skipcore.threads import check_threads

ABOUT = (
    "Search schedule shapes and their parameters (linear, power, step, constant; skip, exit, middle; warmup, decay "
    "span, alpha, stages; and, where asked, another policy's declared parameters, such as speculative decoding's "
    "draft schedule and k) with Optuna for the fastest setting whose quality on a held-out split stays within "
    "--max-drop of full depth (the model's own, or --reference-model's). Trials clearly under the floor after "
    "--prune-after rows stop there. Writes to --out: the study (study.db: a rerun resumes it), every trial as a "
    "sweep-format table (trials.parquet and .csv), the Pareto front (front.csv), best_schedule.json (for generate "
    "--schedule-json, the dashboard's designer and Schedule.read_json) and report.md; with --evaluate-split, the "
    "chosen setting scored once on that split beside the paper's linear schedule (evaluation.parquet)."
)
# the speedup each objective maximises: a column of a sweep row
OBJECTIVES = {"layer": "layer_speedup", "flops": "flops_speedup_decode", "measured": "wall_speedup_decode"}
METRICS = ("bleu", "rougeL", "rouge1", "rouge2", "chrf", "slot_name", "slot_all")  # quality columns of a row
SHAPES = ("linear", "power", "step", "constant")  # the parametric shapes a search draws
POLICIES = ("static", "speculative", "adaptive", "calm")  # the loop's policies a search may draw
SEED_LIMIT = 2**31  # the sampler's seed (numpy's, below 2**32) grows by one per trial a study holds


def setting(default=MISSING, help: str = "", *, flag: str = "", kind: str = ""):
    """A field of `TuneSettings` with the flag that sets it: `kind` is int, float, text, path, a list of one of
    them (`ints`, `floats`, `texts`: comma-separated), or a switch (a bool: its flag turns the default around)."""
    meta = {"help": help, "flag": flag, "kind": kind}
    return field(default=default, metadata=meta) if default is not MISSING else field(metadata=meta)


@dataclass(frozen=True)
class Flag:
    """A setting as the command line takes it."""

    name: str  # the field's name (the flag's destination)
    flag: str
    kind: str
    help: str
    default: object
    required: bool

    @property
    def many(self) -> bool:
        """A comma-separated list."""
        return self.kind in ("ints", "floats", "texts")

    @property
    def switch(self) -> str:
        """A switch's argparse action: it turns its default around."""
        return "store_false" if self.default else "store_true"

    @property
    def said(self) -> str:
        """The help line with its default as one would type it ('static,speculative'), where it has one."""
        d = self.default
        shown = (
            ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in d) if isinstance(d, tuple) else d
        )
        return (
            self.help
            if self.required or d is None or self.kind == "switch"
            else f"{self.help} (default: {shown})"
        )


@dataclass
class TuneSettings:
    """What a tune is asked (`run_tune`; the `tune` command's flags, each field's help its flag's): the fastest
    schedule of a model on a data split whose quality stays above full depth's (or `reference_model`'s) minus
    `max_drop`, its study kept in `out` and resumed from it; checked by `check_settings`."""

    out: Path = setting(
        help="folder for the study and its results (created; a rerun resumes it)", kind="path"
    )
    model: str = shipped_path("data/models/skipdecode-opt-e2e")
    dataset: str = setting(
        shipped_path("data/e2e_synth"), "data set searched on (a folder of split files, a file, or a name)",
        kind="path",
    )  # fmt: skip
    split: str | None = setting("dev", "split searched on (a single file has none)", kind="text")
    limit: int | None = setting(50, "rows of the split searched on, the first ones", kind="int")
    max_drop: float = setting(1.0, "quality floor: full depth's score minus this", kind="float")
    metric: str = setting("bleu", f"quality score: {', '.join(METRICS)}", kind="text")
    reference_model: str | None = setting(
        None, "the floor's full depth is this model's (default: the model's own)", kind="path"
    )
    objective: str = setting(
        "layer",
        "speedup maximised: layer (realised layer speedup), flops (FLOPs speedup, decode), measured (decode time "
        "against full depth, paired: --repeats, --timing-limit)",
        kind="text",
    )
    trials: int = setting(40, "trials in the study (a rerun adds trials up to this)", kind="int")
    policies: tuple[str, ...] = setting(
        ("static",), f"policies searched: {', '.join(POLICIES)}", kind="texts"
    )
    shapes: tuple[str, ...] = setting(SHAPES, "schedule shapes searched", kind="texts")
    modes: tuple[str, ...] = setting(("skip",), "modes searched: skip, exit, middle", kind="texts")
    warmups: tuple[int, ...] = setting((1, 2), "skip mode's warmup layers searched", kind="ints")
    batch_size: int = setting(8, "rows per batch", kind="int")
    prune_after: int = setting(16, "rows scored before a trial may stop (0: never stop early)", kind="int")
    prune_margin: float = setting(3.0, "stop a trial this far under the floor on those rows", kind="float")
    parallel: int = setting(
        1, "trials run at once as Ray tasks (with --executor ray; 1 in this process)", kind="int"
    )
    seed: int = setting(0, "the sampler's seed", kind="int")
    max_new_tokens: int | None = setting(
        None, "tokens per output (default: the model's training)", kind="int"
    )
    speedup_over: int | None = setting(
        None,
        "tokens a schedule's own speedup is met over, at most max_new_tokens (default: the model's typical output)",
        kind="int",
    )
    decay_span: int | None = setting(
        None, "the paper's linear schedule's decay span (default: the model's training)", kind="int"
    )
    repeats: int = setting(3, "--objective measured: paired timing runs per trial", kind="int")
    timing_limit: int = setting(8, "--objective measured: rows timed, the first ones", kind="int")
    evaluate_split: str | None = setting(
        None, "then score the chosen setting once on this split (never the one searched)", kind="text"
    )
    evaluate_limit: int | None = setting(100, "rows of --evaluate-split scored", kind="int")
    baseline_targets: tuple[float, ...] = setting(
        (1.25, 1.5, 2.0, 3.0), "the paper's linear schedule's targets scored beside it", kind="floats"
    )
    overwrite: bool = setting(
        False, "replace a study of other settings in --out (its files only)", kind="switch"
    )
    progress: bool = setting(
        True, "one line per trial instead of a progress bar", flag="--no-progress", kind="switch"
    )
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "sdpa"
    attention_dtype: str = "model"  # a tune attends in the model's own dtype (`SweepConfig.attention_dtype`)
    threads: int | None = None
    trust_remote_code: bool = False

    def identity(self) -> dict:
        """What every trial of one study shares: a resumed study must match it exactly (the trial count, the
        executor, threads, the held-out evaluation and the display may change)."""
        keep = ("model", "reference_model", "dataset", "split", "limit", "max_drop", "metric", "objective")
        keep += ("policies", "shapes", "modes", "warmups", "batch_size", "prune_after", "prune_margin")
        keep += ("max_new_tokens", "speedup_over", "decay_span", "device", "dtype", "attn")
        keep += ("repeats", "timing_limit") if self.objective == "measured" else ()
        keep += ("attention_dtype",) if self.attention_dtype != "model" else ()  # named where not the model's
        return {k: _plain(getattr(self, k)) for k in keep}

    @property
    def reference(self) -> str:
        """The model whose full depth sets the floor."""
        return self.reference_model or self.model

    @property
    def objective_column(self) -> str:
        return OBJECTIVES[self.objective]


def _plain(value):
    return list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Path) else value


def tune_flags() -> list[Flag]:
    """Every setting the command line sets with a flag of its own, in declaration order."""
    out = []
    for f in fields(TuneSettings):
        if "help" not in f.metadata:
            continue
        flag = f.metadata["flag"] or flag_of(f.name)
        out.append(
            Flag(f.name, flag, f.metadata["kind"], f.metadata["help"], f.default, f.default is MISSING)
        )
    return out


def flag_names() -> dict[str, str]:
    """{setting: its flag}, for a refusal said on the command line."""
    names = {f.name: f.flag for f in tune_flags()}
    shared = ("model", "device", "dtype", "attn", "threads")  # `add_model_args`, `add_threads_arg`
    return {**names, **{name: "--" + name for name in shared}}


def check_settings(s: TuneSettings) -> TuneSettings:
    """The settings with their lengths resolved, refused in one line (naming the setting) where they cannot run."""
    from skipcore.schedule import MODES

    check_output_name(s.out, "out", field="out")
    for name in ("model", "reference_model", "dataset"):  # recorded as text in its tables
        if getattr(s, name):
            check_utf8_name(getattr(s, name), name, field=name)
    # a value listed twice is one choice of the search (twice, it would weigh double in the sampler's draws)
    lists = {
        f.name: tuple(dict.fromkeys(_as_list(f.name, getattr(s, f.name), f.kind)))
        for f in tune_flags()
        if f.many
    }
    plain = {
        f.name: (whole_number if f.kind == "int" else python_number)(getattr(s, f.name))
        for f in tune_flags()
        if f.kind in ("int", "float")
    }
    s = replace(s, out=Path(s.out), **lists, **plain)
    for name, values, allowed in (
        ("policies", s.policies, POLICIES),
        ("shapes", s.shapes, SHAPES),
        ("modes", s.modes, MODES),
        ("metric", (s.metric,), METRICS),
        ("objective", (s.objective,), tuple(OBJECTIVES)),
    ):
        for v in values:
            if v not in allowed:
                raise UserError(
                    f"{name}: unknown value {quoted(v)}; choose from {', '.join(allowed)}", field=name
                )
        if not values:
            raise UserError(f"{name} is empty: choose at least one", field=name)
    for name, low in (
        ("trials", 1),
        ("batch_size", 1),
        ("parallel", 1),
        ("prune_after", 0),
        ("timing_limit", 1),
        ("seed", 0),
        ("repeats", 1),  # read only by a measured objective, but -1 is no count whatever the objective
    ):
        _at_least(name, getattr(s, name), low)
    if s.seed >= SEED_LIMIT:
        raise UserError(f"seed must be below {SEED_LIMIT}, got {s.seed}", field="seed")
    for name in ("limit", "evaluate_limit", "max_new_tokens", "speedup_over", "decay_span"):
        if getattr(s, name) is not None:
            _at_least(name, getattr(s, name), 2 if name in ("max_new_tokens", "speedup_over") else 1)
    check_threads(s.threads, "threads", field="threads")
    if s.objective == "measured":
        # too few paired runs are flagged (`runs_flag`), and a flagged trial is never chosen
        _at_least("repeats", s.repeats, MIN_PAIRED_RUNS)
    if "skip" in s.modes and not s.warmups:  # the space's own check said "choose warmups below L - 1"
        raise UserError(
            "warmups is empty: choose at least one (skip mode searches its warmup layers)", field="warmups"
        )
    if any(w < 0 for w in s.warmups):
        raise UserError(f"warmups must all be >= 0, got {list(s.warmups)}", field="warmups")
    for name in ("max_drop", "prune_margin"):
        value = getattr(s, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise UserError(f"{name} must be a finite number >= 0, got {value}", field=name)
    if not all(math.isfinite(t) and t >= 1 for t in s.baseline_targets):
        said = ",".join(f"{t:g}" for t in s.baseline_targets)
        raise UserError(
            f"baseline_targets must all be finite numbers >= 1, got {said}", field="baseline_targets"
        )
    _check_splits(s)
    check_engine(s.device, s.dtype, s.attention_dtype)
    return resolve_lengths(s)


LIST_ITEMS = {"ints": (int, "whole numbers"), "floats": (float, "numbers"), "texts": (str, "names")}


def _as_list(name: str, value, kind: str) -> tuple:
    """A list setting as a tuple of its kind (`ints`, `floats`, `texts`), from a sequence or, as its flag takes
    it, a comma-separated string ("static,adaptive", "1,2"); refused in one line where an item is of another
    kind (a string is never split into its characters)."""
    item, words = LIST_ITEMS[kind]
    if isinstance(value, str):
        parts = [v.strip() for v in value.split(",") if v.strip()]
        try:
            return tuple(item(v) for v in parts)
        except ValueError:
            raise UserError(
                f"{name} must be comma-separated {words}, got {quoted(value)}", field=name
            ) from None
    listed = value.tolist() if hasattr(value, "tolist") else value  # a NumPy array as a list
    if not isinstance(listed, list | tuple):
        raise UserError(f"{name} must be a list of {words}, got {quoted(value)}", field=name)
    values = [(whole_number if item is int else python_number)(v) for v in listed]  # NumPy's as Python's
    for v in values:
        fits = isinstance(v, item) if item is str else isinstance(v, int | float if item is float else int)
        if not fits or isinstance(v, bool):
            raise UserError(f"{name} must be {words}, got {quoted(v)} in {quoted(list(value))}", field=name)
    return tuple(item(v) for v in values)


def repeated_notes(s: TuneSettings) -> list[str]:
    """'note: --policies names static more than once; each setting runs once' for each list of the settings as given
    that repeats a value (`check_settings` keeps it once: one choice of the search), its setting named as the
    front end calls it (`spoken`)."""
    from skipcore.errors import spoken
    from skipcore.labels import repeated_note

    notes = (
        repeated_note(_as_list(f.name, getattr(s, f.name), f.kind), spoken(f.name))
        for f in tune_flags()
        if f.many
    )
    return [note for note in notes if note]


def _at_least(name: str, value: int, low: int) -> None:
    if not is_whole(value) or value < low:
        raise UserError(f"{name} must be a whole number >= {low}, got {quoted(value)}", field=name)


def _check_splits(s: TuneSettings) -> None:
    """A schedule is never scored on the rows it was tuned on: the held-out split is another split of a data set
    that has splits (rows the two share are dropped from it, `skipcore.evaluate.tune.holdout`)."""
    from skipcore.data import is_single_file

    if is_single_file(s.dataset):
        if s.split not in (None, "dev"):
            raise UserError(
                f"split {s.split} does not apply to {s.dataset}: a single file has no splits", field="split"
            )
        if s.evaluate_split is not None:
            raise UserError(
                f"evaluate_split needs a data set with splits; {s.dataset} is one file, all of it searched on",
                field="evaluate_split",
            )
        return
    if s.split is None:
        raise UserError(f"split: choose the split of {s.dataset} to search on (dev)", field="split")
    if s.evaluate_split is not None and s.evaluate_split == s.split:
        raise UserError(
            f"evaluate_split {s.evaluate_split} is the split searched on: a schedule is never scored on the rows "
            "it was tuned on; choose another" + (" (test)" if s.split != "test" else ""),
            field="evaluate_split",
        )


def resolve_lengths(s: TuneSettings) -> TuneSettings:
    """New tokens, the paper's decay span and the speedup horizon from the model's training settings where not
    given (`skipcore.models.generation_defaults`); a single file's split is none."""
    from skipcore.data import is_single_file
    from skipcore.models.generation_defaults import generation_defaults, horizon

    gen = generation_defaults(s.model) if Path(s.model).is_dir() else {}
    max_new = int(s.max_new_tokens or gen.get("max_new_tokens") or 64)
    over = horizon(s.speedup_over, gen, max_new)
    span = s.decay_span if s.decay_span is not None else gen.get("decay_span")
    span = int(span) if span is not None else max(1, max_new - 2)
    split = None if is_single_file(s.dataset) else s.split
    return replace(s, max_new_tokens=max_new, speedup_over=over, decay_span=span, split=split)
