"""`python -m skipcore lens`: the layer lens, one row per (sample, step, layer), and agreement with full depth."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from skipcore.commands.common import (
    add_length_args,
    add_model_args,
    add_prompt_args,
    add_schedule_args,
    add_threads_arg,
    apply_threads,
    path_text,
)
from skipcore.commands.decode_settings import DecodeSettings
from skipcore.commands.decoding import add_policy_args, decode_notes, decode_setup, with_model_defaults
from skipcore.errors import UserError
from skipcore.files import check_output_path


@dataclass(frozen=True, kw_only=True)
class LensSettings(DecodeSettings):
    """The lens's settings: the decode's, and its own (the path fed full depth's output, the agreement, the top
    tokens kept per read-out, the table)."""

    teacher_forced: bool
    agreement: bool
    top_k: int
    out: str | None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lens",
        description="Decode the prompts under a depth policy (greedy, the same flags as generate), then read the "
        "residual stream after every layer through the final norm and LM head, along the path each token took. "
        "Writes one row per (sample, step, layer) with --out: ran, top_token_id, top_token, top_prob, "
        "p_generated, logprob, kl_to_final, entropy, residual_cos (NaN where the layer did not run) and topk "
        "(JSON [[id, token, p], ...]). Prints a per-layer summary, and, unless --no-agreement, the fraction of "
        "tokens whose path ranks full depth's token first when fed full depth's output (per budget).",
    )
    add_model_args(p)
    add_prompt_args(p)
    add_schedule_args(p)
    add_policy_args(p)
    g = p.add_argument_group("lens")
    add_length_args(g)
    g.add_argument("--batch-size", type=int, help="rows per batch (default: all prompts in one batch)")
    add_threads_arg(g)
    g.add_argument(
        "--teacher-forced",
        action="store_true",
        help="feed the path full depth's output instead of its own decode (every position then sees the same "
        "context as at full depth; the agreement is measured this way)",
    )
    g.add_argument(
        "--agreement",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure agreement with full depth, teacher-forced (one full-depth run more; default: on unless "
        "the policy is full depth)",
    )
    g.add_argument("--top-k", type=int, default=5, help="top tokens kept per read-out (default: %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument(
        "--out",
        type=path_text,
        help="write the lens table here (.parquet, .jsonl or .csv; metadata as for traces)",
    )
    o.add_argument("--overwrite", action="store_true", help="replace an existing lens file")
    o.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(
        func=run_lens, on_interrupt="nothing was written (the lens's table is written when the run ends)"
    )


def run_lens(args: argparse.Namespace, given: frozenset[str]) -> int:
    """The layer lens as the flags say (read once, `LensSettings`): its summary on stdout, the table in --out."""
    from skipcore.lens import compare_with_full_depth, layer_lens, layer_summary, write_lens
    from skipcore.lens.files import check_lens_path
    from skipcore.lens.run import OWN
    from skipcore.lens.summary import FULL_DEPTH
    from skipcore.traces.files import FORMATS

    settings = LensSettings.from_args(args)
    if settings.top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {settings.top_k}")
    settings, schedule_note = with_model_defaults(settings, given)
    apply_threads(settings.threads)
    out_path = check_output_path(settings.out, settings.overwrite, FORMATS, field="out")
    if out_path is not None:
        check_lens_path(out_path, settings.overwrite)  # and a sidecar of that name that is not ours
    setup = decode_setup(settings)
    engine, prompts, policy = setup.engine, setup.prompts, setup.policy
    full_depth = policy.describe().get("mode") == "full"
    idle = [f"--{name.replace('_', '-')}" for name in ("teacher_forced", "agreement") if name in given]
    if full_depth and idle and not settings.quiet:
        print(
            f"note: {' and '.join(idle)} change{'s' if len(idle) == 1 else ''} nothing at full depth: its "
            "decode is full depth's own",
            file=sys.stderr,
        )
    common = dict(
        max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size, top_k=settings.top_k
    )
    agreement = None
    if not full_depth and (settings.agreement or settings.teacher_forced):
        cmp = compare_with_full_depth(engine, prompts, policy, **common)
        agreement = cmp.agreement if settings.agreement else None
        result = cmp.path if settings.teacher_forced else layer_lens(engine, prompts, policy, **common)
        if agreement is not None:
            result.metadata["agreement"] = agreement.to_dict()
    else:
        result = layer_lens(engine, prompts, policy, **common)
    result.metadata.update(setup.sent.run_metadata)
    if out_path is not None:
        write_lens(result.table, out_path, result.metadata, overwrite=settings.overwrite)
        args.on_interrupt = f"the lens table was written to {out_path}; what came after it was stopped"
    if settings.quiet:
        return 0
    for line in decode_notes(setup, settings, schedule_note):
        print(line, file=sys.stderr)
    fed = result.metadata["lens"]["tokens"]
    on = {FULL_DEPTH: "full depth's output", OWN: "its own decode"}.get(fed, fed)
    head = (
        f"layer lens of {policy.label()} on {on} ({len(prompts)} prompts, {result.summary['tokens']} tokens)"
    )
    if (result.table["step"] >= 1).any():
        print(f"{head}; per layer, over the decode steps:")
        print(layer_summary(result.table).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    else:  # every row ended on its first token (one new token, or an end of text at once)
        print(f"{head}: no decode step to summarise per layer (each token is its prefill's, at full depth)")
    if agreement is not None:
        print(agreement_line(agreement))
    if out_path is not None:
        print(f"lens table: {out_path} ({len(result.table)} rows)", file=sys.stderr)
    return 0


def agreement_line(a) -> str:
    """Agreement with full depth overall and per budget, in one line (a run of one new token has no decode step
    to agree on: said so, not a NaN share of none)."""
    if not a.tokens:
        return "agreement with full depth: no decode steps to compare (the first token is the prefill's)"
    budgets = ", ".join(
        f"{int(r.num_layers_run)} layers {r.agreement:.0%} ({int(r.tokens)})"
        for r in a.by_budget.itertuples()
    )
    return (
        f"agreement with full depth (teacher-forced, decode steps): {a.overall:.1%} of {a.tokens} tokens; "
        f"per budget: {budgets}"
    )
