"""`python -m skipcore bench`: wall-clock tokens/s of our full-depth and skip paths against `generate()`.

Everything is measured in one run and reported as ratios (skip vs full, ours vs generate()), since shared
machines are noisy: each measurement is repeated with the settings interleaved and the median kept. Models are
randomly initialised in the shape of public checkpoints (speed does not depend on the weights; no download).
The plan is checked before any model is built (`check_plan`), and the results file and its table are rewritten
after every setting (`write_results`), so a stopped bench keeps what it measured.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import torch

from skipcore.errors import UserError
from skipcore.files import atomic_write, file_digest


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_bandwidth(device: torch.device, mib: int = 1024) -> float:
    """Device memory bandwidth in bytes/s from a large copy (bytes read + bytes written over the best of five), the
    roofline's denominator. On a CPU it uses torch's threads, as the decode it is compared with does."""
    n = mib * 2**20 // 4
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    _sync(device)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * a.numel() * 4 / min(times)


def check_plan(
    models: list[str],
    batch_sizes: list[int],
    prompt_len: int,
    new_tokens: list[int],
    targets: list[float],
    repeats: int,
    threads: int | None = None,
) -> None:
    """Refuse, in one line naming the flag, a plan that cannot run, before any model is built: an unknown model,
    a count below 1, a target below 1x, a model too short for the prompt plus the longest generation or too
    shallow for a target (every name, a real model's too, has its sizes in BENCH_SHAPES; no config is read)."""
    from skipcore.models.catalog import REAL_MODELS
    from skipcore.models.random_models import BENCH_SHAPES
    from skipcore.schedule import schedule_for_speedup

    unknown = [m for m in models if m not in BENCH_SHAPES]
    if unknown:
        raise UserError(
            f"unknown bench model {unknown[0]!r}; choose one of {', '.join(BENCH_SHAPES)} (a real model's name "
            f"times its own weights where it is installed: {', '.join(REAL_MODELS)})"
        )
    for flag, values in {
        "--batch-sizes": batch_sizes,
        "--new-tokens": new_tokens,
        "--targets": targets,
    }.items():
        if min(values) < 1:
            raise UserError(f"{flag} must all be >= 1, got {','.join(f'{v:g}' for v in values)}")
    for flag, value in {"--prompt-len": prompt_len, "--repeats": repeats, "--threads": threads}.items():
        if value is not None and value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
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


def uses_real_weights(name: str) -> bool:
    """Whether a bench row of `name` times a real model's own weights: it names one and it is installed."""
    from skipcore.models.catalog import REAL_MODELS, installed

    return name in REAL_MODELS and installed(REAL_MODELS[name])


def bench_network(name: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """The model a bench row times: an installed real model's own weights by its short name (`skipcore models`),
    else a random model of that shape (`skipcore.models.random_models.BENCH_SHAPES`, which holds the real
    models' sizes too). Speed does not depend on the weights' values; a real model is there so the numbers are
    those of a model people use."""
    if uses_real_weights(name):
        from skipcore.models.loading import load_model

        return load_model(name, device=str(device), dtype=str(dtype).removeprefix("torch."))[0]
    from skipcore.models.random_models import bench_model

    return bench_model(name, dtype=dtype, device=str(device))


def bench_one(
    shape: str,
    batch_size: int,
    prompt_len: int,
    new_tokens: int,
    targets: list[float],
    device: torch.device,
    dtype: torch.dtype,
    repeats: int,
    compiled_generate: bool,
    bandwidth: float | None = None,
) -> list[dict]:
    from skipcore.adapters import adapter_for
    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.sampling import Sampling, TokenPicker
    from skipcore.measure.paired_timing import plausibility_flag, time_pairs
    from skipcore.schedule import Schedule, schedule_for_speedup

    model = bench_network(shape, dtype, device)
    weights = "real" if uses_real_weights(shape) else "random"  # what every row of it timed
    shapes = adapter_for(model).shapes  # sizes for the cost model, read once
    L = shapes.num_layers

    class _Tok:  # the engine only needs ids here; prompts are random token ids
        pad_token_id = 1
        eos_token_id = 2

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 1000, (batch_size, prompt_len), generator=gen).to(device)
    attn = torch.ones_like(ids)
    picker = TokenPicker(Sampling(), device)
    schedules = {"full": Schedule(L, "full")}
    for t in targets:
        schedules[f"skip {t:g}x"] = schedule_for_speedup(L, t, new_tokens, "linear", "skip", warmup_layers=1)

    def engine_for(static: bool | None = None) -> SkipEngine:
        # one engine per setting: each keeps its own static decoder, so graphs are captured in the warm-up only
        e = SkipEngine(model, _Tok(), model_name=shape, static=static)
        e.eos_ids = torch.tensor([-1], device=device)  # never stop early: every run makes new_tokens tokens
        return e

    def ours(engine: SkipEngine, sch: Schedule):
        _sync(device)
        t0 = time.perf_counter()
        out = engine.generate_batch(ids, attn, sch.layer_sets(new_tokens), picker)
        _sync(device)
        return sum(out.step_ms[1:]) / 1e3, time.perf_counter() - t0, out.cache.allocated_bytes()

    def hf(**kw):
        _sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=attn,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=1,
                **kw,
            )
        _sync(device)
        return time.perf_counter() - t0

    runners = {name: partial(ours, engine_for(), s) for name, s in schedules.items()}
    if device.type == "cuda":  # what the CUDA graphs buy: the same full-depth path without them
        runners["full (no graphs)"] = partial(ours, engine_for(static=False), schedules["full"])
    runners["generate()"] = lambda: (None, hf(), None)
    if compiled_generate:
        runners["generate() static+compile"] = lambda: (
            None,
            hf(cache_implementation="static"),
            None,  # transformers compiles a static-cache decode on CUDA
        )
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    peak_mem: dict[str, int] = {}
    for name, run in runners.items():  # warm-up (graph capture, compilation) outside the timings
        peak_mem[name] = weight_bytes + _peak_extra_memory(device, run)
    # Paired timing (skipcore.measure.paired_timing): each setting alternates with full depth, full first, `repeats`
    # times (the warm-up above already ran every runner once); ratios are medians of the pairs with an interval.
    last: dict[str, tuple] = {}

    def measure(name: str):
        def run() -> dict[str, float]:
            out = runners[name]()
            last[name] = out
            return {"decode": out[0] if out[0] is not None else float("nan"), "total": out[1]}

        return run

    rows = []
    for name in runners:
        pairs = time_pairs(measure("full"), measure(name), repeats, warmup=0)
        tot = pairs["total"]
        total = statistics.median(tot.candidate)
        row = {
            "model": shape,
            "weights": weights,
            "setting": name,
            "batch_size": batch_size,
            "prompt_len": prompt_len,
            "new_tokens": new_tokens,
            "tokens_per_s": batch_size * new_tokens / total,
            "seconds": total,
            "timing_runs": tot.runs,
            "vs_full_total": tot.median,
            "vs_full_total_lo": tot.lo,
            "vs_full_total_hi": tot.hi,
            "peak_memory_bytes": peak_mem[name] if device.type == "cuda" else None,
        }
        if last[name][0] is not None:  # our paths: decode-only timing and the schedule's theory
            sch = schedules.get(name, schedules["full"])
            dec = pairs["decode"]
            decode = statistics.median(dec.candidate)
            flops = _theory(shapes, sch, prompt_len, new_tokens)
            layer = sch.layer_speedup(new_tokens)  # no row ends early here: per token = per batch step
            row.update(
                decode_seconds=decode,
                decode_tokens_per_s=batch_size * (new_tokens - 1) / decode,
                kv_cache_allocated_bytes=last[name][2],
                kv_fraction_of_full=last[name][2] / last["full"][2],
                layer_speedup=layer,
                flops_speedup_decode=flops,
                measured_speedup_decode=dec.median,
                measured_speedup_decode_lo=dec.lo,
                measured_speedup_decode_hi=dec.hi,
                measured_over_layer_speedup=dec.median / layer,
                measured_over_flops_speedup=dec.median / flops,
                timing_flag=plausibility_flag(dec.median, layer, flops),
                weight_bytes=weight_bytes,
            )
            if bandwidth and sch.shape == "full":
                per_step = decode / (new_tokens - 1)
                row["roofline_fraction"] = _bytes_per_step(
                    model, shapes, batch_size, prompt_len, new_tokens
                ) / (bandwidth * per_step)
        rows.append(row)
    return rows


def _peak_extra_memory(device: torch.device, run) -> int:
    """Peak device memory a run allocates above what was already held (weights, other settings' buffers)."""
    if device.type != "cuda":
        run()
        return 0
    _sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    _sync(device)
    return torch.cuda.max_memory_allocated(device) - before


def _bytes_per_step(model, shapes, batch_size: int, prompt_len: int, new_tokens: int) -> float:
    """Bytes a full-depth decode step must read: every weight matrix once (embedding tables only by the rows
    looked up, so not at all unless tied to the head) plus the batch's K/V, averaged over the decode steps."""
    import skipcore.measure.costs as costs

    emb = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    head = id(model.get_output_embeddings().weight)
    seen, weights = set(), 0
    for p in model.parameters():
        if id(p) in seen or (id(p) in emb and id(p) != head):
            continue
        seen.add(id(p))
        weights += p.numel() * p.element_size()
    per_pos = costs.kv_bytes_per_position(shapes, model.dtype.itemsize)
    mean_ctx = prompt_len + new_tokens / 2
    return weights + shapes.num_layers * mean_ctx * per_pos * batch_size


def _theory(shapes, sch, prompt_len: int, new_tokens: int) -> float:
    """FLOPs speedup of the decode steps, by the cost model (LM head and attention included)."""
    import skipcore.measure.costs as costs

    L = shapes.num_layers
    budgets = sch.budgets(new_tokens)
    full = sum(costs.decode_flops(shapes, prompt_len, s, L) for s in range(1, new_tokens))
    ours = sum(costs.decode_flops(shapes, prompt_len, s, budgets[s]) for s in range(1, new_tokens))
    return full / ours


def mib(n: int | None) -> str:
    return f"{n / 2**20:.1f}" if n is not None else ""


def format_table(rows: list[dict]) -> str:
    """Markdown: medians of paired runs against full depth, with 95% intervals; a flagged timing gets a '*'.
    A real model's name timed with random weights of its shape (not installed) says so."""
    from skipcore.models.catalog import is_real_name

    head = (
        "| model | batch | new tokens | setting | tokens/s | vs full (total) [95%] | layer speedup "
        "| measured decode speedup [95%] | measured / layer | measured / FLOPs | KV allocated MiB | KV vs full "
        "| peak memory MiB | roofline |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        model = r["model"] + (
            " (random weights)" if r.get("weights") == "random" and is_real_name(r["model"]) else ""
        )

        def f(k: str, fmt: str = "{:.2f}", r: dict = r) -> str:
            return fmt.format(r[k]) if r.get(k) is not None else ""

        def ci(k: str, r: dict = r) -> str:
            if r.get(k) is None:
                return ""
            star = "*" if k == "measured_speedup_decode" and r.get("timing_flag") else ""
            return f"{r[k]:.2f} [{r[k + '_lo']:.2f}, {r[k + '_hi']:.2f}]{star}"

        lines.append(
            f"| {model} | {r['batch_size']} | {r['new_tokens']} | {r['setting']} | {r['tokens_per_s']:.1f} "
            f"| {ci('vs_full_total')} | {f('layer_speedup')} | {ci('measured_speedup_decode')} "
            f"| {f('measured_over_layer_speedup')} | {f('measured_over_flops_speedup')} "
            f"| {mib(r.get('kv_cache_allocated_bytes'))} | {f('kv_fraction_of_full', '{:.0%}')} "
            f"| {mib(r.get('peak_memory_bytes'))} "
            f"| {f('roofline_fraction', '{:.0%}')} |"
        )
    flagged = [
        f"- {r['setting']} (batch {r['batch_size']}): {r['timing_flag']}"
        for r in rows
        if r.get("timing_flag")
    ]
    return "\n".join(lines + (["", "Flagged timings:", *flagged] if flagged else []))


# -- the results file and its table ---------------------------------------------------------------------------
def results_header(device: torch.device, dtype: torch.dtype, bandwidth: float) -> dict:
    """What every results file says of the run: the machine, device, dtype, torch, time and memory bandwidth."""
    from skipcore.models.loading import hardware_name

    return {
        "machine": hardware_name(device),
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bandwidth_bytes_per_s": bandwidth,
    }


def write_results(
    out: Path, header: dict, rows: list[dict], done: int, total: int, written: list[str]
) -> None:
    """Replace the results file and its table (`out` with .md), each atomically; until the last setting both say
    they are partial. `written` holds the digests of the tables written so far, newest last.

    The JSON goes first and names the new table's digest and the one before it, so a bench stopped between the
    two writes still knows the table beside it as its own (and a rerun with --overwrite may replace it)."""
    stopped = (
        ""
        if done == total
        else f"Partial: {done} of {total} settings measured (the bench stopped or is still running).\n\n"
    )
    table = (
        f"Machine: {header['machine']} ({header['device']}, {header['dtype']}, torch {header['torch']})\n\n"
        + stopped
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


def own_table(out: Path, md: Path) -> bool:
    """The .md table beside a results file is the bench's own when the results file names its digest (the newest
    table or, for a bench stopped between its two writes, the one before)."""
    try:
        result = json.loads(out.read_text())
        recorded = {result.get("table_sha256"), result.get("previous_table_sha256")} - {None}
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    return file_digest(md) in recorded
