"""What a bench run times, checked before any model is built: `BenchPlan` (models, lengths, batch sizes and
the settings beside full depth), the kinds of setting a plan can hold and what each device can measure of
them.

A plan is the same on every device; what a device cannot do is refused in one line (`check_plan`) or said
under the results table (`device_notes`), so the plan a GPU will run is first run whole on the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from skipcore.errors import UserError, quoted, said_by
from skipcore.threads import check_threads

# what a plan can time beside full depth (the reference every row is paired with), as --settings names them
SETTING_KINDS = {
    "full": "full depth",
    "no-graphs": "full depth without CUDA graphs (the same path uncaptured; needs static steps)",
    "skip": "SkipDecode's static skip schedule at each target",
    "speculative": "speculative SkipDecode at each draft length, drafting with a skip schedule",
    "speculative-float32": "speculative SkipDecode in float32, the exact mode a half-precision run is weighed "
    "against (skipped where the run is float32)",
    "generate": "transformers' generate(), dynamic cache",
    "generate-float32": "generate() in float32, what the model runs at without the run's half precision (skipped "
    "where the run is float32)",
    "compiled": "generate() with its static cache, which transformers compiles on CUDA",
    "fused": "full depth, each skip target and each speculative row on the fused step (fewer, fuller kernels, their "
    "element-wise work compiled on CUDA; needs static steps), the skips and drafts paired with fused full depth",
    "attention-float32": "full depth, and the speculative rows of the run, with the KV cache and attention in "
    "float32 (--attention-dtype float32: not generate()'s arithmetic; a half-precision run on a CPU only)",
}

SPECULATIVE_KINDS = {"speculative", "speculative-float32"}  # the kinds that draft (--draft-tokens)
FLOAT32_KINDS = ("speculative-float32", "generate-float32")  # float32 beside a half-precision run's settings
ATTENTION_FLOAT32 = "attention-float32"  # float32 attention beside a half-precision run's own
FUSED = " (fused)"  # a row on the fused step: its setting's name with this after it
FUSED_FULL = "full" + FUSED
# the fewest new tokens a speculative row drafts in: the prompt's pass makes the first, the first round's room is
# the rest, and a round keeps at most its drafts plus one token of its own
MIN_SPECULATIVE_TOKENS = 3


@dataclass(frozen=True)
class BenchPlan:
    """What one bench run times: every model at every generation length and batch size, each with the settings
    of `settings` (kinds of SETTING_KINDS)."""

    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    prompt_len: int
    new_tokens: tuple[int, ...]
    targets: tuple[float, ...] = (2.0, 3.0, 4.0)
    draft_tokens: tuple[int, ...] = ()
    draft_target: float = 3.0  # the speculative drafts' skip schedule
    repeats: int = 5
    settings: tuple[str, ...] = ("full", "skip", "generate")
    static_steps: bool = False  # fixed-shape decode steps over a static cache (CUDA graphs on a GPU)
    # where the draft lengths are the device's default, not given: a refusal of them says so (no part of a run)
    draft_tokens_said: str = ""

    def runs(self) -> list[tuple[str, int, int]]:
        """(model, new tokens, batch size) in the order they are timed."""
        return [(m, T, b) for m in self.models for T in self.new_tokens for b in self.batch_sizes]

    def run_ids(self) -> list[dict]:
        """Each run of `runs()` as a results file names it: everything that decides the rows it makes (the
        repeats only sharpen them; the order of a list only orders them), so a later stage of a plan knows which
        of its runs a file holds already."""
        what = {
            "settings": sorted(self.settings),
            "targets": sorted(self.targets),
            "draft_tokens": sorted(self.draft_tokens),
            "draft_target": self.draft_target,
            "static_steps": self.static_steps,
        }
        return [
            {"model": m, "prompt_len": self.prompt_len, "new_tokens": T, "batch_size": b, **what}
            for m, T, b in self.runs()
        ]


def plan_for(
    cuda: bool,
    models: tuple[str, ...] | None = None,
    batch_sizes: tuple[int, ...] | None = None,
    prompt_len: int | None = None,
    new_tokens: tuple[int, ...] | None = None,
    targets: tuple[float, ...] = (2.0, 3.0, 4.0),
    draft_tokens: tuple[int, ...] | None = None,
    draft_target: float = 3.0,
    repeats: int = 5,
    settings: tuple[str, ...] | None = None,
    static_steps: bool | None = None,
    dtype: str = "float32",
) -> tuple[BenchPlan, list[str]]:
    """The plan asked for, with the device's defaults where a value is not given (on CUDA the GPU plan of
    docs/gpu.md, on the CPU a short one; a speculative row drafts the device's draft length in `dtype`,
    `policies.speculative.default_draft_tokens`, said in a note), and each value once: a repeated one would
    time the same setting again, which the notes returned say. Not checked yet (`check_plan`)."""
    from skipcore.labels import repeated_note
    from skipcore.policies.speculative import default_draft_tokens, draft_tokens_said

    notes: list[str] = []

    def once(values: tuple, flag: str) -> tuple:
        if note := repeated_note(values, flag):
            notes.append(note)
        return tuple(dict.fromkeys(values))

    static = cuda if static_steps is None else static_steps
    device = "cuda" if cuda else "cpu"
    drafts = once(draft_tokens or (), "--draft-tokens")
    asked = tuple(s.strip() for s in settings) if settings else None
    said = ""
    if not drafts and (cuda and asked is None or SPECULATIVE_KINDS & set(asked or ())):
        drafts, said = (default_draft_tokens(device, dtype),), draft_tokens_said(device, dtype)
        notes.append(f"note: speculative rows draft {drafts[0]} ({said})")
    plan = BenchPlan(
        models=once(models or (("opt-1.3b", "llama-1b") if cuda else ("opt-125m",)), "--models"),
        batch_sizes=once(batch_sizes or ((1, 8, 32) if cuda else (1, 8)), "--batch-sizes"),
        prompt_len=prompt_len if prompt_len is not None else (128 if cuda else 32),
        new_tokens=once(new_tokens or ((128, 512) if cuda else (64,)), "--new-tokens"),
        targets=once(targets, "--targets"),
        draft_tokens=drafts,
        draft_target=draft_target,
        repeats=repeats,
        settings=once(asked or default_settings(cuda, static, bool(drafts)), "--settings"),
        static_steps=static,
        draft_tokens_said=said,
    )
    return plan, notes


def not_installed_notes(plan: BenchPlan) -> list[str]:
    """A note for each real model of the plan that is not installed: its rows time a random model of its
    shape."""
    from skipcore.models.catalog import REAL_MODELS, is_real_name

    return [
        f"note: {m} is not installed ({REAL_MODELS[m].install}); timing a random model of its shape"
        for m in plan.models
        if is_real_name(m) and not uses_real_weights(m)
    ]


def default_settings(cuda: bool, static_steps: bool, speculative: bool) -> tuple[str, ...]:
    """Every kind the device runs: graphs on and off where there are static steps (and the fused step on CUDA,
    where it compiles), transformers' compiled
    generate() on CUDA (it does not compile on the CPU) and its float32 generate() on the CPU (where bfloat16 is a
    choice, not a given), speculative rows where draft lengths are given (on the CPU in float32 too)."""
    kinds = (
        ["full"]
        + (["no-graphs"] if static_steps else [])
        + ["skip"]
        + (["fused"] if cuda and static_steps else [])
    )
    kinds += (["speculative"] + ([] if cuda else ["speculative-float32"])) if speculative else []
    return tuple(kinds + ["generate"] + (["compiled"] if cuda else ["generate-float32"]))


def skip_schedule(num_layers: int, target: float, new_tokens: int):
    """The bench's skip schedule for a target: linear decay, skip mode, one warmup layer."""
    from skipcore.schedule import schedule_for_speedup

    return schedule_for_speedup(num_layers, target, new_tokens, "linear", "skip", warmup_layers=1)


def model_config(name: str):
    """The config of a bench model without building it: a shape's from its table, a folder's from its folder;
    an unknown name is refused in one line."""
    from skipcore.models.catalog import REAL_MODELS
    from skipcore.models.random_models import BENCH_SHAPES, bench_config

    if name in BENCH_SHAPES:
        return bench_config(name)
    if not Path(name).exists():
        raise UserError(
            f"unknown bench model {quoted(name)}; choose one of {', '.join(BENCH_SHAPES)} (a real model's name "
            f"times its own weights where it is installed: {', '.join(REAL_MODELS)}), or a model folder",
            field="models",
        )
    from skipcore.models.loading import load_config

    return load_config(name)


def model_sizes(name: str) -> tuple[int, int]:
    """(layers, positions) of a bench model without building it (`model_config`)."""
    config = model_config(name)
    return config.num_hidden_layers, config.max_position_embeddings


def row_bytes(config, prompt_len: int, new_tokens: int, dtype: torch.dtype) -> int:
    """Bytes one row of a bench run holds at least, whatever its setting: its prompt ids (int64), its KV cache at
    the prompt plus the new tokens (every layer's K and V in `dtype`) and one position's logits in `dtype`. A lower
    bound (the weights, activations and the allocator's slack are not counted), so a refusal by it is no guess."""
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.costs import kv_bytes_per_position

    shapes = shapes_from_config(config)
    size = torch.empty((), dtype=dtype).element_size()
    kv = shapes.num_layers * (prompt_len + new_tokens) * kv_bytes_per_position(shapes, size)
    return 8 * prompt_len + kv + config.vocab_size * size


def check_fits(plan: BenchPlan, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, in one line before any model is built, a batch size whose rows cannot fit in the device's memory
    by `row_bytes` (the device's memory as training reads it: `skipcore.training.memory.device_memory`). Such a
    run got as far as its first batch and stopped on the allocator's traceback."""
    from skipcore.training.memory import device_memory

    memory = device_memory(device)
    if memory is None:
        return
    for m in plan.models:
        config = model_config(m)
        T = max(plan.new_tokens)
        per_row = row_bytes(config, plan.prompt_len, T, dtype)
        b = max(plan.batch_sizes)
        if b * per_row <= memory:
            continue
        fits = memory // per_row
        advice = (
            f"give --batch-sizes at most {fits}"  # a flag's value as it is typed: no thousands commas
            if fits >= 1
            else "use a shorter --prompt-len or fewer --new-tokens"
        )
        need = b * per_row / 2**30
        raise UserError(
            f"--batch-sizes {b} on {m} at --prompt-len {plan.prompt_len} plus {T} new tokens needs at least "
            f"{f'{need:,.0f}' if need >= 100 else f'{need:.3g}'} GiB (the prompt ids, the KV cache and the logits), more than the "
            f"{memory / 2**30:.3g} GiB of {device}: {advice}",
            field="batch_sizes",
        )


# why a float32 setting times nothing beside float32
IN_A_FLOAT32_RUN = "in a float32 run: pass --dtype bfloat16"


def idle_settings(plan: BenchPlan, device: torch.device, dtype: torch.dtype) -> dict[str, str]:
    """The settings of `plan` that time nothing on `device` in `dtype`, each with why: float32 beside a run in
    float32 already, and float32 attention anywhere but a half-precision run on a CPU."""
    why = {}
    for k in plan.settings:
        if k in FLOAT32_KINDS and dtype == torch.float32:
            why[k] = IN_A_FLOAT32_RUN
        elif k == ATTENTION_FLOAT32 and device.type != "cpu":
            why[k] = "on CUDA: it runs on a CPU only"
        elif k == ATTENTION_FLOAT32 and dtype == torch.float32:
            why[k] = IN_A_FLOAT32_RUN
    return why


def check_something_timed(plan: BenchPlan, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, in one line before any model is built, a plan whose every setting times nothing (it wrote a
    results file of no rows that said it was complete); where some do, `float32_notes` says which."""
    why = idle_settings(plan, device, dtype)
    if not why or len(why) < len(plan.settings):
        return
    by_reason: dict[str, list[str]] = {}
    for kind, reason in why.items():
        by_reason.setdefault(reason, []).append(kind)
    said = "; ".join(
        f"{','.join(kinds)} time{'s' * (len(kinds) == 1)} nothing {reason}"
        for reason, kinds in by_reason.items()
    )
    raise UserError(f"--settings {said}", field="settings")


def check_plan(plan: BenchPlan, threads: int | None = None) -> None:
    """Refuse, in one line naming the flag, a plan that cannot run, before any model is built: an unknown
    model or setting, a count below 1, a target below 1x, a model too short for the prompt plus the longest
    generation or too shallow for a target, graphs off without static steps, speculative rows without draft
    lengths."""
    unknown = [k for k in plan.settings if k not in SETTING_KINDS]
    if unknown:
        raise UserError(
            f"--settings: unknown setting {quoted(unknown[0])}; choose from {', '.join(SETTING_KINDS)}"
        )
    for kind in ("no-graphs", "fused"):
        if kind in plan.settings and not plan.static_steps:
            raise UserError(
                f"--settings {kind} needs static steps (on by default on CUDA; --static-steps elsewhere)"
            )
    drafting = [k for k in plan.settings if k in SPECULATIVE_KINDS]
    if plan.draft_tokens and not drafting:  # given: a default is chosen only for speculative rows
        raise UserError(
            f"--draft-tokens is the speculative rows' and --settings {','.join(plan.settings)} has none: add "
            "speculative to --settings, or leave --draft-tokens out"
        )
    counts = {"--batch-sizes": plan.batch_sizes, "--new-tokens": plan.new_tokens, "--targets": plan.targets}
    for flag, values in {**counts, "--draft-tokens": plan.draft_tokens or (1,)}.items():
        if min(values) < 1:
            raise UserError(f"{flag} must all be >= 1, got {','.join(f'{v:g}' for v in values)}")
    for flag, value in {
        "--prompt-len": plan.prompt_len,
        "--repeats": plan.repeats,
        "--draft-target": plan.draft_target,
    }.items():
        if value is not None and value < 1:
            raise UserError(f"{flag} must be >= 1, got {value:g}")
    check_threads(threads)
    if drafting:
        check_draft_tokens(plan)
    scheduled = {"skip", "fused"} & set(plan.settings)  # the kinds that time the skip schedules
    targets = [("--targets", t) for t in plan.targets if scheduled]
    targets += [("--draft-target", plan.draft_target)] if drafting else []
    for m in plan.models:
        layers, positions = model_sizes(m)
        if plan.prompt_len + max(plan.new_tokens) > positions:
            raise UserError(
                f"--prompt-len {plan.prompt_len} plus --new-tokens {max(plan.new_tokens)} exceeds {m}'s "
                f"{positions} positions; {_what_fits(positions, plan.prompt_len, max(plan.new_tokens))}"
            )
        for flag, t in targets:
            for n in plan.new_tokens:
                try:
                    skip_schedule(layers, t, n)
                except UserError as e:
                    raise UserError(f"{flag} {t:g} on {m} over {n} new tokens: {e}") from e


def _what_fits(positions: int, prompt_len: int, new_tokens: int) -> str:
    """Advice naming only values the bench accepts (each at least 1): a shorter prompt where that alone fits,
    else fewer new tokens where that does, else both."""
    if positions - new_tokens >= 1:
        return f"use --prompt-len {positions - new_tokens} or fewer, or fewer --new-tokens"
    if positions - prompt_len >= 1:
        return f"use --new-tokens {positions - prompt_len} or fewer"
    return f"use --prompt-len and --new-tokens that add up to at most {positions}"


def check_draft_tokens(plan: BenchPlan) -> None:
    """Each draft length within what every generation length of the plan can use, by the bound the speculative
    policy declares (`Param.request_bound`), said by the bench's flags."""
    from skipcore.policies.params import params_of
    from skipcore.policies.speculative import SpeculativePolicy

    shortest = min(plan.new_tokens)
    if shortest < MIN_SPECULATIVE_TOKENS:
        raise UserError(
            f"--new-tokens {shortest}: a speculative row of fewer than {MIN_SPECULATIVE_TOKENS} new tokens drafts "
            "nothing (the prompt's pass makes the first token, and a round keeps no more tokens than are left), so "
            f"it would time full depth under speculative's name; give --new-tokens of at least "
            f"{MIN_SPECULATIVE_TOKENS} or leave speculative out of --settings"
        )
    declared = next(p for p in params_of(SpeculativePolicy) if p.name == "draft_tokens")
    for k in plan.draft_tokens:
        try:
            with said_by({"draft_tokens": "--draft-tokens", "max_new_tokens": "--new-tokens"}):
                declared.check(k, max_new_tokens=shortest)
        except UserError as e:
            if not plan.draft_tokens_said:
                raise
            raise UserError(
                f"{e}: the device's default ({plan.draft_tokens_said}), not given; give --draft-tokens {shortest} "
                "or fewer"
            ) from None


def uses_real_weights(name: str) -> bool:
    """Whether a bench row of `name` times a real model's own weights: it names one and it is installed."""
    from skipcore.models.catalog import REAL_MODELS, installed

    return name in REAL_MODELS and installed(REAL_MODELS[name])


def weights_of(name: str) -> str:
    """What a bench row of `name` times: 'random' weights of a shape, a 'real' model's own, or a folder's
    'own'."""
    from skipcore.models.random_models import BENCH_SHAPES

    return "real" if uses_real_weights(name) else "random" if name in BENCH_SHAPES else "own"


def float32_notes(
    plan: BenchPlan, device: torch.device, dtype: torch.dtype, asked: tuple[str, ...] | None
) -> list[str]:
    """A note where --settings (`asked`: as typed; a device's default kinds are not the user's) asks for float32
    beside the run's dtype and the run is in float32 already (`--dtype auto` of a bench on a CPU is), so those
    settings time nothing (`idle_settings`, whose rule this says; float32 attention on CUDA is said under the table,
    `device_notes`). A plan where nothing would be timed is refused instead (`check_something_timed`)."""
    why = idle_settings(plan, device, dtype)
    idle = [k for k in plan.settings if why.get(k) == IN_A_FLOAT32_RUN and k in (asked or ())]
    return [f"note: --settings {','.join(idle)} time nothing {IN_A_FLOAT32_RUN}"] if idle else []


def device_notes(plan: BenchPlan, device: torch.device) -> list[str]:
    """What this device cannot measure of the plan, said under the table's machine line."""
    if device.type == "cuda":
        return (
            [f"--settings {ATTENTION_FLOAT32} runs on a CPU only."]
            if ATTENTION_FLOAT32 in plan.settings
            else []
        )
    notes = ["Peak memory is measured on CUDA only."]
    if plan.static_steps:
        notes.append(
            "Static steps run uncaptured on the CPU: no CUDA graphs, so 'no graphs' differs by its path only."
        )
    if "compiled" in plan.settings:
        notes.append(
            "transformers compiles generate() on CUDA only: 'generate() static+compile' ran uncompiled here."
        )
    if "fused" in plan.settings:
        notes.append("The fused step's bodies run as plain ops on the CPU (compiled on CUDA).")
    return notes
