"""`python -m skipcore generate`: batched generation under a depth policy, texts on stdout, a trace file."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass

from skipcore.commands.common import (
    add_attention_dtype_arg,
    add_length_args,
    add_model_args,
    add_prompt_args,
    add_schedule_args,
    add_threads_arg,
    apply_threads,
    finite,
    path_text,
)
from skipcore.commands.decode_settings import DecodeSettings
from skipcore.commands.decoding import (
    SAMPLING_FLAGS,
    add_policy_args,
    decode_notes,
    decode_setup,
    with_model_defaults,
)
from skipcore.errors import UserError, said_by
from skipcore.files import check_output_path
from skipcore.models.chat import empty_output_warning


@dataclass(frozen=True, kw_only=True)
class GenerateSettings(DecodeSettings):
    """generate's settings: the decode's, and its own (--attention-dtype, sampling, timing, the trace)."""

    attention_dtype: str
    fused_step: bool
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    seed: int
    timing_repeats: int
    trace: str | None
    jsonl: bool

    def sampling(self):
        """How tokens are chosen (`skipcore.decode.sampling.Sampling`, which refuses a value out of range)."""
        from skipcore.decode.sampling import Sampling

        with said_by({**SAMPLING_FLAGS, "do_sample": "--do-sample"}):
            return Sampling(self.do_sample, self.temperature, self.top_k, self.top_p, self.seed)


# -- generate -----------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        description="Batched generation under a layer-skipping policy. Prints one generated text per prompt "
        "(the prompt is not repeated), a line each, its line breaks as spaces (--jsonl: exactly), and a one-line "
        "summary on stderr; writes a per-token trace when --trace is given.",
    )
    add_model_args(p)
    add_attention_dtype_arg(p)
    p.add_argument(
        "--fused-step",
        action="store_true",
        help="decode on the fused step: decode steps whose layers run in fewer, fuller kernels (Q/K/V and "
        "gate/up as one product each, the element-wise work compiled by torch.compile on CUDA, plain ops on a CPU; "
        "every policy's steps, CALM's exits uncaptured; not the prompt's pass); "
        "a Llama-family, OPT or Gemma 3 model's layers, GPT-2's run as they are. On a CPU its tokens are the "
        "unfused fixed-shape steps' bit for bit; those pad the prompt to a fixed multiple of columns, so in half "
        "precision they can part from plain generate's (in float32 they are identical). In half precision on a GPU "
        "its bits are its own",
    )
    add_prompt_args(p)
    add_schedule_args(p)
    add_policy_args(p)
    g = p.add_argument_group("decoding")
    add_length_args(g)
    g.add_argument("--batch-size", type=int, help="rows per batch (default: all prompts in one batch)")
    g.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    g.add_argument(
        "--temperature", type=finite, default=1.0, help="with --do-sample: divides the logits (default: 1.0)"
    )
    g.add_argument(
        "--top-k",
        type=int,
        default=0,
        help="with --do-sample: the k likeliest tokens alone (default: 0, every one)",
    )
    g.add_argument(
        "--top-p",
        type=finite,
        default=1.0,
        help="with --do-sample: the fewest likeliest tokens whose probability reaches p (default: 1.0, every one)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=0,
        help="with --do-sample: where the draws start, each prompt's by its place in the call: the same seed, the "
        "same tokens (default: 0)",
    )
    add_threads_arg(g)
    g.add_argument(
        "--timing-repeats",
        type=int,
        default=0,
        help="also measure the wall-clock speedup against full depth on these prompts: after a warm-up, full "
        "depth and this policy alternate N times; prints the median of the paired ratios with a 95%% interval "
        "(default: 0, no timing; the summary's tokens/s is then one run)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--trace",
        type=path_text,
        help="write the per-token trace here: .parquet (metadata inside), .csv or .jsonl (with a .meta.json "
        "sidecar), or .csv.zip / .jsonl.zip (one file plain pandas reads, metadata in the zip comment)",
    )
    o.add_argument("--overwrite", action="store_true", help="replace an existing trace file")
    o.add_argument("--quiet", action="store_true", help="do not print the run summary to stderr")
    o.add_argument(
        "--jsonl",
        action="store_true",
        help='print each text exactly, as one JSON line {"text": ...} per prompt in order (by default a text is '
        "one plain line, its line breaks printed as spaces)",
    )
    p.set_defaults(
        func=run_generate,
        on_interrupt="nothing was written (a trace is written when the run ends, or of the batches that finished)",
    )


def summary_line(label: str, s: dict, timed: bool = False) -> str:
    """The run summary: realised and batch layer speedups, FLOPs, KV saved, throughput (one run: say so, and how to
    measure, unless the run is `timed` against full depth: the line after it says that), and a speculative run's
    acceptance ('n/a' where no draft was made)."""
    from skipcore.measure.summary import speedup_text as x

    drafts = (
        f"drafts accepted {x(s['draft_acceptance'], '{:.0%}')}, {s['tokens_per_full_pass']:.2f} tokens per "
        "full-depth pass, "
        if s["tokens_per_full_pass"] == s["tokens_per_full_pass"]  # not NaN: a speculative run
        else ""
    )

    return (
        f"[{label}] {drafts}layer speedup {x(s['layer_speedup'])} per token / {x(s['batch_layer_speedup'])} "
        f"per batch step, FLOPs speedup {x(s['flops_speedup_decode'])} decode / "
        f"{x(s['flops_speedup_with_prompt'])} with prompt, KV saved {s['kv_saved_fraction']:.0%}, "
        f"{s['tokens_per_s']:.1f} tokens/s over its steps in this one run"
        + ("" if timed else " (--timing-repeats N measures against full depth)")
    )


def run_generate(args: argparse.Namespace, given: frozenset[str]) -> int:
    """Generate as the flags say (read once, `GenerateSettings`): texts on stdout, the summary on stderr."""
    from skipcore.decode.outputs import GenerationStopped
    from skipcore.traces.files import FORMATS, ZIPPED_FORMATS, check_trace_path, write_trace

    settings, schedule_note = with_model_defaults(GenerateSettings.from_args(args), given)
    apply_threads(settings.threads)
    if settings.timing_repeats < 0:
        raise UserError(f"--timing-repeats must be >= 0, got {settings.timing_repeats}")
    trace_path = check_output_path(
        settings.trace, settings.overwrite, (*FORMATS, *ZIPPED_FORMATS), field="trace"
    )
    if trace_path is not None:
        check_trace_path(trace_path, settings.overwrite)  # and a sidecar of that name that is not ours
    sampling = settings.sampling()  # refused before the model is loaded: it needs no weights
    setup = decode_setup(settings, settings.attention_dtype, settings.fused_step)
    engine, prompts, asked = setup.engine, setup.prompts, setup.policy
    policy = engine.placed(asked, settings.max_new_tokens)  # the device's draft length where none was given
    try:
        result = engine.generate(prompts, policy, settings.max_new_tokens, sampling, settings.batch_size)
    except GenerationStopped as stop:  # the batches that finished are kept, said as such in their metadata
        kept = stop.result
        if trace_path is not None:
            meta = {**kept.metadata, **setup.sent.run_metadata}
            write_trace(kept.trace, trace_path, meta, overwrite=settings.overwrite)
        print_texts(kept.texts, settings.jsonl)
        where = f"written to {trace_path}" if trace_path is not None else "printed (no --trace was given)"
        args.on_interrupt = (
            f"the first {len(kept.texts)} of {len(prompts)} prompts' outputs (the batches that finished) were "
            f"{where}"
        )
        raise
    if trace_path is not None:  # before any output: a stdout that cannot be written loses no trace
        meta = {**result.metadata, **setup.sent.run_metadata}
        write_trace(result.trace, trace_path, meta, overwrite=settings.overwrite)
        args.on_interrupt = f"the trace was written to {trace_path}; what came after it was stopped"
    print_texts(result.texts, settings.jsonl)
    notes = (
        []
        if settings.quiet
        else [
            *decode_notes(setup, settings, schedule_note),
            draft_note(asked, policy, engine),
            ceiling_note(settings, engine, result.trace),
        ]
    )
    for line in [*notes, empty_output_warning(result.texts, setup.sent)]:
        if line:
            print(line, file=sys.stderr)
    if not settings.quiet:
        line = summary_line(policy.label(), result.summary, timed=settings.timing_repeats > 0)
        print(line + (f", trace {trace_path}" if trace_path else ""), file=sys.stderr)
    if settings.timing_repeats:
        print(timing_line(engine, prompts, policy, settings), file=sys.stderr)
    return 0


def print_texts(texts: list[str], jsonl: bool) -> None:
    """A line per prompt on stdout: its own line breaks as spaces, or the text exactly in JSON (`--jsonl`)."""
    for text in texts:
        print(json.dumps({"text": text}, ensure_ascii=False) if jsonl else text.replace("\n", " ").strip())


def ceiling_note(settings: GenerateSettings, engine, trace) -> str:
    """Where a static run's target speedup is above the FLOPs speedup any schedule can give the model at the
    run's longest context (`flops_ceiling`: its LM head runs every step), that the target is met in layers only and
    the FLOPs speedup stops at the ceiling (Gemma 3 270M's head is most of a token: 6x in layers is 1.5x in
    FLOPs); '' otherwise."""
    from skipcore.measure.costs import head_share
    from skipcore.measure.theory import flops_ceiling

    depth = settings.depth
    if depth.policy != "static" or depth.target_speedup is None or trace.empty:
        return ""
    shapes, context = engine.adapter.shapes, int(trace["position"].max()) + 1
    ceiling = flops_ceiling(shapes, depth.mode, depth.warmup_layers, context)
    if depth.target_speedup <= ceiling:
        return ""
    return (
        f"note: {settings.model}'s LM head is {head_share(shapes, context):.0%} of a full-depth token's FLOPs at "
        f"{context} positions, so no schedule gives it more than {ceiling:.2f}x in FLOPs (its head ceiling); the "
        f"{depth.target_speedup:g}x target is met in layers"
    )


def draft_note(asked, placed, engine) -> str | None:
    """What speculative decoding drafts where --draft-tokens was not given, and why (`draft_tokens_said`): the
    device's default, or fewer where --max-new-tokens caps it (`Parameterised.for_run`)."""
    from skipcore.policies.speculative import SpeculativePolicy, default_draft_tokens, draft_tokens_said

    if not isinstance(asked, SpeculativePolicy) or asked.draft_tokens is not None:
        return None
    said = draft_tokens_said(*engine.runs_on)
    k, default = placed.draft_tokens, default_draft_tokens(*engine.runs_on)
    if k < default:
        said = f"capped by --max-new-tokens {k}, below {default}, {said}"
    return f"note: speculative drafts {k} token{'s' * (k != 1)} a round ({said}; --draft-tokens to choose)"


def timing_line(engine, prompts: list[str], policy, settings: GenerateSettings) -> str:
    """Paired, repeated timing against full depth (skipcore.measure.paired_timing), said with its interval and flag."""
    from skipcore.measure.paired_timing import measure_against_full
    from skipcore.measure.summary import interval_text
    from skipcore.models.loading import hardware_name

    m = measure_against_full(
        engine, prompts, policy, settings.max_new_tokens, settings.batch_size, settings.timing_repeats
    )
    decoded = math.isfinite(m["wall_speedup_decode"])  # one new token is the prefill alone: no decode step
    flag = decoded and m["timing_flag"]
    decode = interval_text(*(m[f"wall_speedup_decode{end}"] for end in ("", "_lo", "_hi")))
    total = interval_text(*(m[f"wall_speedup_total{end}"] for end in ("", "_lo", "_hi")))
    per_step = (
        f" (ms per decode step, each side's median: {m['full_decode_ms_per_step']:.2f} full depth, "
        f"{m['decode_ms_per_step']:.2f} this; the speedup is the median of the paired ratios)"
        if decoded
        else " (no decode step: the one new token is the prefill's)"
    )
    line = (
        f"measured against full depth: decode {decode}, total {total}, {m['tokens_per_s']:.1f} tokens/s end "
        "to end (tokenizing and the trace included); "
        f"medians of {m['timing_runs']} paired runs on {hardware_name(engine.device)}{per_step}"
    )
    return line + (f"\nwarning: timing flagged: {flag}" if flag else "")
