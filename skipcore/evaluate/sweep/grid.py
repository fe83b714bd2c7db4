"""The sweep's grid: one small entry per policy in `POLICY_GRID`, saying how its settings are listed, checked,
built into a policy object (with its schedule columns) and evaluated, so another policy is one more entry, not
another branch. `build_grid` lists a config's settings in run order.

Every entry of the one decode loop is evaluated the same way: quality and theoretical costs from one generation
over every example (`skipcore.evaluate.sweep.quality`), then the wall-clock speedups against full depth, paired and
repeated (`skipcore.measure.paired_timing`); with `repeats=0` nothing is timed and the timing columns are NaN.
transformers' own generate() (`skipcore.policies.assisted`) is an entry of its own: not the loop, no
trace, timed end to end.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from skipcore.errors import UserError, quoted
from skipcore.evaluate.sweep.settings import NAN, ModelFacts, Setting, SweepConfig
from skipcore.measure.paired_timing import RUNS_COLUMNS

if TYPE_CHECKING:
    from skipcore.decode.step import DepthPolicy

# timings of a single run, replaced in a row by the medians of the paired runs
ONE_RUN = ("seconds", "tokens_per_s", "decode_seconds", "decode_ms_per_step")

# the timing columns of a sweep run with repeats=0: the same names, nothing measured
NOT_TIMED = {
    **{f"wall_speedup_{m}{end}": NAN for m in ("decode", "total") for end in ("", "_lo", "_hi")},
    "timing_runs": 0,
    "timing_prompts": 0,
    "decode_ms_per_step": NAN,
    "full_decode_ms_per_step": NAN,
    "seconds": NAN,
    "full_seconds": NAN,
    **dict.fromkeys(RUNS_COLUMNS, ""),
    "tokens_per_s": NAN,
    "timing_flag": "",
}


def untimed(row: dict) -> None:
    """`row` (a run's quality and costs) with its single run's timings dropped and its timing columns blank
    (`NOT_TIMED`): a row's times are the paired runs' medians, which fill these columns where they are measured."""
    for key in ONE_RUN:
        row.pop(key, None)
    row.update(NOT_TIMED)


# -- one entry per policy: how its settings are listed, checked, built and evaluated ----------------------------
# a setting's place on the schedule axes before its policy's parameters: (shape, mode, warmup, target speedup)
Design = tuple[str, str, int, float]


def parameter_rows(cls: type, cfg: SweepConfig) -> list[tuple[tuple[str, object], ...]]:
    """Every combination of a policy's swept parameter values, in declaration order (the first varies slowest),
    each value of its declared type so that equal settings hash equal."""
    from skipcore.policies.params import params_of

    rows: list[tuple[tuple[str, object], ...]] = [()]
    for p in params_of(cls):
        if p.sweep is not None:
            rows = [(*row, (p.column, p.kind(v))) for row in rows for v in cfg.values(p.column)]
    return rows


class EngineGrid:
    """A policy of the one decode loop: its settings (each design of `designs` x its parameters' values) become
    policy objects (`build`) that `engine.generate` runs, scored and timed the same way for every policy."""

    def __init__(self, policy: str, designs) -> None:
        self.policy, self.designs = policy, designs

    @property
    def cls(self) -> type:
        from skipcore.policies import policy_class

        return policy_class(self.policy)

    def settings(self, cfg: SweepConfig, model: str, role: str, b: int) -> list[Setting]:
        return [
            Setting(model, role, self.policy, b, shape, mode, w, float(t), params)
            for shape, mode, w, t in self.designs(cfg)
            for params in parameter_rows(self.cls, cfg)
        ]

    def build(self, setting: Setting, num_layers: int, cfg: SweepConfig) -> tuple[DepthPolicy, dict]:
        """The setting's policy, and its schedule columns: a schedule's own where it has one, else the layers
        the policy starts and ends at."""
        from skipcore.policies.params import params_of

        schedule = _schedule(setting, num_layers, cfg)
        values = {}
        for p in params_of(self.cls):
            if p.sweep is not None:
                values[p.name] = setting.value(p.column)
            elif p.schedule_flag:  # a schedule setting the sweep gives run-wide (`max_layers`)
                values[p.name] = getattr(cfg, p.name)
        policy = self.cls.from_schedule(schedule, **values)
        if setting.shape != "full" or setting.is_full:
            columns = {
                "max_layers": schedule.max_layers,
                "min_layers": schedule.min_layers,
                "schedule_speedup": schedule.layer_speedup(cfg.speedup_over),
            }
        else:
            columns = {
                "max_layers": getattr(policy, "max_layers", None) or num_layers,
                "min_layers": policy.min_layers,
                "schedule_speedup": NAN,
            }
        return policy, columns

    def check(self, setting: Setting, model: ModelFacts, cfg: SweepConfig) -> None:
        self.build(setting, model.num_layers, cfg)[0].check(model.num_layers, cfg.max_new_tokens)

    def evaluate(self, engine, examples, setting: Setting, cfg: SweepConfig) -> tuple[dict, object]:
        """Quality and theoretical costs from one generation over every example, then the wall-clock speedups
        against full depth, paired and repeated on the first `cfg.timing_limit` prompts (none with repeats 0)."""
        from skipcore.evaluate.sweep.quality import evaluate_generation
        from skipcore.measure.paired_timing import measure_against_full

        policy, columns = self.build(setting, engine.num_layers, cfg)
        row, result = evaluate_generation(engine, examples, policy, cfg.max_new_tokens, setting.batch_size)
        if setting.is_full:
            FULL_DEPTH.remember(engine, examples, setting.batch_size, cfg.max_new_tokens, result.texts)
        row["same_as_full_depth"] = FULL_DEPTH.share_equal(
            engine, examples, setting.batch_size, cfg.max_new_tokens, result.texts
        )
        for key in ONE_RUN:
            row.pop(key, None)
        if cfg.repeats == 0:
            row.update(NOT_TIMED)
        else:
            row.update(
                measure_against_full(
                    engine,
                    _timed_prompts(examples, cfg),
                    policy,
                    cfg.max_new_tokens,
                    setting.batch_size,
                    cfg.repeats,
                )
            )
        row.update(columns)
        return row, result


def _schedule(setting: Setting, num_layers: int, cfg: SweepConfig):
    """The schedule a setting names: a target speedup's (static, a speculative draft), full depth in the
    setting's mode and warmup for a policy that only takes those from it (adaptive), else full depth."""
    from skipcore.schedule import MODES, Schedule, full_schedule, schedule_for_speedup

    if setting.shape != "full":
        return schedule_for_speedup(
            num_layers,
            setting.target_speedup,
            cfg.speedup_over,
            setting.shape,
            setting.mode,
            setting.warmup if setting.mode == "skip" else 1,
            max_layers=cfg.max_layers,
            decay_span=cfg.decay_span,
        )
    if setting.mode in MODES:
        return Schedule(num_layers, "full", setting.mode, warmup_layers=setting.warmup)
    return full_schedule(num_layers)


def _static_designs(cfg: SweepConfig) -> list[Design]:
    """SkipDecode's precomputed schedules: one per shape x mode x warmup x target above 1x."""
    return [
        (shape, mode, w, t)
        for shape in cfg.shapes
        for mode in cfg.modes
        for w in (cfg.warmups if mode == "skip" else (0,))
        for t in cfg.targets
        if t > 1.0
    ]


def _calm_designs(cfg: SweepConfig) -> list[Design]:
    """CALM-DEC, the per-token dynamic baseline: no schedule."""
    return [("full", "calm", 0, NAN)]


def _adaptive_designs(cfg: SweepConfig) -> list[Design]:
    """Adaptive SkipDecode in skip mode with the first warmup (the paper's layer choice)."""
    return [("full", "skip", cfg.warmups[0], NAN)]


def _speculative_designs(cfg: SweepConfig) -> list[Design]:
    """Speculative SkipDecode (lossless): one draft schedule per target speedup, of the first shape, mode and
    warmup, as a static row would decode with it."""
    shape, mode = cfg.shapes[0], cfg.modes[0]
    w = cfg.warmups[0] if mode == "skip" else 0
    return [(shape, mode, w, float(t)) for t in cfg.speculative_targets]


class FullDepthOutputs:
    """Full depth's texts for a sweep's prompts at each batch size, so every row can say which share of its outputs
    is full depth's own (`same_as_full_depth`: 1.0 for a lossless policy that held its promise). They come from the
    full-depth row, which runs first at each batch size, or are generated once where a resumed sweep skipped it.
    Held for one engine at a time (weakly: a finished sweep's model is not kept alive)."""

    def __init__(self) -> None:
        self._engine = None
        self._texts: dict[tuple, list[str]] = {}

    def _for(self, engine) -> dict[tuple, list[str]]:
        if self._engine is None or self._engine() is not engine:
            self._engine, self._texts = weakref.ref(engine), {}
        return self._texts

    @staticmethod
    def _key(examples, batch_size: int, max_new_tokens: int) -> tuple:
        from skipcore.evaluate.sweep.quality import prompts_for

        return batch_size, max_new_tokens, tuple(prompts_for(examples))

    def remember(self, engine, examples, batch_size: int, max_new_tokens: int, texts: list[str]) -> None:
        self._for(engine)[self._key(examples, batch_size, max_new_tokens)] = list(texts)

    def share_equal(self, engine, examples, batch_size: int, max_new_tokens: int, texts: list[str]) -> float:
        """The share of `texts` equal to full depth's output for the same prompt at this batch size."""
        from skipcore.evaluate.sweep.quality import prompts_for

        cache, key = self._for(engine), self._key(examples, batch_size, max_new_tokens)
        if key not in cache:
            cache[key] = engine.generate(
                prompts_for(examples), None, max_new_tokens, batch_size=batch_size
            ).texts
        full = cache[key]
        return sum(a == b for a, b in zip(texts, full, strict=True)) / max(len(full), 1)


FULL_DEPTH = FullDepthOutputs()


def _timed_prompts(examples, cfg: SweepConfig) -> list[str]:
    from skipcore.evaluate.sweep.quality import prompts_for

    return prompts_for(examples[: cfg.timing_limit] if cfg.timing_limit else examples)


class TransformersGrid:
    """transformers' own `generate()` on the same model, at batch size 1 (the only size its assisted decoding
    runs): plain, and `assistant_early_exit` per exit layer x tokens drafted per round. It is not the one loop:
    its rows have quality, tokens per full-depth pass, acceptance, FLOPs per token (its calls by the convention)
    and the end-to-end time paired with full depth; no trace and no per-step costs."""

    policy = "transformers"

    def settings(self, cfg: SweepConfig, model: str, role: str, b: int) -> list[Setting]:
        from skipcore.policies.assisted import AssistedGeneration

        if b != 1:
            return []
        plain = Setting(model, role, self.policy, 1, mode="full", target_speedup=NAN)
        return [plain] + [
            Setting(model, role, self.policy, 1, mode="exit", target_speedup=NAN, params=params)
            for params in parameter_rows(AssistedGeneration, cfg)
        ]

    def check(self, setting: Setting, model: ModelFacts, cfg: SweepConfig) -> None:
        from skipcore.policies.assisted import check_assistant

        check_assistant(
            model.model_type, model.num_layers, setting.value("assistant_exit"), setting.value("draft_tokens")
        )

    def evaluate(self, engine, examples, setting: Setting, cfg: SweepConfig) -> tuple[dict, object]:
        from skipcore.evaluate.sweep.quality import prompts_for, score_outputs
        from skipcore.measure.paired_timing import measure_total_against_full, runs_flag
        from skipcore.policies.assisted import assisted_generate

        def run(prompts):
            return assisted_generate(
                engine,
                prompts,
                setting.value("assistant_exit"),
                setting.value("draft_tokens"),
                cfg.max_new_tokens,
            )

        out = run(prompts_for(examples))
        row = {**score_outputs(examples, out.texts, out.token_ids), **out.summary()}
        row["same_as_full_depth"] = FULL_DEPTH.share_equal(engine, examples, 1, cfg.max_new_tokens, out.texts)
        row["flops_speedup_with_prompt"] = full_depth_flops(engine, examples, out.token_ids) / out.flops
        untimed(row)
        if cfg.repeats:
            prompts = _timed_prompts(examples, cfg)
            row.update(
                measure_total_against_full(
                    engine, prompts, lambda: _seconds_tokens(run(prompts)), cfg.max_new_tokens, cfg.repeats
                )
            )
            # no decode time to hold to theory: its flag is the run count's alone
            row["timing_flag"] = runs_flag(row["wall_speedup_total"], row["timing_runs"])
        exit_layer = setting.value("assistant_exit") or engine.num_layers
        row.update({"max_layers": exit_layer, "min_layers": exit_layer, "schedule_speedup": NAN})
        return row, None


def _seconds_tokens(run) -> tuple[float, int]:
    return run.seconds, run.tokens


def full_depth_flops(engine, examples, token_ids) -> float:
    """What full depth spends on these outputs by the trace's FLOPs convention (`costs.flops_table` with every
    pass at all L layers): each prompt's prefill, then one all-layer pass per further token."""
    import numpy as np

    import skipcore.measure.costs as costs
    from skipcore.evaluate.sweep.quality import prompts_for

    shapes, L = engine.adapter.shapes, engine.num_layers
    total = 0.0
    for prompt, ids in zip(prompts_for(examples), token_ids, strict=True):
        P = len(engine.tokenizer(prompt)["input_ids"])
        total += float(costs.flops_table(shapes, np.array([P]), np.full((1, max(len(ids), 1)), L)).sum())
    return total


POLICY_GRID = {
    "static": EngineGrid("static", _static_designs),
    "calm": EngineGrid("calm", _calm_designs),
    "adaptive": EngineGrid("adaptive", _adaptive_designs),
    "speculative": EngineGrid("speculative", _speculative_designs),
    "transformers": TransformersGrid(),
}


def build_grid(cfg: SweepConfig) -> list[Setting]:
    """Settings in run order: per model, per batch size, full depth first (its paired timing gives the noise floor)."""
    unknown = [p for p in cfg.policies if p not in POLICY_GRID]
    if unknown:
        raise UserError(f"unknown sweep policy {quoted(unknown[0])}; choose from {', '.join(POLICY_GRID)}")
    if "transformers" in cfg.policies and 1 not in cfg.batch_sizes:
        raise UserError(
            "--policies transformers runs at batch size 1 only (transformers' assisted decoding supports no "
            "other): add 1 to --batch-sizes"
        )
    grid: list[Setting] = []
    for model, role in cfg.models:
        for b in cfg.batch_sizes:
            grid.append(Setting(model, role, "static", b))
            for name in cfg.policies:
                grid += POLICY_GRID[name].settings(cfg, model, role, b)
    return list(dict.fromkeys(grid))  # duplicates (e.g. warmups given twice) run once


def policy_for(setting: Setting, num_layers: int, cfg: SweepConfig) -> tuple[DepthPolicy, dict]:
    """The setting's policy (one of the loop's) and its schedule columns (max_layers, min_layers,
    schedule_speedup)."""
    return POLICY_GRID[setting.policy].build(setting, num_layers, cfg)


def check_settings(grid: list[Setting], model: ModelFacts, cfg: SweepConfig) -> None:
    """Refuse in one line, naming the setting, any setting of `grid` that cannot run on this model."""
    from skipcore.labels import sweep_policies
    from skipcore.policies.params import params_of

    if grid:
        # the horizon is at most the new tokens (`generation_defaults.horizon`), so these fit it too
        model.check_new_tokens(cfg.max_new_tokens, grid[0].model)
    for s in grid:
        try:
            POLICY_GRID[s.policy].check(s, model, cfg)
        except UserError as e:  # say which setting of the grid, and its parameters by their columns
            columns = {p.name: p.column for p in params_of(sweep_policies()[s.policy])}
            fields = tuple(columns.get(f, f) for f in e.fields)
            raise UserError(f"setting '{s.label()}': {e.said_as(columns)}", field=fields) from e
