"""`python -m skipcore bench`: flags -> `skipcore.evaluate.bench.bench_one` per model, length and batch size."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import atomic_write, check_companion, check_output_path, file_digest


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument(
        "--models",
        default=None,
        help="comma list of models: random ones shaped like public checkpoints (opt-125m, opt-1.3b, llama-1b) and "
        "the real models by short name (smollm2-135m, gemma-3-270m: their own weights where installed, else a "
        "random model of their shape, said before the run)",
    )
    p.add_argument("--batch-sizes", default=None, help="comma list (default: 1,8 on CPU; 1,8,64 on CUDA)")
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default: 32 CPU, 128 CUDA)")
    p.add_argument("--new-tokens", default="64", help="comma list of generated tokens per run (default: 64)")
    p.add_argument("--targets", default="2,3,4", help="skip targets (theoretical layer speedups)")
    p.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="paired runs per setting, each after a run of full depth; the median of the paired ratios is kept, "
        "with a bootstrap 95%% interval (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--out", default=None, help="results file (.json; a .md table is written beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    p.add_argument(
        "--compiled-generate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time generate() with its static cache, which transformers compiles on CUDA (default: on for "
        "CUDA; each batch size and length compiles anew, minutes per shape)",
    )
    p.set_defaults(func=run_bench)


def _ints(text: str, flag: str) -> list[int]:
    """Comma-separated counts, each >= 1."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError as e:
        raise UserError(f"{flag} must be comma-separated integers, got {text!r}") from e
    if any(v < 1 for v in values):
        raise UserError(f"{flag} must all be >= 1, got {text}")
    return values


def _targets(text: str) -> list[float]:
    """Target layer speedups: finite numbers >= 1."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError as e:
        raise UserError(f"--targets must be comma-separated numbers, got {text!r}") from e
    if not all(math.isfinite(v) and v >= 1 for v in values):
        raise UserError(f"--targets must all be finite numbers >= 1, got {text}")
    return values


def check_plan(models: list[str], prompt_len: int, new_tokens: list[int], targets: list[float]) -> None:
    """Every model fits the prompt plus the longest generation, and reaches every target, before any model is
    built (every name, a real model's too, has its sizes in BENCH_SHAPES; no config is read)."""
    from skipcore.models.random_models import BENCH_SHAPES
    from skipcore.schedule import schedule_for_speedup

    if prompt_len < 1:
        raise UserError(f"--prompt-len must be >= 1, got {prompt_len}")
    for m in models:
        shape = BENCH_SHAPES[m][1]
        positions = shape["max_position_embeddings"]
        if prompt_len + max(new_tokens) > positions:
            raise UserError(
                f"--prompt-len {prompt_len} plus --new-tokens {max(new_tokens)} exceeds {m}'s {positions} positions; "
                f"use at most {max(positions - max(new_tokens), 0)} prompt tokens or fewer new tokens"
            )
        for t in targets:
            for n in new_tokens:
                try:
                    schedule_for_speedup(shape["num_hidden_layers"], t, n, "linear", "skip", warmup_layers=1)
                except UserError as e:
                    raise UserError(f"--targets {t:g} on {m} over {n} new tokens: {e}") from e


def run_bench(args: argparse.Namespace) -> int:
    import torch  # here, not at the top: `bench --help` stays instant

    from skipcore.evaluate.bench import bench_one, format_table, measure_bandwidth, uses_real_weights
    from skipcore.models.catalog import REAL_MODELS, is_real_name
    from skipcore.models.loading import hardware_name, resolve_device, resolve_dtype
    from skipcore.models.random_models import BENCH_SHAPES

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    cuda = device.type == "cuda"
    models = (args.models or ("opt-1.3b,llama-1b" if cuda else "opt-125m")).split(",")
    unknown = [m for m in models if m not in BENCH_SHAPES]
    if unknown:
        raise UserError(
            f"unknown bench model {unknown[0]!r}; choose one of {', '.join(BENCH_SHAPES)} (a real model's name "
            f"times its own weights where it is installed: {', '.join(REAL_MODELS)})"
        )
    batch_sizes = _ints(args.batch_sizes or ("1,8,64" if cuda else "1,8"), "--batch-sizes")
    new_tokens = _ints(args.new_tokens, "--new-tokens")
    targets = _targets(args.targets)
    prompt_len = args.prompt_len if args.prompt_len is not None else (128 if cuda else 32)
    if args.repeats < 1:
        raise UserError(f"--repeats must be >= 1 (paired runs against full depth), got {args.repeats}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    out = check_output_path(args.out, args.overwrite, (".json",))
    if out is not None:
        check_companion(out.with_suffix(".md"), out, args.overwrite, lambda md: _own_table(out, md))
    check_plan(models, prompt_len, new_tokens, targets)
    for m in models:
        if is_real_name(m) and not uses_real_weights(m):
            print(
                f"note: {m} is not installed ({REAL_MODELS[m].install}); timing a random model of its shape"
            )
    if args.threads:
        torch.set_num_threads(args.threads)
    # the roofline's denominator on either device: a decode step at small batch reads every weight once
    bandwidth = measure_bandwidth(device)
    header = {
        "machine": hardware_name(device),
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bandwidth_bytes_per_s": bandwidth,
    }
    settings = [(m, T, b) for m in models for T in new_tokens for b in batch_sizes]
    rows: list[dict] = []
    # digests of the tables beside the results, newest last: a replaced one was checked as the bench's own above
    md = out.with_suffix(".md") if out is not None else None
    written = [file_digest(md)] if md is not None and md.is_file() else []
    for done, (m, T, b) in enumerate(settings, 1):
        new = bench_one(
            m,
            b,
            prompt_len,
            T,
            targets,
            device,
            dtype,
            args.repeats,
            compiled_generate=cuda if args.compiled_generate is None else args.compiled_generate,
            bandwidth=bandwidth,
        )
        rows += new
        print(format_table(new), flush=True)
        if out is not None:  # after every setting, so a stopped bench keeps what it measured
            _write_results(out, header, rows, done, len(settings), written)
    if out is not None:
        print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def _write_results(
    out: Path, header: dict, rows: list[dict], done: int, total: int, written: list[str]
) -> None:
    """Replace the results file and its table, each atomically; until the last setting both say they are partial.

    The JSON goes first and names the new table's digest and the one before it, so a bench stopped between the
    two writes still knows the table beside it as its own (and a rerun with --overwrite may replace it)."""
    from skipcore.evaluate.bench import format_table  # imports torch: here, so `bench --help` stays instant

    partial = (
        ""
        if done == total
        else f"Partial: {done} of {total} settings measured (the bench stopped or is still running).\n\n"
    )
    table = (
        f"Machine: {header['machine']} ({header['device']}, {header['dtype']}, torch {header['torch']})\n\n"
        + partial
        + format_table(rows)
        + "\n"
    )
    digest = hashlib.sha256(table.encode()).hexdigest()
    result = {
        **header,
        "complete": done == total,
        "settings_done": done,
        "settings_total": total,
        "rows": rows,
    }
    result["table_sha256"] = digest
    if written:
        result["previous_table_sha256"] = written[-1]
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda p: p.write_text(json.dumps(result, indent=2)))
    atomic_write(out.with_suffix(".md"), lambda p: p.write_bytes(table.encode()))
    written.append(digest)


def _own_table(out: Path, md: Path) -> bool:
    """The .md table beside a results file is the bench's own when the results file names its digest (the newest
    table or, for a bench stopped between its two writes, the one before)."""
    try:
        result = json.loads(out.read_text())
        recorded = {result.get("table_sha256"), result.get("previous_table_sha256")} - {None}
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    return file_digest(md) in recorded
