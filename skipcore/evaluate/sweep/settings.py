"""What a sweep is asked: the run-wide `SweepConfig` and its grid's cells (`Setting`), checked before any work.

A setting's hash, with the run-wide parameters that change its numbers, is its row's identity in a results file,
which is what lets a rerun resume (`skipcore.evaluate.sweep.store`). Lengths the config leaves out (max new tokens,
decay span, the horizon a target speedup is met over) come from the model's training settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import os
import uuid
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from skipcore.errors import SkipcoreWarning, UserError, quoted, spoken
from skipcore.labels import setting_label, sweep_policies
from skipcore.plain_numbers import is_number, is_whole, python_number, whole_number
from skipcore.policies.params import Param, params_of
from skipcore.threads import check_threads

NAN = float("nan")  # one object, so settings holding it compare and hash equal


def sweep_params() -> dict[str, Param]:
    """The parameters a sweep lists, by column (a column two entries share, such as `draft_tokens`, once: the
    first entry's declaration), in the order the results' columns take."""
    out: dict[str, Param] = {}
    for cls in sweep_policies().values():
        for p in params_of(cls):
            if p.sweep is not None:
                out.setdefault(p.column, p)
    return out


@dataclass(frozen=True)
class Setting:
    """One cell of the grid. Its hash (with the run-wide parameters) is the row's identity on resume."""

    model: str  # path or hub id
    model_role: str  # "model" or "baseline"
    policy: str  # a key of POLICY_GRID: "static", "calm", "adaptive", "speculative" or "transformers"
    batch_size: int
    shape: str = "full"  # static: schedule shape; "full" is the 1x reference
    mode: str = "full"  # skip / exit / middle (static, adaptive); "full" for full depth; "calm" for CALM-DEC
    warmup: int = 0  # skip mode's warmup layers (0 where the mode has none)
    target_speedup: float = 1.0  # static; NaN where depth is decided while decoding (calm, adaptive)
    params: tuple[
        tuple[str, object], ...
    ] = ()  # the policy's parameters by column: (("calm_threshold", 0.8),)

    @property
    def is_full(self) -> bool:
        return self.policy == "static" and self.shape == "full"

    def value(self, column: str) -> object:
        """A parameter's value by its column; None where this setting's policy has none."""
        return dict(self.params).get(column)

    def to_dict(self) -> dict:
        """The setting as a results row's columns: every parameter column of the sweep, None where unset."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "params"}
        return {**fields, **{column: self.value(column) for column in sweep_params()}}

    def setting_id(self, run_params: dict) -> str:
        # an unset parameter column is left out unless results files written before it existed keyed it, so
        # those files resume
        kept = {c for c, p in sweep_params().items() if p.keyed_when_unset}
        fields = {
            k: v for k, v in self.to_dict().items() if v is not None or k not in sweep_params() or k in kept
        }
        blob = json.dumps([fields, run_params], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """'model b8 linear/skip x3': the model's role, the batch size and `skipcore.labels.setting_label`."""
        return f"{self.model_role} b{self.batch_size} {setting_label(self.to_dict())}"


def _as_values(values) -> tuple:
    """A grid axis's values as a tuple: one value (text, a number, NumPy's too) as a tuple of one."""
    return (values,) if isinstance(values, str | numbers.Number) else tuple(values)


# the config's fields that list a grid axis's values
GRID_AXES = ("targets", "shapes", "modes", "warmups", "batch_sizes", "policies", "speculative_targets")


@dataclass
class SweepConfig:
    """What a sweep runs (`run_sweep`; the `sweep` command's flags): a model (and a baseline model beside it) on a
    data split, every combination of the grid's axes (`GRID_AXES`: targets, shapes, modes, warmups, batch sizes,
    policies, speculative targets), its rows written to `out` and resumed from it; its values checked by
    `check_config`."""

    model: str
    dataset: str
    out: Path
    baseline_model: str | None = None
    split: str | None = "test"  # None: a single file, read whole
    limit: int | None = 32
    targets: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0)
    shapes: tuple[str, ...] = ("linear",)
    modes: tuple[str, ...] = ("skip", "exit", "middle")
    warmups: tuple[int, ...] = (1,)
    batch_sizes: tuple[int, ...] = (1, 8)
    policies: tuple[str, ...] = ("static", "calm")
    # each policy's parameters by column: the values to list ({"calm_threshold": (0.9, 0.8)}); a column left out
    # takes the policy's declared sweep default (`skipcore.policies.params`). Adaptive SkipDecode runs in skip
    # mode with the first warmup, one row per threshold x drop x floor; speculative SkipDecode one row per draft
    # schedule (a target speedup of the first shape, mode and warmup) x drafted tokens; transformers' generate()
    # (batch size 1 only): plain, and assistant_early_exit per exit layer x drafted tokens
    policy_values: dict[str, tuple] = field(default_factory=dict)
    speculative_targets: tuple[float, ...] = (2.0, 3.0)
    max_new_tokens: int | None = None  # default: the model's training settings, else 64
    decay_span: int | None = None  # default: the model's training settings, else the schedule's default
    speedup_over: int | None = None  # tokens a target is met over; default: the model's median output + 1
    max_layers: int | None = None  # pin the first decode step's budget (the paper decays from full depth)
    traces_dir: Path | None = None  # default: <out stem>_traces beside the output
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "sdpa"
    # "float32": a half-precision model's KV cache and decode attention in float32 on a CPU (`SkipEngine`)
    attention_dtype: str = "model"
    threads: int | None = None  # torch intra-op threads (CPU timing); None keeps torch's default
    repeats: int = 5  # paired timing: full depth and the setting alternate this many times; 0: no timing
    timing_limit: int | None = 16  # prompts timed (the first ones of the examples); None: all of them
    trust_remote_code: bool = False
    overwrite: bool = False
    progress: bool = True
    sweep_run_id: str = field(default_factory=lambda: "s" + uuid.uuid4().hex[:11])

    def __post_init__(self) -> None:
        """What a notebook passes, taken as the command line's parser hands it over: the output and traces folders
        as paths, a model and a dataset as text (a `Path` to a dataset was read as a hub name, after the first
        setting had run), one value of a grid axis (`targets=2.0`, `modes="skip"`, a policy's
        `{"calm_threshold": 0.8}`) as a tuple of one."""
        self.out = Path(self.out)
        self.traces_dir = None if self.traces_dir is None else Path(self.traces_dir)
        self.model, self.dataset = os.fspath(self.model), os.fspath(self.dataset)
        self.baseline_model = None if self.baseline_model is None else os.fspath(self.baseline_model)
        for axis in GRID_AXES:
            setattr(self, axis, _as_values(getattr(self, axis)))
        self.policy_values = {c: None if v is None else _as_values(v) for c, v in self.policy_values.items()}

    def values(self, column: str) -> tuple:
        """The values a parameter column takes in this sweep: the config's, else its declared default."""
        given = self.policy_values.get(column)
        return tuple(given) if given is not None else sweep_params()[column].sweep_values

    @property
    def models(self) -> list[tuple[str, str]]:
        out = [(self.model, "model")]
        if self.baseline_model:
            out.append((self.baseline_model, "baseline"))
        return out

    def run_params(self) -> dict:
        """Everything besides the Setting that changes a row's numbers."""
        return {
            "dataset": self.dataset,
            "split": self.split,
            "limit": self.limit,
            "max_new_tokens": self.max_new_tokens,
            "decay_span": self.decay_span,
            "speedup_over": self.speedup_over,
            "max_layers": self.max_layers,
            "device": self.device,
            "dtype": self.dtype,
            "attn": self.attn,
            # named only where it is not the model's own, so files of the model's own attention say nothing new
            **({"attention_dtype": self.attention_dtype} if self.attention_dtype != "model" else {}),
        }

    def identity(self) -> dict:
        """What every row of one results file shares; a resumed sweep must match it exactly."""
        return {
            "model": self.model,
            "baseline_model": self.baseline_model,
            **self.run_params(),
            "repeats": self.repeats,
            "timing_limit": self.timing_limit,
            "threads": self.threads,
        }


@dataclass(frozen=True)
class ModelFacts:
    """What a grid's settings are checked against: known from the config alone, so every model of a sweep is
    checked before the first one loads."""

    family: str  # the adapter's family ("opt", "gpt2", "llama")
    num_layers: int
    max_positions: int | None = None  # a prompt plus its new tokens, at most (None: the config does not say)
    model_type: str = (
        ""  # the config's own (qwen2 and mistral run on the llama adapter, not in transformers' code)
    )

    @classmethod
    def of_engine(cls, engine) -> ModelFacts:
        model_type = engine.model.config.model_type
        return cls(engine.adapter.family, engine.num_layers, engine.max_positions, model_type)

    @classmethod
    def of_config(cls, config) -> ModelFacts:
        from skipcore.adapters import ADAPTERS, max_positions, shapes_from_config

        family = ADAPTERS[config.model_type].family
        return cls(family, shapes_from_config(config).num_layers, max_positions(config), config.model_type)

    def check_new_tokens(self, max_new_tokens: int, model: str) -> None:
        """New tokens that leave no position for a prompt's one token refused before any work (what a request
        checks per prompt, `decode.checks`, cannot be known before the data is read; this can)."""
        from skipcore.models.generation_defaults import check_new_tokens

        check_new_tokens(max_new_tokens, self.max_positions, model)


def resolve_lengths(cfg: SweepConfig) -> SweepConfig:
    """max_new_tokens, decay span and the speedup horizon default to what the model was trained with (its
    skipcore_training.json): the horizon is its median output length + 1, the length rows really stop at.

    `--baseline-model` decodes under the very same schedules (budgets per step), so each target compares the
    two models like for like; where the baseline's outputs run longer than the model's, it realises a higher
    layer speedup than the target, which the table's realised column shows beside the target.
    """
    from skipcore.models.generation_defaults import generation_defaults, horizon

    gen = generation_defaults(cfg.model) if Path(cfg.model).is_dir() else {}
    max_new = cfg.max_new_tokens if cfg.max_new_tokens is not None else gen.get("max_new_tokens") or 64
    span = cfg.decay_span if cfg.decay_span is not None else gen.get("decay_span")
    if max_new < 2:
        raise UserError(f"max_new_tokens must be >= 2, got {max_new}", field="max_new_tokens")
    over = horizon(cfg.speedup_over, gen, max_new)
    if over < 2:
        raise UserError(f"speedup_over must be >= 2, got {over}", field="speedup_over")
    span = None if span is None else int(span)
    return replace(cfg, max_new_tokens=int(max_new), decay_span=span, speedup_over=int(over))


# the config's counts, and its grid axes of whole numbers and of numbers
WHOLE_NUMBERS = (
    "limit", "max_new_tokens", "decay_span", "speedup_over", "max_layers", "threads", "repeats", "timing_limit"
)  # fmt: skip
NUMBER_AXES = {
    "batch_sizes": numbers.Integral, "warmups": numbers.Integral,
    "targets": numbers.Real, "speculative_targets": numbers.Real,
}  # fmt: skip


def _plain_numbers(cfg: SweepConfig) -> SweepConfig:
    """The config's counts and numeric axes as Python's numbers (NumPy's from a notebook are taken: the results'
    record is JSON) and a whole float as its count (`25.0`), refused in one line where one is of another kind
    (`limit=2.5`, `limit="2"`, a `True`), before any work; the command line's words are its parser's to refuse."""

    def plain(name: str, value, kind: type, axis: bool = False) -> int | float:
        whole = kind is numbers.Integral
        value = whole_number(value) if whole else python_number(value)  # 25.0 (a training record's) is 25
        if not (is_whole(value) if whole else is_number(value)):
            words = "whole number" if whole else "number"
            words = f"all be {words}s" if axis else f"be a {words}"
            raise UserError(f"{name} must {words}, got {quoted(value)}", field=name)
        return value

    counts = {
        n: plain(n, getattr(cfg, n), numbers.Integral) for n in WHOLE_NUMBERS if getattr(cfg, n) is not None
    }
    axes = {
        n: tuple(plain(n, v, kind, axis=True) for v in getattr(cfg, n)) for n, kind in NUMBER_AXES.items()
    }
    return replace(cfg, **counts, **axes)


def check_config(cfg: SweepConfig) -> SweepConfig:
    """The config with its lengths resolved, refused in one line where it cannot run (before any work)."""
    from skipcore.files import check_output_name, check_utf8_name
    from skipcore.schedule import MODES

    check_output_name(cfg.out, "out", field="out")
    for name in ("model", "dataset", "baseline_model"):  # recorded as text in the results
        if getattr(cfg, name):
            check_utf8_name(getattr(cfg, name), name, field=name)
    if cfg.baseline_model and _same_model(cfg.model, cfg.baseline_model):
        raise UserError(
            f"baseline_model {quoted(cfg.baseline_model)} names the same network as model: every setting would "
            "run twice, in columns named alike; give the network before skip-aware training, or drop "
            "baseline_model",
            field=("baseline_model", "model"),
        )
    cfg = _plain_numbers(cfg)
    for name, values, allowed in (
        ("shapes", cfg.shapes, ("linear", "power", "step", "constant")),
        ("modes", cfg.modes, MODES),
        ("policies", cfg.policies, (*sweep_policies(),)),
    ):
        for v in values:
            if v not in allowed:
                raise UserError(
                    f"{name}: unknown value {quoted(v)}; choose from {', '.join(allowed)}", field=name
                )
    if cfg.limit is not None and cfg.limit < 1:
        raise UserError(f"limit must be >= 1, got {cfg.limit}", field="limit")
    cfg = resolve_lengths(cfg)
    for name, values in (("targets", cfg.targets), ("speculative_targets", cfg.speculative_targets)):
        said = ",".join(f"{t:g}" for t in values)
        if not all(math.isfinite(t) for t in values):  # NaN would drop out of the grid unsaid
            raise UserError(f"{name} must all be finite numbers >= 1, got {said}", field=name)
        if not all(t >= 1 for t in values):
            raise UserError(f"{name} must all be >= 1, got {said}", field=name)
    known = sweep_params()
    for column, values in cfg.policy_values.items():
        if column not in known:
            raise UserError(
                f"unknown policy parameter {quoted(column)}; the sweep lists {', '.join(known)}",
                field="policy_values",
            )
        for value in values:
            known[column].check(value, name=column)
    if not cfg.batch_sizes:  # every setting runs at each: none would leave an empty grid (an empty list of
        # targets, modes or policies leaves full depth, the reference)
        raise UserError("batch_sizes is empty: give at least one", field="batch_sizes")
    if any(b < 1 for b in cfg.batch_sizes):
        raise UserError("batch_sizes must all be >= 1", field="batch_sizes")
    if cfg.repeats < 0:
        raise UserError(f"repeats must be >= 0 (0: no timing), got {cfg.repeats}", field="repeats")
    if cfg.timing_limit is not None and cfg.timing_limit < 1:
        raise UserError(f"timing_limit must be >= 1, got {cfg.timing_limit}", field="timing_limit")
    check_threads(cfg.threads)
    check_engine(cfg.device, cfg.dtype, cfg.attention_dtype)
    return cfg


def batch_that_fills(batch: int, rows: int, what: str, setting: str) -> int:
    """`batch` where its rows fill it, else the one batch of all `rows` (`what`: "the sweep runs (limit 4)"),
    said in a warning: a larger batch would run those rows under its name (a sweep row or a tune trial saying batch
    100000 that ran 4 rows). The sweep's, the tune's and the dashboard's rule, said alike."""
    if batch <= rows:
        return batch
    warnings.warn(
        f"{spoken(setting)} {batch} is more than the {rows} row{'s' * (rows != 1)} {what}: they run as one batch "
        f"of {rows}, named so",
        SkipcoreWarning,
        stacklevel=3,
    )
    return rows


def limit_said(name: str, limit: int | None, rows: int) -> str:
    """' (limit 4)' where the limit is what held the rows to their number (raising it would give more), else ''."""
    return f" ({spoken(name)} {limit})" if limit is not None and limit == rows else ""


def fit_batches(cfg: SweepConfig, examples: int) -> SweepConfig:
    """`cfg` with each batch size as the batch its rows fill (`batch_that_fills`): the examples, and where timed the
    first `timing_limit` of them (the rows a timing runs)."""
    rows, what = examples, f"the sweep runs{limit_said('limit', cfg.limit, examples)}"
    if cfg.repeats > 0 and cfg.timing_limit is not None and cfg.timing_limit < examples:
        rows, what = (
            cfg.timing_limit,
            f"timed{limit_said('timing_limit', cfg.timing_limit, cfg.timing_limit)}",
        )
    fitted = tuple(dict.fromkeys(batch_that_fills(b, rows, what, "batch_sizes") for b in cfg.batch_sizes))
    return cfg if fitted == cfg.batch_sizes else replace(cfg, batch_sizes=fitted)


def _same_model(a: str, b: str) -> bool:
    """Whether two model names name one model as the loader resolves them (`resolve_model`): one folder or file by
    two paths (relative, absolute, through a link, with a trailing slash), one real model's short name twice, one
    hub id twice. A name that resolves to nothing is the unit's to refuse: told apart by its text."""
    from skipcore.models.reference import resolve_model

    def where(name: str) -> tuple:
        try:
            ref = resolve_model(name)
        except UserError:
            return ("unresolved", name.rstrip("/"))
        if ref.path is not None:
            return (ref.kind, os.path.realpath(ref.path))
        return (ref.kind, ref.real.name if ref.real is not None else ref.name)

    return where(a) == where(b)


def check_engine(device: str, dtype: str, attention_dtype: str) -> None:
    """The device, dtype and attention dtype every unit loads its model with (a sweep's, a tune's), refused in one
    line naming the setting before any work, not when the first unit loads its model. Whether the device is there
    is the executor's check (this machine's, or a Ray cluster's workers')."""
    from skipcore.kernels.attention_dtypes import ATTENTION_DTYPES
    from skipcore.models.loading import DTYPES, check_device, check_dtype

    if not isinstance(dtype, str):  # a row records it as text
        raise UserError(
            f"dtype must be a name (auto, {', '.join(DTYPES)}), got {quoted(dtype)}", field="dtype"
        )
    for name, value, check in (("device", device, check_device), ("dtype", dtype, check_dtype)):
        try:
            check(value)
        except UserError as e:
            raise UserError(str(e), field=name) from e
    if attention_dtype not in ATTENTION_DTYPES:
        raise UserError(
            f"attention_dtype: unknown value {quoted(attention_dtype)}; choose from {', '.join(ATTENTION_DTYPES)}",
            field="attention_dtype",
        )
