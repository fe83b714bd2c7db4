"""`python -m skipcore bench`: flags -> `skipcore.evaluate.bench.bench_one` per model, length and batch size;
results on stdout and in --out, notes on stderr."""

from __future__ import annotations

import argparse
import sys

from skipcore.commands.common import comma_list, path_text
from skipcore.files import check_companion, check_output_path, file_digest


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument(
        "--models",
        type=comma_list(str, "--models"),
        help="comma list of models: random ones shaped like public checkpoints (opt-125m, opt-1.3b, llama-1b) and "
        "the real models by short name (smollm2-135m, gemma-3-270m: their own weights where installed, else a "
        "random model of their shape, said before the run)",
    )
    p.add_argument(
        "--batch-sizes",
        type=comma_list(int, "--batch-sizes"),
        help="comma list (default: 1,8 on CPU; 1,8,64 on CUDA)",
    )
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default: 32 CPU, 128 CUDA)")
    p.add_argument(
        "--new-tokens", type=comma_list(int, "--new-tokens"), default=(64,), help="comma list of generated tokens "
        "per run (default: 64)",
    )  # fmt: skip
    p.add_argument(
        "--targets", type=comma_list(float, "--targets"), default=(2.0, 3.0, 4.0),
        help="skip targets (theoretical layer speedups; default: 2,3,4)",
    )  # fmt: skip
    p.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="paired runs per setting, each after a run of full depth; the median of the paired ratios is kept, "
        "with a bootstrap 95%% interval (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument(
        "--out", type=path_text, default=None, help="results file (.json; a .md table is written beside it)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    p.add_argument(
        "--compiled-generate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time generate() with its static cache, which transformers compiles on CUDA (default: on for "
        "CUDA; each batch size and length compiles anew, minutes per shape)",
    )
    p.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    import torch  # here, not at the top: `bench --help` stays instant

    import skipcore.evaluate.bench as lib
    from skipcore.models.catalog import REAL_MODELS, is_real_name
    from skipcore.models.loading import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    cuda = device.type == "cuda"
    notes: list[str] = []  # said after every check, so that a refusal is one line alone
    models = _once(args.models or (("opt-1.3b", "llama-1b") if cuda else ("opt-125m",)), "--models", notes)
    batch_sizes = _once(args.batch_sizes or ((1, 8, 64) if cuda else (1, 8)), "--batch-sizes", notes)
    new_tokens = _once(args.new_tokens, "--new-tokens", notes)
    targets = _once(args.targets, "--targets", notes)
    prompt_len = args.prompt_len if args.prompt_len is not None else (128 if cuda else 32)
    lib.check_plan(models, batch_sizes, prompt_len, new_tokens, targets, args.repeats, args.threads)
    out = check_output_path(args.out, args.overwrite, (".json",))
    if out is not None:
        check_companion(out.with_suffix(".md"), out, args.overwrite, lambda md: lib.own_table(out, md))
    notes += [
        f"note: {m} is not installed ({REAL_MODELS[m].install}); timing a random model of its shape"
        for m in models
        if is_real_name(m) and not lib.uses_real_weights(m)
    ]
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    # the roofline's denominator on either device: a decode step at small batch reads every weight once
    bandwidth = lib.measure_bandwidth(device)
    header = lib.results_header(device, dtype, bandwidth)
    settings = [(m, T, b) for m in models for T in new_tokens for b in batch_sizes]
    rows: list[dict] = []
    # digests of the tables beside the results, newest last: a replaced one was checked as the bench's own above
    md = out.with_suffix(".md") if out is not None else None
    written = [file_digest(md)] if md is not None and md.is_file() else []
    for done, (m, T, b) in enumerate(settings, 1):
        new = lib.bench_one(
            m, b, prompt_len, T, targets, device, dtype, args.repeats,
            compiled_generate=cuda if args.compiled_generate is None else args.compiled_generate,
            bandwidth=bandwidth,
        )  # fmt: skip
        rows += new
        if (
            out is not None
        ):  # after every setting, so a stopped bench (or a closed stdout) keeps what it measured
            lib.write_results(out, header, rows, done, len(settings), written)
        print(lib.format_table(new), flush=True)
    if out is not None:
        print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


def _once(values: tuple, flag: str, notes: list[str]) -> list:
    """Each value once, in the order given: a repeated one would time the same setting again (said in `notes`)."""
    once = list(dict.fromkeys(values))
    if len(once) < len(values):
        again = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in once if values.count(v) > 1)
        notes.append(f"note: {flag} names {again} more than once; each setting runs once")
    return once
