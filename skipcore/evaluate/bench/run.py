"""`python -m skipcore bench`: wall-clock tokens/s of our full-depth, skip and speculative paths against
`generate()`.

Everything is measured in one run and reported as ratios (each setting against full depth), since shared
machines are noisy: each measurement is repeated with the settings interleaved and the median kept. Models are
randomly initialised in the shape of public checkpoints (speed does not depend on the weights; no download),
or a real model's own weights. A plan (`BenchPlan`) is checked before any model is built (`check_plan`), and
the results file and its table are rewritten after every setting (`run_plan`), so a stopped bench keeps what
it measured."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from skipcore.evaluate.bench.plan import (
    ATTENTION_FLOAT32,
    FLOAT32_KINDS,
    FUSED,
    FUSED_FULL,
    SPECULATIVE_KINDS,
    BenchPlan,
    device_notes,
    skip_schedule,
    weights_of,
)
from skipcore.evaluate.bench.results import (
    each_once,
    format_table,
    machine_line,
    results_header,
    write_results,
)
from skipcore.files import file_digest
from skipcore.kernels.precision import dtype_name


def bench_network(name: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """The model a bench row times: an installed real model's own weights by its short name (`skipcore
    models`), a model folder's (a fine-tune), else a random model of that shape
    (`skipcore.models.random_models`, which holds the real models' sizes too). Speed does not depend on the
    weights' values; a real model is there so the numbers are those of a model people use, and a skip-aware
    fine-tune so speculative rows draft as well as it does."""
    if weights_of(name) == "random":
        from skipcore.models.random_models import bench_model

        return bench_model(name, dtype=dtype, device=str(device))
    from skipcore.models.loading import load_model

    return load_model(name, device=str(device), dtype=dtype_name(dtype))[0]


@dataclass
class _Run:
    """One timed run of a setting: seconds in all (and in the decode steps, our paths), KV bytes allocated,
    the tokens made (B, T), and tokens per full-depth pass where the setting's passes are at full depth."""

    total: float
    tokens: torch.Tensor
    decode: float | None = None
    kv_bytes: int | None = None
    per_full_pass: float | None = None
    # a speculative run's rounds after the prefill, and a round's draft passes as full-depth steps by their
    # layer share (the sum of a round's draft layers over L, averaged over its rounds)
    rounds: int | None = None
    draft_share: float | None = None


def bench_one(
    plan: BenchPlan,
    name: str,
    batch_size: int,
    new_tokens: int,
    device: torch.device,
    dtype: torch.dtype,
    bandwidth: float | None = None,
    read_bandwidth: float | None = None,
) -> list[dict]:
    """Every setting of `plan` for one model, generation length and batch size, each timed in alternation with
    full depth (`skipcore.measure.paired_timing`) after a warm-up run of each: one row per setting."""
    from skipcore.adapters import fused_copy_bytes, shapes_from_config
    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.sampling import Sampling, TokenPicker
    from skipcore.measure.paired_timing import runs_flag, time_pairs
    from skipcore.policies.speculative import RoundPlan, SpeculativePolicy
    from skipcore.schedule import Schedule

    model = bench_network(name, dtype, device)
    shapes = shapes_from_config(model.config)  # sizes for the cost model, read once
    L, P, T, kinds = shapes.num_layers, plan.prompt_len, new_tokens, plan.settings

    class _Tok:  # the engine only needs ids here; prompts are random token ids
        pad_token_id = 1
        eos_token_id = 2

    gen = torch.Generator().manual_seed(0)
    vocab = min(1000, model.get_input_embeddings().num_embeddings)
    ids = torch.randint(4, vocab, (batch_size, P), generator=gen).to(device)
    attn = torch.ones_like(ids)
    picker = TokenPicker(Sampling(), device)

    def engine_for(
        static: bool, net: torch.nn.Module = model, attention=None, fused: bool = False
    ) -> SkipEngine:
        # one engine per setting: each keeps its own static decoder, so graphs are captured (and the fused step's
        # bodies compiled) in the warm-up only
        e = SkipEngine(net, _Tok(), model_name=name, static=static, attention_dtype=attention, fused=fused)
        e.eos_ids = torch.tensor([-1], device=device)  # never stop early: every run makes new_tokens tokens
        return e

    def ours(engine: SkipEngine, policy, full_passes: bool) -> _Run:
        _sync(device)
        t0 = time.perf_counter()
        out = engine.generate_batch(ids, attn, policy, picker, max_new_tokens=T)
        _sync(device)
        total = time.perf_counter() - t0
        # each row's decode tokens over the rounds after the prefill it needed (one per step without drafts)
        row_rounds = out.token_steps().max(1).values.clamp_min(1).float()
        per_pass = float(((T - 1) / row_rounds).mean()) if full_passes and T > 1 else None
        decode = sum(out.step_ms[1:]) / 1e3
        drafts = [d.draft_layers for d in out.details[1:] if isinstance(d, RoundPlan)]
        share = sum(map(sum, drafts)) / (len(drafts) * L) if drafts else None
        kv = out.cache.allocated_bytes()
        return _Run(total, out.tokens, decode, kv, per_pass, len(drafts) or None, share)

    def hf(net=model, **kw) -> _Run:
        _sync(device)
        t0 = time.perf_counter()
        # T tokens, as the engine makes them (it never stops either): an end token no token is, rather than
        # min_new_tokens, which masks the model's own EOS and so picks other tokens than full depth's
        never = net.get_output_embeddings().weight.shape[0]
        with torch.inference_mode():
            out = net.generate(
                ids,
                attention_mask=attn,
                max_new_tokens=T,
                do_sample=False,
                pad_token_id=1,
                eos_token_id=never,
                **kw,
            )
        _sync(device)
        return _Run(time.perf_counter() - t0, out[:, P:].cpu())

    full = Schedule(L, "full")
    # the schedules whose theory a row is held to: the static-steps path's (graphs off is another path, not
    # less work)
    schedules, runners = {"full": full}, {"full": partial(ours, engine_for(plan.static_steps), full, True)}
    drafted: dict[str, int] = {}  # speculative setting -> tokens a row drafts per round
    # the setting each is paired with where it is not full depth: the fused step's skips and drafts with its own
    # full depth, so their speedups are over the faster step
    reference: dict[str, str] = {}
    fused = "fused" in kinds
    if "no-graphs" in kinds:  # what the CUDA graphs buy: the same full-depth path without them
        runners["full (no graphs)"] = partial(ours, engine_for(False), full, True)
    if fused:  # the fused step's full depth, paired with the unfused one: what fusing buys
        runners[FUSED_FULL] = partial(ours, engine_for(True, fused=True), full, True)
    for t in plan.targets if "skip" in kinds or fused else ():
        s = skip_schedule(L, t, T)
        if "skip" in kinds:
            schedules[f"skip {t:g}x"] = s
            runners[f"skip {t:g}x"] = partial(ours, engine_for(plan.static_steps), s, False)
        if fused:
            schedules[f"skip {t:g}x{FUSED}"] = s
            runners[f"skip {t:g}x{FUSED}"] = partial(ours, engine_for(True, fused=True), s, False)
            reference[f"skip {t:g}x{FUSED}"] = FUSED_FULL
    # float32 attention beside the run's own (a half-precision run on a CPU): full depth and speculative rows
    attention32 = ATTENTION_FLOAT32 in kinds and dtype != torch.float32 and device.type == "cpu"
    attention_of = {}  # setting -> its attention dtype where it is not the model's
    if attention32:
        runners["full (float32 attention)"] = partial(
            ours, engine_for(False, attention="float32"), full, True
        )
        attention_of["full (float32 attention)"] = torch.float32
    # the model in float32 beside a half-precision run's: what the half precision buys over the exact mode
    in_float32 = bool(set(FLOAT32_KINDS) & set(kinds)) and dtype != torch.float32
    model32 = bench_network(name, torch.float32, device) if in_float32 else None
    nets = {}  # setting -> its model where it is not the run's
    drafts = skip_schedule(L, plan.draft_target, T) if SPECULATIVE_KINDS & set(kinds) else None
    for k in plan.draft_tokens if drafts is not None else ():
        setting = f"speculative k={k} ({plan.draft_target:g}x drafts)"
        policy = SpeculativePolicy(drafts, draft_tokens=k)
        if "speculative" in kinds:  # its rounds on the fixed-shape decoder where full depth's steps are
            runners[setting] = partial(ours, engine_for(plan.static_steps), policy, True)
            drafted[setting] = k
        if "speculative" in kinds and fused:
            runners[setting + FUSED] = partial(ours, engine_for(True, fused=True), policy, True)
            drafted[setting + FUSED], reference[setting + FUSED] = k, FUSED_FULL
        if "speculative" in kinds and attention32:
            in_mode = setting + " float32 attention"
            runners[in_mode] = partial(ours, engine_for(False, attention="float32"), policy, True)
            drafted[in_mode], attention_of[in_mode] = k, torch.float32
        if "speculative-float32" in kinds and model32 is not None:
            runners[setting + " float32"] = partial(
                ours, engine_for(plan.static_steps, model32), policy, True
            )
            drafted[setting + " float32"], nets[setting + " float32"] = k, model32
    if "generate" in kinds:
        runners["generate()"] = hf
    if "generate-float32" in kinds and model32 is not None:
        runners["generate() float32"], nets["generate() float32"] = partial(hf, model32), model32
    if "compiled" in kinds:  # transformers compiles a static-cache decode on CUDA
        runners["generate() static+compile"] = partial(hf, cache_implementation="static")
    last: dict[str, _Run] = {}

    def measure(setting: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            last[setting] = out = runners[setting]()
            return {"decode": out.decode if out.decode is not None else float("nan"), "total": out.total}

        return run

    peak_mem, first_run = {}, {}
    for s in runners:  # warm-ups: graphs captured and the fused step's bodies compiled here
        t0 = time.perf_counter()
        # the fused settings' model holds the fused step's concatenated weights too (made with their engines)
        fused_bytes = fused_copy_bytes(model) if s.endswith(FUSED) else 0
        peak_mem[s] = _weight_bytes(nets.get(s, model)) + fused_bytes + _peak_extra_memory(device, measure(s))
        first_run[s] = time.perf_counter() - t0
    compiled = getattr(model, "_compiled_call", None) is not None  # whether transformers compiled generate()
    rows = []
    # Paired timing: each setting alternates with full depth, full first, `repeats` times (the warm-up above
    # ran every runner once); ratios are medians of the pairs with an interval.
    for setting in runners:
        if setting == "full" and "full" not in kinds:
            continue  # full depth runs as the reference only
        ref = reference.get(setting, "full")
        pairs = time_pairs(measure(ref), measure(setting), plan.repeats, warmup=0)
        tot, run = pairs["total"], last[setting]
        total = statistics.median(tot.candidate)
        row = {
            "model": name,
            "weights": weights_of(name),
            "setting": setting,
            "batch_size": batch_size,
            "prompt_len": P,
            "new_tokens": T,
            "tokens_per_s": batch_size * T / total,
            "seconds": total,
            "timing_runs": tot.runs,
            # each side's timed runs in order (the paired setting's: `paired_with`): the ratios are recomputable
            "seconds_runs": list(tot.candidate),
            "paired_seconds_runs": list(tot.reference),
            "vs_full_total": tot.median,
            "vs_full_total_lo": tot.lo,
            "vs_full_total_hi": tot.hi,
            "paired_with": ref,
            "same_tokens_as_full": float((run.tokens == last[ref].tokens.cpu()).float().mean()),
            "first_run_seconds": first_run[setting],
            "dtype": dtype_name(nets.get(setting, model).dtype),
            "attention_dtype": dtype_name(attention_of.get(setting, nets.get(setting, model).dtype)),
            "peak_memory_bytes": peak_mem[setting] if device.type == "cuda" else None,
        }
        if setting == "generate() static+compile":
            row["compiled"] = compiled
        # the total ratio's own flag (generate() has no other); a decode ratio's flag below says this one's too
        row["timing_flag"] = runs_flag(tot.median, tot.runs)
        if run.decode is not None:
            row.update(_decode_columns(pairs["decode"], run, last[ref], schedules.get(setting), shapes, P, T))
            net = nets.get(setting, model)
            row.update(weight_bytes=_weight_bytes(net), tokens_per_full_pass=run.per_full_pass)
            if setting in drafted:
                row["draft_tokens"] = drafted[setting]
            if run.rounds and T > 1:  # a round against a full-depth step plus its drafts at their layer share
                full_step = statistics.median(pairs["decode"].reference) / (T - 1)
                row["rounds"] = run.rounds
                row["round_over_plan"] = (
                    row["decode_seconds"] / run.rounds / (full_step * (1 + run.draft_share))
                )
            if (
                bandwidth and setting in ("full", "full (no graphs)", FUSED_FULL) and T > 1
            ):  # a decode step to hold to it
                per_step = row["decode_seconds"] / (T - 1)
                step_bytes = bytes_per_step(model, shapes, batch_size, P, T)
                row["roofline_fraction"] = step_bytes / (bandwidth * per_step)
                if read_bandwidth:
                    row["read_roofline_fraction"] = step_bytes / (read_bandwidth * per_step)
        rows.append(row)
    return rows


def _decode_columns(dec, run: _Run, full: _Run, sch, shapes, prompt_len: int, new_tokens: int) -> dict:
    """Our paths' decode-only timing and, for a schedule, its theory: layer and FLOPs speedups, and whether
    the measured speedup is plausible for them (a speculative round's work is not a schedule's: no theory
    there)."""
    from skipcore.measure.paired_timing import plausibility_flag, runs_flag

    decode = statistics.median(dec.candidate)
    cols = {
        "decode_seconds": decode,
        "decode_seconds_runs": list(dec.candidate),
        "paired_decode_seconds_runs": list(dec.reference),
        "decode_tokens_per_s": run.tokens.shape[0] * (new_tokens - 1) / decode if decode > 0 else math.nan,
        "kv_cache_allocated_bytes": run.kv_bytes,
        "kv_fraction_of_full": run.kv_bytes / full.kv_bytes,
        "measured_speedup_decode": dec.median,
        "measured_speedup_decode_lo": dec.lo,
        "measured_speedup_decode_hi": dec.hi,
    }
    if new_tokens < 2:
        return cols
    if sch is None:  # no theory to hold it to: flagged where it is no measurement at all
        return {**cols, "timing_flag": runs_flag(dec.median, dec.runs)}
    flops = _theory(shapes, sch, prompt_len, new_tokens)
    layer = sch.layer_speedup(new_tokens)  # no row ends early here: per token = per batch step
    return {
        **cols,
        "layer_speedup": layer,
        "flops_speedup_decode": flops,
        "measured_over_layer_speedup": dec.median / layer,
        "measured_over_flops_speedup": dec.median / flops,
        "timing_flag": plausibility_flag(dec.median, layer, flops, dec.runs),
    }


def _weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fastest(device: torch.device, run: Callable[[], object]) -> float:
    """Seconds of the fastest of five runs of `run` on `device`, after one untimed run."""
    run()
    _sync(device)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_bandwidth(device: torch.device, mib: int = 1024) -> float:
    """Device memory bandwidth in bytes/s from a large copy (bytes read + bytes written over the best of
    five), the roofline's denominator. On a CPU it uses torch's threads, as the decode it is compared with
    does."""
    a = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    return 2 * a.numel() * 4 / _fastest(device, lambda: b.copy_(a))


def measure_read_bandwidth(device: torch.device, mib: int = 1024) -> float:
    """Device memory bandwidth in bytes/s for reading alone: a sum over a large tensor (bytes read over the best
    of five). A decode step at small batch only reads (the weights, the K/V), and on a CPU a stream of reads on
    torch's threads runs slower than a copy counts (docs/results.md has both), so this is the roofline a CPU
    decode is held to."""
    a = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    return a.numel() * 4 / _fastest(device, a.sum)


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


def bytes_per_step(model, shapes, batch_size: int, prompt_len: int, new_tokens: int) -> float:
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
    sets = sch.layer_sets(new_tokens)
    full = sum(costs.decode_flops(shapes, prompt_len, s, L) for s in range(1, new_tokens))
    ours = sum(costs.decode_flops(shapes, prompt_len, s, sets[s]) for s in range(1, new_tokens))
    return full / ours


def already_measured(plan: BenchPlan, extend: dict | None) -> list[dict]:
    """The runs of `plan` that the results it extends measured already (each as `plan.run_ids` names it)."""
    measured = (extend or {}).get("runs_measured", [])
    return [run_id for run_id in plan.run_ids() if run_id in measured]


def _kept(extend: dict) -> tuple[dict, list[dict], list[dict], list[dict], list[str]]:
    """What a run that adds to the results `extend` keeps of them: their machine header and bandwidths, rows,
    planned and measured runs, and notes."""
    keep = ("machine", "device", "dtype", "torch", "cuda", "driver", "created", "bandwidth_bytes_per_s")
    keep += ("read_bandwidth_bytes_per_s",)
    header = {k: extend.get(k) for k in keep}
    rows, notes = list(extend["rows"]), list(extend.get("notes", []))
    return header, rows, list(extend["runs_planned"]), list(extend["runs_measured"]), notes


def write_table_again(out: Path, extend: dict) -> None:
    """The table of the results `extend` (read from `out`) written again beside them from their rows, with the
    results file that names it: a results file moved or copied without its table is whole again."""
    header, rows, planned, measured, notes = _kept(extend)
    write_results(out, header, rows, planned, measured, [], notes)


def run_plan(
    plan: BenchPlan,
    device: torch.device,
    dtype: torch.dtype,
    out: Path | None,
    extend: dict | None = None,
    show: Callable[[str], None] = print,
) -> list[dict]:
    """Time every setting of `plan`, show each group's table and, after every group, rewrite `out` and its
    table (a stopped bench keeps what it measured). `extend`: the results of an earlier run this one adds to
    (`results.results_to_extend`), whose machine header and bandwidth it keeps; a run it measured already is not
    measured again (its rows would be there twice: `already_measured`)."""
    if extend is None:
        # the roofline's denominator on either device: a decode step at small batch reads every weight once
        header = results_header(device, dtype, measure_bandwidth(device), measure_read_bandwidth(device))
        rows, planned, measured, notes = [], [], [], []
    else:
        header, rows, planned, measured, notes = _kept(extend)
    show(machine_line(header))  # a timing means nothing without the machine, its threads and the dtype
    planned = each_once(planned + plan.run_ids())  # the file's plans: what it is complete against
    notes += [n for n in device_notes(plan, device) if n not in notes]
    # digests of the tables beside the results, newest last: a replaced one was checked as the bench's own
    # before
    md = out.with_suffix(".md") if out is not None else None
    written = [file_digest(md)] if md is not None and md.is_file() else []
    done = already_measured(plan, extend)
    for (m, T, b), run_id in zip(plan.runs(), plan.run_ids(), strict=True):
        if run_id in done:
            continue
        new = bench_one(
            plan,
            m,
            b,
            T,
            device,
            dtype,
            bandwidth=header["bandwidth_bytes_per_s"],
            read_bandwidth=header.get("read_bandwidth_bytes_per_s"),
        )
        rows += new
        measured = each_once([*measured, run_id])
        if out is not None:  # after every setting: a stopped bench keeps what it measured
            write_results(out, header, rows, planned, measured, written, notes)
        show(format_table(new))
    return rows
