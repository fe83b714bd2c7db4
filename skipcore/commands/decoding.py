"""The decoding flags turned into what a decode runs: the defaults the model was trained with, the prompts, the
schedule, the policy (its flags derived from the parameters each policy declares, `skipcore.policies.params`),
the engine, and a request checked before the first batch, each refusal said by its flag."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from skipcore.commands.common import SCHEDULE_FLAGS, add_param_flag, apply_threads, dataset_split
from skipcore.decode.step import DepthPolicy
from skipcore.errors import UserError
from skipcore.policies import POLICY_CLASSES
from skipcore.policies.params import flag_names, params_of, summary


def schedule_from_args(
    args: argparse.Namespace, num_layers: int, max_new_tokens: int, speedup_over: int | None = None
):
    """The schedule the flags describe (`skipcore.schedule.schedule_from_settings`); a --target-speedup is met
    over `speedup_over` generated tokens (default: max_new_tokens). A schedule the flags cannot make is refused
    naming the flag."""
    from skipcore.errors import ScheduleError
    from skipcore.schedule import schedule_from_settings

    settings = {name: getattr(args, name) for name in SCHEDULE_FLAGS if name not in ("shape", "budgets_list")}
    try:
        return schedule_from_settings(
            num_layers, speedup_over or max_new_tokens, shape=args.schedule, **settings,
            schedule_json=args.schedule_json,
        )  # fmt: skip
    except ScheduleError as e:
        if args.schedule_json:  # a schedule file's own fields are not flags: said as the file has them
            raise ScheduleError(f"--schedule-json {e}") from e
        raise ScheduleError(e.said_as(SCHEDULE_FLAGS), field=e.fields) from e


def check_generation_request(engine, prompts: list[str], args: argparse.Namespace):
    """The engine's request checks (batch size, the longest prompt plus the new tokens against the model's
    positions) said in the command line's words, before the first batch runs; the checked request."""
    try:
        return engine.check_request(prompts, args.max_new_tokens, args.batch_size)
    except UserError as e:
        raise UserError(e.said_as(LENGTH_FLAGS), field=e.fields) from e


LENGTH_FLAGS = {"max_new_tokens": "--max-new-tokens", "batch_size": "--batch-size"}


def read_prompts(args: argparse.Namespace) -> list[str]:
    """The prompts the flags name: --prompt (repeated), a --prompts-file, or a data set's split."""
    if args.prompt and args.prompts_file:
        raise UserError("give --prompt or --prompts-file, not both")
    if args.prompt:
        return list(args.prompt)
    if args.prompts_file:
        from skipcore.data.prompt_files import read_prompts_file

        return read_prompts_file(args.prompts_file)
    from skipcore.data import format_prompt, load_examples

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    examples = load_examples(args.dataset, split=dataset_split(args.dataset, args.split), limit=args.limit)
    return [format_prompt(e.task, e.source) for e in examples]


def apply_generation_defaults(args: argparse.Namespace) -> None:
    """The decode's settings the flags leave out, as the model was trained (`decoding_for`); a fall-back to full
    depth is said with the run's summary (`args.schedule_note`), after the work: errors come first, alone."""
    from skipcore.models.generation_defaults import decoding_for

    asked = args.target_speedup or args.min_layers is not None or args.max_layers is not None
    decoding = decoding_for(
        args.model, args.schedule, bool(asked or args.schedule_json), bool(args.budgets),
        getattr(args, "policy", "static") == "static", args.max_new_tokens, args.decay_span, args.speedup_over,
    )  # fmt: skip
    args.schedule, args.schedule_note = decoding.shape, decoding.note
    args.max_new_tokens, args.decay_span, args.speedup_over = (
        decoding.max_new_tokens, decoding.decay_span, decoding.speedup_over,
    )  # fmt: skip
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.speedup_over < 2:
        raise UserError(
            f"--speedup-over must be >= 2 (the first token is the prefill), got {args.speedup_over}"
        )
    apply_threads(args.threads)


def engine_prompts_policy(args: argparse.Namespace):
    """What a decoding command runs: the model's engine, the prompts (in an instruct model's chat template unless
    --raw-prompt: `args.sent` says how they went), and the policy the flags describe, each checked (the request
    in the command line's words) before the first batch."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.chat import prompts_for_model
    from skipcore.models.dtype_choice import Promise, lossless_caveat
    from skipcore.models.loading import load_model, model_dtype

    lossless = getattr(args.policy_classes[args.policy], "lossless", False)
    promise = Promise.TOKENS if lossless else None
    choice = model_dtype(args.model, args.device, args.dtype, promise, args.trust_remote_code)
    model, tokenizer = load_model(args.model, args.device, choice.name, args.attn, args.trust_remote_code)
    args.dtype_note = f"dtype: {choice.name} ({choice.reason})"
    args.sent = prompts_for_model(args.model, tokenizer, read_prompts(args), args.raw_prompt)
    # the layer lens replays in the model's dtype: only generate takes --attention-dtype
    attention = getattr(args, "attention_dtype", None)
    engine = SkipEngine(
        model, tokenizer, model_name=args.model, attention_dtype=attention, dtype_choice=choice
    )
    if engine.kv_dtype != engine.dtype:
        args.dtype_note += "; attention: float32 (asked: not generate()'s arithmetic)"
    request = check_generation_request(engine, args.sent.prompts, args)
    caveat = lossless_caveat(choice, len(args.sent.prompts), request.batch_size) if lossless else None
    args.dtype_note += f"\nnote: {caveat}" if caveat else ""
    policy = policy_from_args(args, engine.num_layers, args.max_new_tokens, args.speedup_over)
    return engine, args.sent.prompts, policy


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


def policy_from_args(
    args: argparse.Namespace, num_layers: int, max_new_tokens: int, speedup_over: int | None
) -> DepthPolicy:
    """The policy the flags describe, checked against the model before any generation; a value it refuses is
    said by its flag."""
    cls = args.policy_classes[args.policy]
    schedule = (
        schedule_from_args(args, num_layers, max_new_tokens, speedup_over) if cls.uses_schedule else None
    )
    values = {param.name: getattr(args, param.dest) for param in params_of(cls)}
    try:
        policy = cls.from_schedule(schedule, **values)
        policy.check(num_layers, max_new_tokens)
    except UserError as e:
        raise UserError(
            e.said_as({**SCHEDULE_FLAGS, **LENGTH_FLAGS, **flag_names(cls)}), field=e.fields
        ) from e
    return policy
