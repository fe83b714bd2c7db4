"""The bench's results file and its Markdown table: what the run says of its machine, rewritten after every
setting so a stopped bench keeps what it measured, and added to by later runs of a plan (`--append`).

The file and the table are the bench's own: the results file names the digest of the table beside it, so a
rerun replaces (or adds to) only a table it wrote itself, never a user's file of that name.

Whether a file is complete is read off what it holds: the runs its plans asked for (`runs_planned`, each named by
`BenchPlan.run_ids`) against the runs it holds measurements of (`runs_measured`), so a later stage that measures
what a stopped bench left makes the file complete, and one that adds other runs does not."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

from skipcore.errors import UserError, first_line
from skipcore.evaluate.columns import check_columns, kind_in_words, number_columns, text_columns
from skipcore.files import atomic_write, check_companion, file_digest, parse_json
from skipcore.kernels.precision import dtype_name
from skipcore.measure.summary import speedup_text
from skipcore.traces.files import json_plain

# what each column of a results file's rows holds (`skipcore.evaluate.columns`): the rows an --append run keeps and
# tables with its own are checked against it before any timing, by kind and by value (the numbers a bench writes: a
# batch of 0 or a speedup of -5 is a hand edit). Every row names its model and setting, its batch size, length and
# speed (the table's first columns); a value a row has nothing for is missing (null, NaN). Other columns
# (`compiled`) are not checked.
RATIOS = ("vs_full_total", "measured_speedup_decode")  # each with its 95% interval (_lo, _hi)
ROW_COLUMNS = {
    **text_columns("model", "setting", required=True),
    **text_columns("weights", "paired_with", "timing_flag", "dtype", "attention_dtype"),
    **number_columns("batch_size", "new_tokens", required=True, at_least=1, whole=True),
    **number_columns("tokens_per_s", required=True, above=0),
    **number_columns("prompt_len", "timing_runs", "draft_tokens", at_least=1, whole=True),
    **number_columns("weight_bytes", "peak_memory_bytes", "kv_cache_allocated_bytes", at_least=0, whole=True),
    **number_columns("seconds", "first_run_seconds", "decode_seconds", "decode_tokens_per_s", at_least=0),
    **number_columns(*(f"{k}{end}" for k in RATIOS for end in ("", "_lo", "_hi")), above=0),
    **number_columns("same_tokens_as_full", at_least=0, at_most=1),
    **number_columns("layer_speedup", "flops_speedup_decode", "tokens_per_full_pass", above=0),
    **number_columns("measured_over_layer_speedup", "measured_over_flops_speedup", above=0),
    **number_columns("kv_fraction_of_full", "roofline_fraction", "read_roofline_fraction", at_least=0),
}
# the row columns a bench computes from timed seconds, NaN where nothing was timed (a row of one new token has no
# decode step): JSON has no NaN, so the file holds null there (JavaScript's reader refuses a bare NaN) and a run that
# adds to the file reads NaN again (its table says 'n/a' there, as the run that measured it did, not a blank)
TIMED_COLUMNS = (
    *(f"{k}{end}" for k in RATIOS for end in ("", "_lo", "_hi")),
    "decode_tokens_per_s",
    "measured_over_layer_speedup",
    "measured_over_flops_speedup",
    "round_over_plan",
    "roofline_fraction",
    "read_roofline_fraction",
)
# the header fields a run that adds to the file computes with (its rooflines)
HEADER_COLUMNS = number_columns("bandwidth_bytes_per_s", "read_bandwidth_bytes_per_s", above=0)


def gpu_driver() -> str | None:
    """The NVIDIA driver's version as `nvidia-smi` reports it, or None where there is none (a CPU machine)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def results_header(
    device: torch.device, dtype: torch.dtype, bandwidth: float, read_bandwidth: float | None = None
) -> dict:
    """What every results file says of the run: the machine (on a GPU its name, driver and CUDA version),
    device, dtype, torch, time and memory bandwidth (a copy's, and reading alone). A timing means nothing
    without them."""
    from skipcore.models.loading import hardware_name

    cuda = device.type == "cuda"
    return {
        "machine": hardware_name(device),
        "device": str(device),
        "dtype": dtype_name(dtype),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "driver": gpu_driver() if cuda else None,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bandwidth_bytes_per_s": bandwidth,
        "read_bandwidth_bytes_per_s": read_bandwidth,
    }


def machine_line(header: dict) -> str:
    """'Machine: NVIDIA H100 (cuda, bfloat16, torch 2.11.0+cu130, CUDA 13.0, driver 580.159.04)'."""
    parts = [header["device"], header["dtype"], f"torch {header['torch']}"]
    parts += [f"CUDA {header['cuda']}"] if header.get("cuda") else []
    parts += [f"driver {header['driver']}"] if header.get("driver") else []
    return f"Machine: {header['machine']} ({', '.join(parts)})"


def mib(n: int | None) -> str:
    """Bytes in MiB for the table: one decimal from 1 MiB, two significant digits under it (one decimal would read
    a tiny model's few KiB of cache as 0.0, an empty one, and 56 KiB as 0.1, nearly twice it)."""
    if n is None:
        return ""
    v = n / 2**20
    return f"{v:.1f}" if v >= 1 or n == 0 else f"{v:.2g}"


def format_table(rows: list[dict]) -> str:
    """Markdown: medians of paired runs against full depth (or the setting a row names as `paired_with`, said
    under the table), with 95% intervals; a flagged timing gets a '*'.
    A real model's name timed with random weights of its shape (not installed) says so."""
    from skipcore.models.catalog import is_real_name

    # the prompt length where the rows have several (a file added to with another --prompt-len), else said by none
    prompts = len({r.get("prompt_len") for r in rows}) > 1
    head = (
        f"| model | batch |{' prompt tokens |' if prompts else ''} new tokens | setting | tokens/s "
        "| vs full (total) [95%] | layer speedup "
        "| measured decode speedup [95%] | measured / layer | measured / FLOPs | tokens / full pass "
        "| same tokens as full | KV allocated MiB | KV vs full | peak memory MiB | roofline |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        model = r["model"] + (
            " (random weights)" if r.get("weights") == "random" and is_real_name(r["model"]) else ""
        )

        def f(k: str, fmt: str = "{:.2f}", r: dict = r) -> str:  # NaN (no decode step timed): 'n/a'
            return speedup_text(r[k], fmt) if r.get(k) is not None else ""

        def ci(k: str, r: dict = r) -> str:
            if r.get(k) is None:
                return ""
            star = "*" if (total_flag(r) if k == "vs_full_total" else row_flag(r)) else ""
            ends = ", ".join(speedup_text(r[k + end], "{:.2f}") for end in ("_lo", "_hi"))
            return f"{speedup_text(r[k], '{:.2f}')} [{ends}]{star}" if math.isfinite(r[k]) else "n/a"

        lines.append(
            f"| {model} | {r['batch_size']} |{prompt_cell(r) if prompts else ''} "
            f"{r['new_tokens']} | {r['setting']} | {r['tokens_per_s']:.1f} "
            f"| {ci('vs_full_total')} | {f('layer_speedup')} | {ci('measured_speedup_decode')} "
            f"| {f('measured_over_layer_speedup')} | {f('measured_over_flops_speedup')} "
            f"| {f('tokens_per_full_pass')} | {f('same_tokens_as_full', '{:.0%}')} "
            f"| {mib(r.get('kv_cache_allocated_bytes'))} | {f('kv_fraction_of_full', '{:.0%}')} "
            f"| {mib(r.get('peak_memory_bytes'))} "
            f"| {f('roofline_fraction', '{:.0%}')}{f('read_roofline_fraction', ' (read {:.0%})')} |"
        )
    runs = sorted({int(r["timing_runs"]) for r in rows if r.get("timing_runs")})
    said_runs = ["", f"Ratios: medians of {' or '.join(map(str, runs))} paired runs with their bootstrap 95% "
                 "intervals."] if runs else []  # fmt: skip
    paired = sorted(
        {f"{r['setting']} with {r['paired_with']}" for r in rows if r.get("paired_with", "full") != "full"}
    )
    pairing = ["", "Paired with another setting than full depth (their ratios, tokens and KV are against it): "
               + "; ".join(paired) + "."] if paired else []  # fmt: skip
    flagged = [
        f"- {r['model']} {r['setting']} (batch {r['batch_size']}, {r['new_tokens']} new tokens): {row_flag(r)}"
        for r in rows
        if row_flag(r)
    ]
    return "\n".join(lines + said_runs + pairing + (["", "Flagged timings:", *flagged] if flagged else []))


def prompt_cell(row: dict) -> str:
    """A row's prompt length as its table's cell (empty where the row does not say it)."""
    return f" {row['prompt_len']} |" if row.get("prompt_len") is not None else "  |"


def total_flag(row: dict) -> str:
    """Empty, or why a row's end-to-end ratio (`vs_full_total`) is no measurement: too few paired runs
    (`runs_flag`; a row that does not say its runs: nothing to judge by)."""
    from skipcore.measure.paired_timing import runs_flag

    if row.get("timing_runs") is None or row.get("vs_full_total") is None:
        return ""
    return runs_flag(row["vs_full_total"], int(row["timing_runs"]))


def row_flag(row: dict) -> str:
    """Why a row's timing is flagged, as its table says it: the row's own `timing_flag` (every reason its bench
    found), else its total ratio's (`total_flag`): a row from a file whose bench flagged no single-run ratio is
    flagged all the same."""
    return row.get("timing_flag") or total_flag(row)


def write_results(
    out: Path,
    header: dict,
    rows: list[dict],
    planned: list[dict],
    measured: list[dict],
    written: list[str],
    notes: list[str] = (),
) -> None:
    """Replace the results file and its table (`out` with .md), each atomically; while a planned run is not
    measured both say they are partial (`runs_done`). `written` holds the digests of the tables written so far,
    newest last; `notes` are said under the machine line (what this device cannot measure).

    The JSON goes first and names the new table's digest and the one before it, so a bench stopped between the
    two writes still knows the table beside it as its own (and a rerun with --overwrite may replace it)."""
    done, total = runs_done(planned, measured)
    stopped = (
        ""
        if done == total
        else f"Partial: {done} of {total} settings measured (the bench stopped or is still running).\n\n"
    )
    said = "".join(f"{n}\n" for n in notes) + ("\n" if notes else "")
    table = machine_line(header) + "\n\n" + said + stopped + format_table(rows) + "\n"
    digest = hashlib.sha256(table.encode()).hexdigest()
    result = {
        **header,
        "notes": list(notes),
        "complete": done == total,
        "settings_done": done,
        "settings_total": total,
        "runs_planned": planned,
        "runs_measured": measured,
        "rows": rows,
    }
    result["table_sha256"] = digest
    if written:
        result["previous_table_sha256"] = written[-1]
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json_plain(result), indent=2, allow_nan=False)  # NaN (nothing timed) as null
    atomic_write(out, lambda p: p.write_text(text))
    atomic_write(out.with_suffix(".md"), lambda p: p.write_bytes(table.encode()))
    written.append(digest)


def kept_after_stop(out: Path | None, before: str | None) -> str:
    """What a bench stopped part way has kept, as its interrupt message says it: the rows in `out` where it
    wrote there (the file's digest is no longer `before`, the one it had at the start, None where there was
    none), else that nothing was measured yet (the file as it was, or none)."""
    if out is None:
        return "nothing was written (no --out): the tables printed so far are what was measured"
    try:
        changed = out.is_file() and file_digest(out) != before
        rows = len(parse_json(out.read_text())["rows"]) if changed else 0
    except (OSError, ValueError, KeyError, TypeError):
        return f"{out} holds what was measured so far: the same command with --append measures the rest"
    if not changed:
        kept = f"{out} is as it was" if before else "no results file was written"
        return f"nothing was measured yet: {kept}"
    said = f"{rows} row{'s' if rows != 1 else ''}"
    return f"{out} keeps {said}, measured so far: the same command with --append measures the rest"


def _run_key(run: dict) -> str:
    return json.dumps(run, sort_keys=True)


def each_once(runs: list[dict]) -> list[dict]:
    """`runs` in their order, a run named twice (a stage that measures a run again) kept once."""
    return list({_run_key(r): r for r in reversed(runs)}.values())[::-1]


def runs_done(planned: list[dict], measured: list[dict]) -> tuple[int, int]:
    """(planned runs the file holds measurements of, planned runs): a file is complete where they are equal."""
    have = {_run_key(r) for r in measured}
    planned = each_once(planned)
    return sum(_run_key(r) in have for r in planned), len(planned)


def runs_of_rows(rows: list[dict]) -> list[dict]:
    """The runs a results file holds rows of, named as far as rows say (a file written before files named their
    runs: its rows carry the model, lengths and batch size, not the plan's settings)."""
    keys = ("model", "prompt_len", "new_tokens", "batch_size")
    return each_once([{k: r.get(k) for k in keys} for r in rows if isinstance(r, dict)])


def own_table(out: Path, md: Path) -> bool:
    """The .md table beside a results file is the bench's own when the results file names its digest (the
    newest table or, for a bench stopped between its two writes, the one before)."""
    try:
        result = parse_json(out.read_text())
        recorded = {result.get("table_sha256"), result.get("previous_table_sha256")} - {None}
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    return file_digest(md) in recorded


def _parsed_results(path: Path, said: str, fields: tuple[str, ...]) -> dict:
    """The JSON object of a results file at `path` holding `fields` and a list of rows, or one line in plain words
    (each starting with `said`) saying what it is instead."""
    not_one = f"{said}{path} is not a bench results file"
    try:
        result = parse_json(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"{said}cannot read {path}: {e.strerror or first_line(e)}") from None
    except UnicodeDecodeError:
        raise UserError(f"{not_one}: it is not text") from None
    except ValueError as e:
        raise UserError(f"{not_one}: it is not JSON ({first_line(e)})") from None
    if not isinstance(result, dict):
        raise UserError(f"{not_one}: it holds {kind_in_words(result)}, where a results file holds an object")
    lacking = [name for name in fields if name not in result]
    if lacking:
        raise UserError(f"{not_one}: it has no {' or '.join(lacking)} field")
    if not isinstance(result["rows"], list):
        raise UserError(f"{not_one}: its rows are {kind_in_words(result['rows'])}, not a list")
    return result


def read_results(path: Path) -> dict:
    """A bench results file (what `--overwrite` may replace), or one line saying the file at `path` is not one."""
    return _parsed_results(path, "", ("machine", "rows"))


def results_to_extend(out: Path, device: torch.device, dtype: torch.dtype) -> dict | None:
    """The results a run with `--append` adds to: None where `out` does not exist yet; refused in one line
    where it is not a bench results file, where a file beside it holds the table's name but is not the table
    the bench wrote (a user's; a missing table is written again from the results), or where it was measured on
    another device or dtype, whose rows would not compare with this run's."""
    if not out.exists():
        return None
    result = _parsed_results(out, "--append: ", ("machine", "device", "dtype", "rows"))
    planned, measured = _recorded_runs(out, result)
    md = out.with_suffix(".md")
    try:
        check_companion(md, out, True, lambda table: own_table(out, table))
    except UserError as e:
        raise UserError(f"--append: {e}") from None
    check_kept_rows(out, result)
    seen, here = (result["device"], result["dtype"]), (str(device), dtype_name(dtype))
    if seen != here:
        raise UserError(
            f"--append: {out} was measured on {seen[0]} in {seen[1]}, this run is on {here[0]} in {here[1]}"
        )
    from skipcore.models.loading import hardware_name

    machine = hardware_name(device)  # a CPU's cores and this process's torch threads with it
    if result.get("machine") != machine:
        raise UserError(
            f"--append: {out} was measured on {result.get('machine')}, this run is on {machine}: its timings "
            "would not compare (choose another --out, or the same --threads)"
        )
    rows = [
        {**row, **{k: math.nan for k in TIMED_COLUMNS if k in row and row[k] is None}}
        for row in result["rows"]
    ]
    return {**result, "rows": rows, "runs_planned": planned, "runs_measured": measured}


def check_kept_rows(out: Path, result: dict) -> None:
    """Refuse in one line, naming the file, the column and the row, a results file whose rows an --append run
    would keep and table with its own while one holds a value of the wrong kind (text where numbers belong, as a
    hand edit leaves it) or a value no bench writes (a batch of 0, a speedup of -5, a ratio outside its interval),
    or whose bandwidth is not a number above 0: found only when the table is written, after the new timings, it
    would lose them; tabled, it would publish the edit as a measurement."""
    remedy = "an --append run tables them with its own: put back the values the bench wrote, or choose another --out"
    rows = result["rows"]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"--append: {out}: row {i + 1} is not a JSON object; {remedy}")
    columns = {name: [row.get(name) for row in rows] for name in ROW_COLUMNS}
    check_columns(f"--append: {out}", columns, ROW_COLUMNS, remedy)
    for i, row in enumerate(rows):
        for k in RATIOS:
            value, lo, hi = (row.get(k + end) for end in ("", "_lo", "_hi"))
            if None in (value, lo, hi) or any(map(math.isnan, (value, lo, hi))):
                continue
            if not (lo <= value * (1 + 1e-9) and value <= hi * (1 + 1e-9)):
                raise UserError(
                    f"--append: {out}: row {i + 1}'s {k} {value:g} lies outside its interval [{lo:g}, {hi:g}] "
                    f"(a median is within its interval); {remedy}"
                )
    header = {name: [result.get(name)] for name in HEADER_COLUMNS}
    check_columns(f"--append: {out}", header, HEADER_COLUMNS, remedy, part="field")


def _recorded_runs(out: Path, result: dict) -> tuple[list[dict], list[dict]]:
    """(planned, measured) runs a results file records, or one line where they are not lists of runs; a file from
    before files named their runs: the runs its rows are of, as both (what else it planned it did not say)."""
    if "runs_planned" not in result:
        held = runs_of_rows(result["rows"])
        return held, held
    runs = [result.get(name) for name in ("runs_planned", "runs_measured")]
    if not all(isinstance(r, list) and all(isinstance(run, dict) for run in r) for r in runs):
        raise UserError(
            f"--append: {out} is not a bench results file: its runs_planned and runs_measured are not lists of runs"
        )
    return list(runs[0]), list(runs[1])
