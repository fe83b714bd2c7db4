"""A bench results file in a few lines: one row per model, length and batch size with the ratios that matter,
then each of the GPU plan's targets (docs/gpu.md) met, missed or not measured, with the numbers it rests on.

This is what `scripts/gpu_check.sh` prints last, so the end of a GPU run's output (all a short lease may bring
back) holds its results, with its real stage's sweep (`real.csv` beside the results: the skip-aware SmolLM2's
speculative rows on E2E prompts), which the speculative targets are judged on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from skipcore.evaluate.bench.plan import FUSED, FUSED_FULL
from skipcore.evaluate.bench.results import row_flag
from skipcore.measure.summary import interval_text, speedup_text

ONE_B = ("llama-1b", "opt-1.3b")  # the 1B shapes the plan's targets speak of


def _groups(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """(model, new tokens, batch) -> setting -> row; a later stage's row of a setting replaces an earlier
    one."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["new_tokens"], r["batch_size"]), {})[r["setting"]] = r
    return groups


def _in_runs_dtype(r: dict, dtype: str | None) -> bool:
    """Whether a row ran in its run's `dtype` (full depth's; None: not known, every row), its attention too, not in
    float32 beside it: only such a row's tokens can be held to full depth's."""
    return dtype is None or r.get("dtype", dtype) == r.get("attention_dtype", dtype) == dtype


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return speedup_text(value, fmt) if value is not None else "-"


def _inverse(row: dict | None, key: str = "vs_full_total") -> float | None:
    """full depth over a setting: the setting's own ratio (full's time over its) turned round."""
    return 1 / row[key] if row and row.get(key) else None


def _over_compiled(row: dict, by: dict[str, dict]) -> float | None:
    """A row's speed over compiled `generate()` at its model, length and batch (`by`, the group's rows): its ratio
    over the compiled row's, both paired with unfused full depth; None where either is missing."""
    comp = by.get("generate() static+compile")
    return row["vs_full_total"] / comp["vs_full_total"] if comp and row.get("vs_full_total") else None


def summary_table(rows: list[dict], dtype: str | None = None) -> str:
    """Markdown, one line per model, length and batch size: full depth's speed and its gain over generate()
    (and the compiled one), over itself without graphs, and its roofline fraction; each skip target's measured
    share of its layer speedup; each speculative row's decode speedup and tokens per full pass; the token
    agreement that says lossless; KV and peak memory. `dtype`: the run's (rows in float32 beside a half-precision
    run are left out)."""
    head = (
        "| model | new tokens | batch | full tok/s | full / generate() | full / compiled generate() "
        "| graphs gain | roofline | skip: measured / layer | speculative: speedup (tokens per full pass) "
        "| same tokens as full | KV 4x / full | peak MiB (full) |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for (model, T, b), by in _groups(rows).items():
        full, gen, comp = by.get("full"), by.get("generate()"), by.get("generate() static+compile")
        skips = [r for s, r in by.items() if s.startswith("skip ") and not s.endswith(FUSED)]
        specs = [r for s, r in by.items() if s.startswith("speculative") and _in_runs_dtype(r, dtype)]
        # each speculative row's tokens against its own full depth's (the fused step's for a fused row)
        lossless = [r["same_tokens_as_full"] for r in specs + ([gen] if gen else [])]
        specs = [r for r in specs if not r["setting"].endswith(FUSED)]
        compiled = _num(_inverse(comp)) + (" (uncompiled)" if comp and not comp.get("compiled") else "")
        peak = full.get("peak_memory_bytes") if full else None
        graphless = by.get("full (no graphs)")
        lines.append(
            f"| {model} | {T} | {b} | {_num(full and full['tokens_per_s'], '{:.0f}')} "
            f"| {_num(_inverse(gen))}{_star(gen)} "
            f"| {compiled + _star(comp) if comp else '-'} "
            f"| {_num(_inverse(graphless, 'measured_speedup_decode'))}{_star(graphless)} "
            f"| {_num(full and full.get('roofline_fraction'), '{:.0%}')}{_star(full)} "
            f"| {' / '.join(_skip(r) for r in skips) or '-'} "
            f"| {', '.join(_spec(r) for r in specs) or '-'} "
            f"| {_num(min(lossless) if lossless else None, '{:.0%}')} "
            f"| {_num(by.get('skip 4x', {}).get('kv_fraction_of_full'), '{:.0%}')} "
            f"| {_num(peak / 2**20 if peak else None, '{:.0f}')} |"
        )
    return "\n".join(lines + _starred_note(lines))


def fused_table(rows: list[dict]) -> str:
    """Markdown, one line per model, length and batch size the fused step ran at: its full depth's speed, its gain
    over the unfused step (paired), the roofline fraction of each, its speed over compiled `generate()` (the ratio
    of two ratios, each paired with unfused full depth), each skip target's measured share of its FLOPs speedup
    over fused full depth, its speculative rows' tokens against fused full depth's, and the seconds its first
    runs took (compiling and capturing); '' where no row is fused."""
    head = (
        "| model | new tokens | batch | fused full tok/s | fused / full [95%] | roofline (full, fused) "
        "| fused / compiled generate() | fused skip: measured / FLOPs | fused speculative: speedup, same tokens "
        "| first runs s |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for (model, T, b), by in _groups(rows).items():
        fused = by.get(FUSED_FULL)
        if fused is None:
            continue
        full = by.get("full")
        mine = [r for s, r in by.items() if s.endswith(FUSED)]
        skips = [r for r in mine if r["setting"].startswith("skip ")]
        specs = [r for r in mine if r["setting"].startswith("speculative")]
        gain = interval_text(*(fused.get(f"measured_speedup_decode{e}") for e in ("", "_lo", "_hi")))
        gain += _star(fused)
        roof = " / ".join(_num(r and r.get("roofline_fraction"), "{:.0%}") + _star(r) for r in (full, fused))
        first = sum(r.get("first_run_seconds", 0.0) for r in mine)
        lines.append(
            f"| {model} | {T} | {b} | {_num(fused['tokens_per_s'], '{:.0f}')} | {gain} | {roof} "
            f"| {_num(_over_compiled(fused, by))}{_star(fused) or _star(by.get('generate() static+compile'))} "
            f"| {' / '.join(_skip(r, 'measured_over_flops_speedup') for r in skips) or '-'} "
            f"| {', '.join(_spec(r) + ', ' + _num(r['same_tokens_as_full'], '{:.0%}') for r in specs) or '-'} "
            f"| {first:.0f} |"
        )
    return "\n".join(lines + _starred_note(lines)) if len(lines) > 2 else ""


def _skip(r: dict, key: str = "measured_over_layer_speedup") -> str:
    return f"{r['setting'].removeprefix('skip ').removesuffix(FUSED)}: {_num(r.get(key))}{_star(r)}"


def _spec(r: dict) -> str:
    said = f"{_num(r['measured_speedup_decode'])}x{_star(r)}"
    return f"k={r['draft_tokens']}: {said} ({_num(r['tokens_per_full_pass'])})"


def _star(row: dict | None) -> str:
    """'*' after a value timed in a flagged row (`_flag`), as the results table and the targets mark it."""
    return "*" if _flag(row) else ""


def _starred_note(lines: list[str]) -> list[str]:
    """The line under a table (`lines`, its header first) that holds a starred value: what the star means and where
    the reasons are."""
    if not any("*" in line for line in lines[2:]):
        return []
    return [
        "",
        "A value marked * is from a flagged timing, no measurement to judge by (the results table says why).",
    ]


def _flag(row: dict | None) -> str:
    """Why a row's timing cannot be believed, as its table marks it (`results.row_flag`); '' where it can, or
    where there is no row."""
    return row_flag(row) if row else ""


def _target(
    rows: list[dict],
    text: str,
    pick: Callable[[dict], bool],
    value: Callable[[dict], float | None],
    ok,
    flag: Callable[[dict], str] | None = _flag,
) -> str:
    """One target: 'met', 'missed', 'not judged' or 'not measured', and each row's value it was judged on. A value
    whose timing is flagged (`flag`; None for a target no timing measures) is marked * and never judged on: a
    noisy ratio above its physics read as a met target; where every value is flagged the target is not judged."""
    found = [(r, value(r)) for r in rows if pick(r)]
    found = [(r, v) for r, v in found if v is not None]
    if not found:
        return f"- not measured: {text}"
    flagged = [bool(flag and flag(r)) for r, _ in found]
    values = [v for _, v in found]
    if len(found) > 6:  # many rows: their range
        said = f"{len(found)} rows, from {min(values):.2f} to {max(values):.2f}"
        said += f", {sum(flagged)} of them flagged*" if any(flagged) else ""
    else:
        said = ", ".join(
            f"{r['model']} b{r['batch_size']} T{r['new_tokens']} {r['setting']}: {v:.2f}{'*' if f else ''}"
            for (r, v), f in zip(found, flagged, strict=True)
        )
    judged = [v for (_, v), f in zip(found, flagged, strict=True) if not f]
    if any(flagged):
        said += "; * timing flagged, not judged on"
    if not judged:
        return f"- not judged, every timing flagged: {text} ({said})"
    return f"- {'met' if all(ok(v) for v in judged) else 'missed'}: {text} ({said})"


def target_lines(rows: list[dict], dtype: str | None = None) -> list[str]:
    """The GPU plan's targets (docs/gpu.md), each judged on the rows that measure it (a speculative one only on
    rows in the run's `dtype`)."""
    groups = _groups(rows)

    def group(r: dict) -> dict[str, dict]:
        return groups[(r["model"], r["new_tokens"], r["batch_size"])]

    def full_over(r: dict, setting: str) -> float | None:
        return _inverse(group(r).get(setting))

    def is_1b(r: dict) -> bool:
        return r["model"] in ONE_B and r["batch_size"] == 1 and r["setting"] == "full"

    def skip(r: dict) -> bool:
        return (
            r["setting"].startswith("skip ")
            and r["batch_size"] in (1, 8)
            and not r["setting"].endswith(FUSED)
        )

    def fused_skip(r: dict) -> bool:
        return r["setting"].startswith("skip ") and r["batch_size"] in (1, 8) and r["setting"].endswith(FUSED)

    def fused_1b(b: int) -> Callable[[dict], bool]:
        return lambda r: r["model"] in ONE_B and r["batch_size"] == b and r["setting"] == FUSED_FULL

    def over_compiled(r: dict) -> float | None:
        return _over_compiled(r, group(r))

    first_runs: dict[str, float] = {}  # model -> seconds of its fused rows' first runs (compiling, capturing)
    for r in rows:
        if r["setting"].endswith(FUSED) and r.get("first_run_seconds") is not None:
            first_runs[r["model"]] = first_runs.get(r["model"], 0.0) + r["first_run_seconds"]

    def lossless(r: dict) -> bool:
        return "speculative" in r["setting"] and _in_runs_dtype(r, dtype)

    def spec(b: int) -> Callable[[dict], bool]:
        return lambda r: "smollm2" in r["model"] and r["batch_size"] == b and lossless(r)

    return [
        _target(rows, "full depth >= 1.5x generate() at batch 1 on the 1B shapes", is_1b,
                lambda r: full_over(r, "generate()"), lambda v: v >= 1.5,
                lambda r: _flag(group(r).get("generate()"))),
        _target(rows, "full depth >= 60% of the memory roofline at batch 1 on the 1B shapes", is_1b,
                lambda r: r.get("roofline_fraction"), lambda v: v >= 0.6),
        _target(rows, "static skip 2x-4x >= 0.85x of its layer speedup at batch 1 and 8", skip,
                lambda r: r.get("measured_over_layer_speedup"), lambda v: v >= 0.85),
        _target(rows, "speculative on the skip-aware SmolLM2 >= 1.5x full depth at batch 1", spec(1),
                lambda r: r.get("measured_speedup_decode"), lambda v: v >= 1.5),
        _target(rows, "speculative on the skip-aware SmolLM2 >= 1.2x full depth at batch 8", spec(8),
                lambda r: r.get("measured_speedup_decode"), lambda v: v >= 1.2),
        _target(rows, "speculative is lossless (the tokens of full depth)", lossless,
                lambda r: r.get("same_tokens_as_full"), lambda v: v == 1, None),
        _target(rows, "KV under a 4x schedule <= 40% of full depth's at 512 new tokens",
                lambda r: r["setting"] == "skip 4x" and r["new_tokens"] == 512,
                lambda r: r.get("kv_fraction_of_full"), lambda v: v <= 0.4, None),
        _target(rows, "a speculative round <= 1.3x a full-depth step plus its drafts at their layer share "
                "(random weights)", lambda r: r.get("round_over_plan") is not None and r.get("weights") == "random",
                lambda r: r.get("round_over_plan"), lambda v: v <= 1.3),
        _target(rows, "the fused step's full depth >= 60% of the memory roofline at batch 1 on the 1B shapes",
                fused_1b(1), lambda r: r.get("roofline_fraction"), lambda v: v >= 0.6),
        _target(rows, "the fused step's full depth >= 50% of the memory roofline at batch 8 on the 1B shapes",
                fused_1b(8), lambda r: r.get("roofline_fraction"), lambda v: v >= 0.5),
        _target(rows, "the fused step's full depth >= 2x compiled generate() at batch 1 on the 1B shapes",
                fused_1b(1), over_compiled, lambda v: v >= 2.0,
                lambda r: _flag(r) or _flag(group(r).get("generate() static+compile"))),
        _target(rows, "fused skip 2x-4x >= 0.95x of its FLOPs speedup over fused full depth at batch 1 and 8",
                fused_skip, lambda r: r.get("measured_over_flops_speedup"), lambda v: v >= 0.95),
        _target(rows, "the fused step's first runs (compiling and capturing) under a minute per model shape",
                lambda r: r["setting"] == FUSED_FULL and r["model"] in first_runs,
                lambda r: first_runs[r["model"]], lambda v: v < 60, None),
    ]  # fmt: skip


REAL_SWEEP = "real.csv"  # the GPU check's real stage writes its sweep's rows here, beside the results file


def real_rows(path: str | Path) -> list[dict]:
    """A sweep's speculative rows (a `skipcore sweep` CSV) as the targets read a bench row: the model marked as
    run on the sweep's prompts, the draft schedule's target in the setting, its measured decode speedup against
    full depth, and the share of prompts whose text is full depth's as its agreement."""
    import pandas as pd

    table = pd.read_csv(path)
    rows = []
    for r in table[table["policy"] == "speculative"].to_dict("records"):
        rows.append(
            {
                "model": f"{r['model']} (E2E prompts)",
                "new_tokens": int(r["max_new_tokens"]),
                "batch_size": int(r["batch_size"]),
                "setting": f"speculative k={int(r['draft_tokens'])} ({r['target_speedup']:g}x drafts)",
                "measured_speedup_decode": r["wall_speedup_decode"],
                "measured_speedup_decode_lo": r["wall_speedup_decode_lo"],
                "measured_speedup_decode_hi": r["wall_speedup_decode_hi"],
                "tokens_per_full_pass": r["tokens_per_full_pass"],
                "same_tokens_as_full": r["same_as_full_depth"],
                "bleu": r["bleu"],
            }
        )
    return rows


def real_table(rows: list[dict]) -> str:
    """Markdown, one line per speculative row of the real stage's sweep."""
    head = (
        "| model | batch | setting | BLEU | tokens per full pass | measured decode speedup [95%] "
        "| prompts with full depth's text |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        measured = interval_text(*(r[f"measured_speedup_decode{end}"] for end in ("", "_lo", "_hi")))
        lines.append(
            f"| {r['model']} | {r['batch_size']} | {r['setting']} | {r['bleu']:.1f} | "
            f"{r['tokens_per_full_pass']:.2f} | {measured} | {r['same_tokens_as_full']:.0%} |"
        )
    return "\n".join(lines)


def report(path: str | Path) -> str:
    """A results file's summary table and targets, under its machine line; one line where there is no file."""
    from skipcore.evaluate.bench.results import machine_line

    p = Path(path)
    if not p.is_file():
        return f"no results in {p}"
    result = json.loads(p.read_text())
    done = (
        "" if result["complete"] else f" (partial: {result['settings_done']} of {result['settings_total']})"
    )
    real_csv = p.with_name(REAL_SWEEP)
    real = real_rows(real_csv) if real_csv.is_file() else []
    drafts = ["", f"Real drafts ({REAL_SWEEP}):", "", real_table(real)] if real else []
    fused = fused_table(result["rows"])
    fused_lines = ["", "The fused step:", "", fused] if fused else []
    return "\n".join(
        [
            machine_line(result) + done,
            "",
            summary_table(result["rows"], result["dtype"]),
            *drafts,
            *fused_lines,
            "",
            "Targets:",
            *target_lines(result["rows"] + real, result["dtype"]),
        ]
    )
