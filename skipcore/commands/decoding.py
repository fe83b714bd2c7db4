"""Decoding settings (`skipcore.commands.decode_settings`) turned into what a decode runs: the defaults the model was
trained with, the prompts, the schedule, the policy (its flags derived from the parameters each policy declares,
`skipcore.policies.params`), the engine with the dtype chosen for it, and a request checked before the first batch,
each refusal said by its flag."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from skipcore.commands.common import SCHEDULE_FLAGS, add_param_flag, dataset_split
from skipcore.commands.decode_settings import DecodeSettings, DepthSettings, S
from skipcore.decode.step import DepthPolicy
from skipcore.errors import SkipcoreWarning, UserError, said_by
from skipcore.policies import POLICY_CLASSES
from skipcore.policies.params import flag_names, params_of, summary, takes_shape
from skipcore.schedule import refuse_idle_beside_file, refuse_idle_for_shape

if TYPE_CHECKING:
    from skipcore.decode.engine import SkipEngine
    from skipcore.kernels.precision import DtypeChoice
    from skipcore.models.chat import ModelPrompts
    from skipcore.schedule import Schedule

LENGTH_FLAGS = {"max_new_tokens": "--max-new-tokens", "batch_size": "--batch-size"}


def add_policy_args(p: argparse.ArgumentParser, policies: Mapping[str, type] = POLICY_CLASSES) -> None:
    described = " ".join(f"{name}: {summary(cls)}" for name, cls in policies.items())
    g = p.add_argument_group("depth policy", described)
    g.add_argument("--policy", default="static", choices=list(policies), help="(default: %(default)s)")
    declared: set[str] = set()
    for cls in policies.values():
        for param in params_of(cls):
            if not param.schedule_flag and param.flag not in declared:  # schedule flags are the schedule's
                add_param_flag(g, param, param.flag, f"{cls.name}: {param.help}")
                declared.add(param.flag)
    p.set_defaults(policy_classes=policies)


# the flags (by dest) that say which schedule to run; a model trained at one schedule runs it where none is given
# (--decay-span alone keeps it, with that span)
SCHEDULE_CHOICE = frozenset(
    {"schedule", "schedule_json", *SCHEDULE_FLAGS} - {"shape", "budgets_list", "decay_span"}
)


# the flags (by dest) that only sampling reads (generate's): typed without --do-sample they would do nothing
SAMPLING_FLAGS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "seed": "--seed"}


# each schedule setting's flag, the shape's, the file's and the horizon a target speedup is met over among them:
# how the library's refusal of one is said
DEPTH_FLAGS = {
    **SCHEDULE_FLAGS, "schedule": "--schedule", "schedule_json": "--schedule-json", "speedup_over": "--speedup-over"
}  # fmt: skip


def refuse_idle_flags(settings: DecodeSettings, given: frozenset[str]) -> None:
    """One line for a flag typed where it would do nothing, before any work: another policy's setting, custom
    budgets for another shape, a data set beside prompts given, a schedule flag beside a schedule file, a sampling
    flag without --do-sample."""
    from skipcore.policies.params import params_of

    depth = settings.depth
    own = {p.dest for p in params_of(depth.policy_class)}
    elsewhere = {
        p.dest: (p.flag, name)
        for name, cls in POLICY_CLASSES.items()
        for p in params_of(cls)
        if p.dest not in own and not p.schedule_flag
    }
    idle = sorted(given & elsewhere.keys())
    if idle:
        flag, policy = elsewhere[idle[0]]
        raise UserError(f"{flag} is a setting of --policy {policy}; this run's policy is {depth.policy}")
    if not depth.policy_class.uses_schedule:
        typed = sorted(dest for dest in given - own if dest in SCHEDULE_FLAGS or dest == "schedule")
        if typed:
            flag = SCHEDULE_FLAGS.get(typed[0], "--schedule")
            raise UserError(
                f"{flag} sets a schedule; --policy {depth.policy} runs none: {depth.policy_class.about}"
            )
    if (settings.prompt or settings.prompts_file) and given & {"dataset", "split"}:
        raise UserError(
            "give the prompts by --prompt or --prompts-file, or by --dataset and --split, not both"
        )
    if (settings.prompt or settings.prompts_file) and "limit" in given:
        raise UserError(
            f"--limit takes the first prompts of --dataset; {prompts_flag(settings)} runs every prompt it gives: "
            "drop --limit, or give fewer prompts"
        )
    sampling_only = sorted(given & SAMPLING_FLAGS.keys())
    # generate's alone: lens decodes greedily, and its own --top-k is how many tokens a read-out keeps
    if sampling_only and not getattr(settings, "do_sample", True):
        raise UserError(
            f"{SAMPLING_FLAGS[sampling_only[0]]} sets how tokens are sampled, and this run decodes greedily: add "
            "--do-sample, or drop it"
        )
    if depth.schedule_json:  # the file's schedule runs as written: a schedule flag beside it would do nothing
        with said_by(DEPTH_FLAGS):
            refuse_idle_beside_file(given - own)


def refuse_idle_shape_flags(depth: DepthSettings, given: frozenset[str]) -> None:
    """One line for a schedule flag the run's shape or mode does not read (`skipcore.schedule.refuse_idle_for_shape`),
    once the shape is known (a model trained at one schedule names it where no flag does): --alpha beside a linear
    schedule, --warmup-layers in exit mode, --mode at full depth (adaptive's floor too: it never drops). A schedule
    file's fields are its own; a policy's own flags are its."""
    if depth.schedule_json or not depth.policy_class.uses_schedule:
        return
    own = {p.dest for p in params_of(depth.policy_class)}
    with said_by(DEPTH_FLAGS):
        refuse_idle_for_shape(given - own, depth.schedule, depth.mode)


def skip_asked(depth: DepthSettings) -> bool:
    """The settings say which layers to skip: a target speedup, a floor or a start (`--min-layers`,
    `--max-layers`), or a schedule file."""
    targets = (depth.target_speedup, depth.min_layers, depth.max_layers)
    return any(value is not None for value in targets) or bool(depth.schedule_json)


def with_model_defaults(settings: S, given: frozenset[str]) -> tuple[S, str]:
    """`settings` with what the flags leave out as the model was trained (`decoding_for`: the schedule a model
    trained at one schedule runs where `given`, the flags typed, names none; the schedule's shape, the length, the
    decay span, the horizon a target speedup is met over), checked; and the note that says the trained schedule (for
    a policy that runs a schedule) or a fall-back to full depth ('' if neither), said with the run's summary, after
    the work: errors come first."""
    from skipcore.models.generation_defaults import decoding_for

    refuse_idle_flags(settings, given)
    depth = settings.depth
    decoding = decoding_for(
        settings.model, depth.schedule, skip_asked(depth), depth.budgets is not None,
        depth.policy == "static", settings.max_new_tokens, depth.decay_span, settings.speedup_over,
        schedule_given=bool(given & SCHEDULE_CHOICE), lossless=depth.lossless,
    )  # fmt: skip
    if decoding.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {decoding.max_new_tokens}")
    if decoding.speedup_over < 2:
        raise UserError(
            f"--speedup-over must be >= 2 (the first token is the prefill), got {decoding.speedup_over}"
        )
    if "target_speedup" in given and depth.target_speedup is not None and decoding.max_new_tokens < 2:
        # as `schedule_for_speedup` refuses it; a model's own default target (not typed) runs such a request
        raise UserError(
            f"--target-speedup {depth.target_speedup:g} needs decode steps: --max-new-tokens "
            f"{decoding.max_new_tokens} makes its one token in the prompt's pass, which runs at full depth; give "
            "--max-new-tokens 2 or more"
        )
    trained = decoding.trained
    kept = ("mode", "max_layers", "min_layers", "warmup_layers", "alpha", "stages", "budgets")
    fields = {k: trained[k] for k in kept} if trained else {}
    resolved = replace(
        settings,
        depth=replace(depth, schedule=decoding.shape, decay_span=decoding.decay_span, **fields),
        max_new_tokens=decoding.max_new_tokens,
        speedup_over=decoding.speedup_over,
    )
    refuse_idle_shape_flags(resolved.depth, given)
    if trained and not takes_shape(depth.policy_class):  # CALM, adaptive: the trained budgets do not run
        return resolved, ""
    return resolved, trained_note(settings.model, resolved.depth) if trained else decoding.note


def trained_note(model: str, depth: DepthSettings) -> str:
    """The note a run of a model at the schedule it was trained at gets: which, and how to ask for another."""
    shown = {"custom": depth.budgets, "constant": f"{depth.min_layers} layers"}.get(
        depth.schedule, f"{depth.max_layers}->{depth.min_layers} layers"
    )
    how = f"{depth.schedule} {shown}, {depth.mode} mode"
    if depth.mode == "skip":
        how += f", warmup {depth.warmup_layers}"
    if depth.schedule != "constant":
        how += f", decay span {depth.decay_span}"
    return (
        f"note: {model} was trained at one schedule, so it runs it ({how}); pass --target-speedup T or --schedule "
        "full for another"
    )


def off_schedule_note(settings: DecodeSettings, num_layers: int) -> str:
    """The note a static run of a model trained at one schedule (`trained_schedule_of`) gets where schedule flags
    that say no budgets (`--mode`, `--warmup-layers`, `--schedule linear`) dropped that schedule for the default
    target's: both named, since such a model writes worse off the schedule it learnt. '' where the run's schedule is
    the trained one, its budgets were asked for (`skip_asked`, custom budgets, full depth), the model was trained
    at none, or the policy does not run the schedule as its text (CALM runs none, adaptive picks its own budgets,
    speculative decoding's text is full depth's)."""
    from skipcore.models.generation_defaults import trained_schedule_of
    from skipcore.schedule import schedule_from_settings

    depth = settings.depth
    if depth.policy != "static" or skip_asked(depth) or depth.budgets is not None or depth.schedule == "full":
        return ""
    trained = trained_schedule_of(settings.model)
    if trained is None:
        return ""
    over = settings.speedup_over or settings.max_new_tokens
    ran = schedule_of(depth, num_layers, settings.max_new_tokens, settings.speedup_over).describe()
    learnt = schedule_from_settings(num_layers, over, **trained).describe()
    if ran == learnt:
        return ""
    return (
        f"note: {settings.model} was trained at one schedule, {learnt}; the schedule flags given name no budgets, "
        f"so this run's are the default target's, {ran}, and its text may be poor off the schedule it learnt "
        "(without them it runs its own)"
    )


def decode_notes(setup: DecodeSetup, settings: DecodeSettings, schedule_note: str) -> list[str]:
    """The lines a decoding command says on stderr after its work, as `generate` and `lens` alike: the dtype and
    why, the fixed-shape steps' rounding, the trained schedule run or the one a schedule flag dropped
    (`schedule_note` from `with_model_defaults`, else `off_schedule_note`), and how the prompts went in (an
    instruct model's chat template); the empty ones left out."""
    lines = [
        setup.dtype_note,
        setup.fixed_shape_note,
        schedule_note or off_schedule_note(settings, setup.engine.num_layers),
        setup.sent.note,
    ]
    return [line for line in lines if line]


def prompts_flag(settings: DecodeSettings) -> str:
    """The flag the prompts came from, which a refusal of one of them names (`prompt 0 has no tokens`)."""
    return "--prompt" if settings.prompt else "--prompts-file" if settings.prompts_file else "--dataset"


def read_prompts(settings: DecodeSettings) -> list[str]:
    """The prompts the settings name: --prompt (repeated), a --prompts-file, or a data set's split, its rows in the
    format the model was trained on where skipcore fine-tuned it (`in_trained_format`: warned where that is not the
    data's own)."""
    if settings.prompt and settings.prompts_file:
        raise UserError("give --prompt or --prompts-file, not both")
    if settings.prompt:
        return list(settings.prompt)
    if settings.prompts_file:
        from skipcore.data.prompt_files import read_prompts_file

        return read_prompts_file(settings.prompts_file)
    from skipcore.data import format_prompt, load_examples
    from skipcore.models.chat import in_trained_format

    if settings.limit is not None and settings.limit < 1:
        raise UserError(f"--limit must be >= 1, got {settings.limit}")
    split = dataset_split(settings.dataset, settings.split)
    examples = load_examples(settings.dataset, split=split, limit=settings.limit)
    if not examples:
        raise UserError(
            f"{settings.dataset}{f' [{split}]' if split else ''} holds no rows: no prompts to decode",
            field="dataset",
        )
    examples, note = in_trained_format(examples, settings.model)
    if note:
        warnings.warn(note, SkipcoreWarning, stacklevel=2)
    return [format_prompt(e.task, e.source) for e in examples]


def schedule_of(
    depth: DepthSettings, num_layers: int, max_new_tokens: int, speedup_over: int | None = None
) -> Schedule:
    """The schedule the settings describe (`skipcore.schedule.schedule_from_settings`); a --target-speedup is met
    over `speedup_over` generated tokens (default: max_new_tokens). A schedule the flags cannot make is refused
    naming the flag."""
    from skipcore.errors import ScheduleError
    from skipcore.schedule import schedule_from_settings

    try:
        return schedule_from_settings(
            num_layers, speedup_over or max_new_tokens, shape=depth.schedule, **depth.schedule_fields(),
            schedule_json=depth.schedule_json,
        )  # fmt: skip
    except ScheduleError as e:
        if depth.schedule_json:  # a schedule file's own fields are not flags: said as the file has them
            raise ScheduleError(f"--schedule-json {e}") from e
        raise ScheduleError(e.said_as(SCHEDULE_FLAGS), field=e.fields) from e


def policy_of(
    depth: DepthSettings, num_layers: int, max_new_tokens: int, speedup_over: int | None
) -> DepthPolicy:
    """The policy the settings describe, checked against the model before any generation; a value it refuses is
    said by its flag."""
    cls = depth.policy_class
    schedule = schedule_of(depth, num_layers, max_new_tokens, speedup_over) if cls.uses_schedule else None
    with said_by({**SCHEDULE_FLAGS, **LENGTH_FLAGS, **flag_names(cls)}):
        policy = cls.from_schedule(schedule, **depth.policy_params)
        policy.check(num_layers, max_new_tokens)
    return policy


def check_generation_request(engine: SkipEngine, prompts: list[str], settings: DecodeSettings):
    """The engine's request checks (batch size, the longest prompt plus the new tokens against the model's
    positions, a prompt it cannot read named by the flag that gave it) said in the command line's words, before
    the first batch runs; the checked request."""
    with said_by({**LENGTH_FLAGS, "prompts": prompts_flag(settings)}):
        return engine.check_request(prompts, settings.max_new_tokens, settings.batch_size)


@dataclass(frozen=True)
class DecodeSetup:
    """What a decoding command runs: the engine (the dtype chosen for it inside), the prompts as the model is given
    them (`sent`: in an instruct model's chat template unless --raw-prompt, with the line that says how they went),
    the policy the settings describe, the line that says the dtype and why, and the note on the fixed-shape steps'
    rounding in half precision (`fixed_shape_note`; '' where it does not apply)."""

    engine: SkipEngine
    sent: ModelPrompts
    policy: DepthPolicy
    dtype_note: str
    fixed_shape_note: str = ""

    @property
    def prompts(self) -> list[str]:
        return self.sent.prompts


def decode_setup(
    settings: DecodeSettings, attention_dtype: str | None = None, fused: bool = False
) -> DecodeSetup:
    """The prompts and the policy, checked against the model's config before any weights are converted or loaded
    (a mistake that needs no weights costs none), then the model loaded in the dtype chosen for this run (a lossless
    policy's promise is part of `--dtype auto`'s context), its engine given that choice, and the request checked in
    the command line's words before the first batch. `attention_dtype`: generate's --attention-dtype (the layer lens
    replays in the model's dtype); `fused`: its --fused-step (on the fixed-shape steps it needs, on any device)."""
    from skipcore.adapters import max_positions, shapes_from_config
    from skipcore.decode.checks import check_weight_free
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.chat import prompts_for_model
    from skipcore.models.dtype_choice import Promise, lossless_caveat
    from skipcore.models.generation_defaults import check_new_tokens
    from skipcore.models.loading import load_config, load_model, model_dtype

    prompts = read_prompts(settings)
    with said_by({**LENGTH_FLAGS, "prompts": prompts_flag(settings)}):
        check_weight_free(prompts, settings.max_new_tokens, settings.batch_size, None)
    config = load_config(settings.model, settings.trust_remote_code)
    num_layers = shapes_from_config(config).num_layers
    # the horizon is at most the new tokens (`generation_defaults.horizon`), so these fit it too
    with said_by(LENGTH_FLAGS):
        check_new_tokens(settings.max_new_tokens, max_positions(config), settings.model)
    policy = policy_of(settings.depth, num_layers, settings.max_new_tokens, settings.speedup_over)
    lossless = settings.depth.lossless
    promise = Promise.TOKENS if lossless else None
    choice = model_dtype(settings.model, settings.device, settings.dtype, promise, settings.trust_remote_code)
    model, tokenizer = load_model(
        settings.model, settings.device, choice.name, settings.attn, settings.trust_remote_code
    )
    sent = prompts_for_model(settings.model, tokenizer, prompts, settings.raw_prompt)
    engine = SkipEngine(
        model,
        tokenizer,
        model_name=settings.model,
        static=True if fused else None,
        attention_dtype=attention_dtype,
        dtype_choice=choice,
        fused=fused,
    )
    request = check_generation_request(engine, sent.prompts, settings)
    caveat = lossless_caveat(choice, len(sent.prompts), request.batch_size) if lossless else None
    return DecodeSetup(
        engine,
        sent,
        policy,
        dtype_note(choice, engine, caveat),
        fixed_shape_note(engine, policy, settings.max_new_tokens),
    )


def dtype_note(choice: DtypeChoice, engine: SkipEngine, caveat: str | None) -> str:
    """The run summary's line on the dtype: which ran and why, float32 attention where asked (not `generate()`'s
    arithmetic), and a lossless policy's caveat where its promise does not hold bit for bit."""
    note = f"dtype: {choice.name} ({choice.reason})"
    if engine.kv_dtype != engine.dtype:
        note += "; attention: float32 (asked: not generate()'s arithmetic)"
    if engine.fused_step is not None:
        fits = sum(layer is not None for layer in engine.fused.layers)
        note += f"; fused step: {engine.fused_step} bodies, {fits} of {engine.num_layers} layers fused"
    return note + (f"\nnote: {caveat}" if caveat else "")


def fixed_shape_note(engine: SkipEngine, policy: DepthPolicy, max_new_tokens: int) -> str:
    """The note a run on the fixed-shape steps (static mode, which --fused-step needs) gets in half precision: they
    pad each prompt on the left to a multiple of the engine's `prompt_multiple` columns and attend over a
    fixed-width cache, and in bfloat16 or float16 those wider rows round otherwise than the dynamic steps' (a CPU's
    plain generate, `transformers`' `generate()`), so tokens can part from theirs; in float32 they are the same.
    '' where the run is in float32, on the dynamic steps, on a device whose default the fixed-shape steps are
    (CUDA: its half-precision bits are its own whatever the step), or its policy's steps are not fixed-shape
    (CALM's)."""
    from skipcore.decode.engine import fixed_shapes, static_by_default
    from skipcore.kernels.precision import dtype_name

    dtype = dtype_name(engine.dtype)
    if dtype == "float32" or not engine.static or static_by_default(engine.device):
        return ""
    if not fixed_shapes(engine.placed(policy, max_new_tokens)):
        return ""
    steps = (
        "--fused-step runs the fixed-shape steps, which"
        if engine.fused_step is not None
        else "the fixed-shape steps"
    )
    return (
        f"note: {steps} pad each prompt to a multiple of {engine.prompt_multiple} columns and attend over a "
        f"fixed-width cache: in {dtype} those wider rows round otherwise than the dynamic steps' (a CPU's plain "
        "generate, transformers' generate()), so tokens can part from theirs; in float32 they are the same"
    )
