"""A setting's label and colour are written once (`skipcore.labels`): the sweep grid and its progress lines, the
quality tables, the dashboard and the notebooks give the same words for the same setting, and every figure
builder takes its colours from the one palette."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from skipcore.evaluate.sweep import SweepConfig, build_grid
from skipcore.labels import series_colors, setting_label
from tests.helpers import REPO


def every_kind_of_setting() -> list:
    """One setting of every policy and mode the sweep has, transformers' plain and assisted generate() included."""
    cfg = SweepConfig(
        model="m",
        dataset="d",
        out=Path("unused.parquet"),
        batch_sizes=(1,),
        policies=("static", "calm", "adaptive", "speculative", "transformers"),
        targets=(1.0, 3.0),
        policy_values={
            "calm_threshold": (0.8,),
            "adaptive_threshold": (0.3,),
            "adaptive_min_layers": (3,),
            "draft_tokens": (4,),
            "assistant_exit": (4,),
        },
        speculative_targets=(3.0,),
    )
    return build_grid(cfg)


def test_every_setting_has_its_own_label_in_the_agreed_words():
    labels = [setting_label(s) for s in every_kind_of_setting()]
    assert len(set(labels)) == len(labels)
    assert labels == [
        "full depth",
        "linear/skip x3",
        "linear/exit x3",
        "linear/middle x3",
        "calm softmax>=0.8",
        "adaptive max_prob>=0.3 drop 2 min 3",
        "speculative k=4, draft linear/skip x3",
        "transformers generate()",
        "transformers assistant_early_exit=4, k=4",
    ]


def test_a_sweep_row_and_its_setting_have_the_same_label():
    """The grid labels Setting objects; the dashboard, the tables and the notebooks label rows of a sweep table,
    where ints come back as floats and None as NaN."""
    settings = every_kind_of_setting()
    table = pd.DataFrame([s.to_dict() for s in settings])
    for setting, row, (_, series) in zip(settings, table.itertuples(), table.iterrows(), strict=True):
        assert setting.label() == f"model b1 {setting_label(setting)}"  # the grid's and the CLI's
        assert setting_label(row) == setting_label(setting) == setting_label(series)


def test_the_quality_tables_say_the_same_label():
    from skipcore.evaluate.sweep.quality import speculative_table

    settings = [
        s for s in every_kind_of_setting() if s.policy in ("speculative", "transformers") or s.is_full
    ]
    table = pd.DataFrame([s.to_dict() for s in settings]).assign(
        bleu=60.0, rougeL=60.0, flops_speedup_with_prompt=1.0, tokens_per_s=10.0
    )
    lines = "\n".join(speculative_table(table, {}, "BLEU"))
    for s in settings:
        assert f"| {setting_label(s)} |" in lines


def test_the_cli_prints_the_label(capsys):
    from skipcore.commands.sweep import report_row

    s = every_kind_of_setting()[5]
    report_row(s, {"bleu": 60.0, "timing_runs": 0}, progress=False)
    assert capsys.readouterr().err.startswith(f"model b1 {setting_label(s)}: BLEU 60.0")


def _python_sources() -> dict[str, str]:
    files = [*(REPO / "skipcore").rglob("*.py"), *(REPO / "app").rglob("*.py")]
    out = {str(p.relative_to(REPO)): p.read_text() for p in files}
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        out[str(nb.relative_to(REPO))] = "\n".join(
            line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))
        )
    return out


@pytest.mark.parametrize("where", ["app/sections/explorer.py", "notebooks/06_beyond_the_paper.ipynb"])
def test_the_dashboard_and_the_notebooks_take_the_label_from_skipcore(where):
    tree = ast.parse(_python_sources()[where])
    imported = {
        (node.module, a.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    assert ("skipcore.labels", "setting_label") in imported


def test_no_second_label_function():
    """Only skipcore.labels writes a setting's label: no other `label()` function formats one. (`Setting.label`
    prefixes it with the model's role and batch size; a policy object's `label()` describes its resolved budgets,
    `linear 12->4 (skip, warmup 1, span 25)`, for the generate command's summary line.)"""
    allowed = {"skipcore/labels.py", "skipcore/evaluate/sweep/settings.py"}
    allowed |= {
        "skipcore/decode/step.py",
        "skipcore/decode/static_policy.py",
    }  # the policy interface and its own
    # a tune task's name in the executors' failure reports (the work-unit interface `Setting.label` serves in a
    # sweep): its trial and its candidate's words, no setting label of its own
    allowed.add("skipcore/evaluate/tune/trials.py")
    for where, source in _python_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name in (
                "label",
                "setting_label",
                "_speculative_label",
            ):
                assert where in allowed or where.startswith("skipcore/policies/"), (
                    f"{where} defines {node.name}()"
                )


# -- the palette: one colour per setting family, which every figure takes ------------------------------------
def test_every_sweep_series_has_its_family_colour():
    from skipcore import plots
    from skipcore.labels import COLORS, FAMILY_OF

    table = pd.DataFrame([s.to_dict() for s in every_kind_of_setting()])
    two_models = pd.concat([table, table.assign(model_role="baseline")], ignore_index=True)
    series = plots.sweep_series(two_models)
    colours = series_colors(series["series"].tolist(), series["model_role"].tolist())
    for name, role in zip(series["series"], series["model_role"], strict=True):
        family = FAMILY_OF.get(name.removesuffix(" · base model"), name.removesuffix(" · base model"))
        assert family in COLORS, name  # every series a sweep has is a family of the palette
        assert colours[name] == COLORS[family][role != "model"]


def test_names_of_no_family_take_every_free_hue_then_their_light_shades():
    """Thirteen recipes of one notebook's chart shared nine colours: past the free hues' first round, a name takes
    its hue's light shade, so as many names as there are shades stay apart; a family keeps its own hue."""
    from skipcore.labels import COLORS

    names = [
        "skip",
        *(f"recipe {i}" for i in range(2 * len(COLORS) - 2)),
    ]  # skip's hue taken: 8 free, 16 names
    colours = series_colors(names)
    assert colours["skip"] == COLORS["skip"][0]
    assert len(set(colours.values())) == len(names)  # no two names share a colour
    # the first free hue is exit's: recipe 0 takes its dark shade, recipe 8 (the second round) its light one
    assert (colours["recipe 0"], colours["recipe 8"]) == COLORS["exit"]


PALETTE_FILES = ("skipcore/labels.py", "skipcore/plots/style.py")
COLOUR_LITERAL = re.compile(
    r"['\"](#[0-9a-fA-F]{3,8}|rgba?\(|(black|white)(?![\w-]))|scheme="
)  # not white-space


def test_no_colour_is_written_outside_the_palette():
    for where, source in _python_sources().items():
        if where.endswith(".py") and where not in PALETTE_FILES:
            found = COLOUR_LITERAL.search(source)
            assert found is None, f"{where} writes a colour of its own: {found.group(0)!r}"


def _colours(spec, key: str | None = None) -> set[str]:
    """Every colour a figure's JSON names: plotly's `color`/`fillcolor`/`colorscale`, Altair's mark colours and
    its colour encodings' scale ranges (the template's defaults left out)."""
    found: set[str] = set()
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "template":
                continue
            if k == "color" and isinstance(v, dict) and isinstance(v.get("scale"), dict):
                found |= set(v["scale"].get("range", []))
            found |= _colours(v, k)
    elif isinstance(spec, list | tuple):
        if key == "colorscale":
            return {c for _, c in spec}
        for v in spec:
            found |= _colours(v, key)
    elif isinstance(spec, str) and key in ("color", "fillcolor"):
        found.add(spec)
    return found


def _tune_trials() -> pd.DataFrame:
    """A tune's trials table: the floor's full depth, a scored trial, a stopped one."""
    rows = [(-1, "reference", "full", 64.0, 1.0, "r"), (0, "trial", "skip", 62.0, 1.5, "a")]
    rows.append((1, "pruned", "skip", 40.0, 3.0, "b"))
    cols = ["tune_trial", "tune_state", "mode", "bleu", "layer_speedup", "setting_id"]
    df = pd.DataFrame(rows, columns=cols).assign(tune_prefix_quality=lambda d: d["bleu"])
    return df.assign(
        policy="static", shape=["full", "linear", "power"], tune_label=["full", "a", "b"], model="m"
    )


def _figures(model_dirs) -> dict[str, object]:
    """Every figure builder of skipcore.plots and of the dashboard, on a real speculative trace (kept drafts),
    a nine-batch trace (the dashboard's latency band), a designed schedule and a sweep with a baseline model."""
    from app.dashboard import figures, history
    from skipcore import Schedule, SkipEngine, SpeculativePolicy, load_model, plots, summarize
    from skipcore.adapters import shapes_from_config
    from skipcore.lens import compare_with_full_depth, layer_lens, layer_summary
    from skipcore.plots.lens import agreement_figure, layer_summary_figure, lens_heatmap

    model, tokenizer = load_model(str(model_dirs["llama"]))
    engine = SkipEngine(model, tokenizer)
    L = engine.num_layers
    schedule = Schedule(L, "linear", "skip", max_layers=L, min_layers=2, warmup_layers=1)
    speculative = engine.generate(["a b c", "d e"], SpeculativePolicy(schedule, draft_tokens=2), 6).trace
    batches = engine.generate(["a b"] * 9, schedule, 4, batch_size=1).trace
    steps = plots.theoretical_steps(schedule, shapes_from_config(model.config), 5, 8)
    holes = plots.kv_cache_map([tuple(range(L)), (0,), (0, 1)], 3, L)
    table = pd.DataFrame([s.to_dict() for s in every_kind_of_setting()]).assign(layer_speedup=2.0, bleu=50.0)
    sweep = plots.sweep_series(pd.concat([table, table.assign(model_role="baseline")], ignore_index=True))
    lens = layer_lens(engine, ["a b c"], schedule, 4)
    agreement = compare_with_full_depth(engine, ["a b c"], schedule, 4).agreement
    run = history.entry("1: linear", batches, summarize(batches, L), L, "skip", "llama")
    return {
        "budget_figure": plots.budget_figure(schedule.budgets(8), L),
        "budgets_figure": plots.budgets_figure({"a": schedule, "full depth": Schedule(L, "full")}, 8),
        "schedule_mask_figure": plots.schedule_mask_figure(schedule, 8),
        "masks_figure": plots.masks_figure({"a": schedule}, 8),
        "mask_heatmap": plots.mask_heatmap(["1111", "1001"], hover=["step 0", "step 1"]),
        "exit_heatmap": plots.exit_heatmap(speculative, 0),
        "stacked_exit_heatmap": plots.stacked_exit_heatmap({"speculative": speculative, "skip": batches}, 0),
        "cost_figure": plots.cost_figure(steps),
        "kv_cache_figure": plots.kv_cache_figure(holes, 3),
        "step_latency_figure": plots.step_latency_figure(batches),
        "series_figure": plots.series_figure(steps, "step", "flops", None),
        "tradeoff_chart": plots.tradeoff_chart(sweep, "layer_speedup", "bleu", "series"),
        "speedup_comparison_chart": plots.speedup_comparison_chart(
            sweep, "bleu", "layer_speedup", None, "policy"
        ),
        "lens_heatmap": lens_heatmap(lens.table, 0),
        "layer_summary_figure": layer_summary_figure(
            {"full depth": layer_summary(lens.table), "a": layer_summary(lens.table)}
        ),
        "agreement_figure": agreement_figure({"a": agreement}),
        "tune_chart": plots.tune_chart(_tune_trials(), floor=60.0, chosen="a"),
        "dashboard latency_figure": figures.latency_figure(batches),
        "dashboard history figure": history.figure([run]),
    }


def test_every_figure_builder_takes_its_colours_from_the_palette(model_dirs):
    from plotly.colors import get_colorscale

    from skipcore.labels import COLORS
    from skipcore.plots import lens, style
    from skipcore.plots.lens import STATS

    allowed = {c for pair in COLORS.values() for c in pair}
    allowed |= {
        style.RAN,
        style.SKIPPED,
        style.SKIP_MARK,
        style.KV_HOLE,
        style.INK,
        style.translucent(style.ACTUAL_COLOR, 0.2),
    }
    allowed |= {
        c for _, scale, _, _ in STATS.values() for _, c in get_colorscale(scale)
    }  # lens statistics' scales
    built = _figures(model_dirs)
    for name, fig in built.items():
        spec = fig.to_dict()
        colours = _colours(spec)
        assert colours, f"{name} names no colour"
        assert colours <= allowed, f"{name} uses colours outside the palette: {sorted(colours - allowed)}"
        for trace in spec.get("data", []):  # plotly: no visible trace left to the template's colorway
            if trace["type"] == "heatmap":
                assert "colorscale" in trace, f"{name}: a heatmap without its colour scale"
            elif trace.get("line", {}).get("width") != 0:
                assert _colours(trace), f"{name}: trace {trace.get('name')!r} takes the template's colour"
    builders = {
        n
        for module in (*_plot_modules(), lens)
        for n in dir(module)
        if n.endswith(("_figure", "_chart", "_heatmap")) and not n.startswith("_")
    }
    assert builders <= set(built), f"figure builders this test does not draw: {sorted(builders - set(built))}"


def _plot_modules():
    import importlib
    import pkgutil

    import skipcore.plots

    return [  # every module that builds figures (`export` saves them and builds none)
        importlib.import_module(f"skipcore.plots.{m.name}")
        for m in pkgutil.iter_modules(skipcore.plots.__path__)
        if m.name != "export"
    ]


# -- a run's name: everything that made it, from one function -------------------------------------------------
def test_runs_that_differ_in_any_setting_have_different_names():
    """Decay span, alpha, stages, warmup, mode, the policy's parameters, the decoding and the model each change
    the name; the same run is named the same from its settings and from its trace's metadata."""
    from skipcore import Sampling, Schedule
    from skipcore.labels import run_label

    base = dict(num_layers=12, shape="linear", mode="skip", max_layers=12, min_layers=3, warmup_layers=1)
    schedules = [
        Schedule(**base, decay_span=29),
        Schedule(**base),  # the span left to the run
        Schedule(**{**base, "warmup_layers": 2}, decay_span=29),
        Schedule(**{**base, "mode": "exit"}, decay_span=29),
        Schedule(**{**base, "shape": "power"}, alpha=0.9),
        Schedule(**{**base, "shape": "power"}, alpha=0.85),
        Schedule(**{**base, "shape": "step"}, stages=3),
        Schedule(**{**base, "shape": "step"}, stages=4),
    ]
    names = [run_label("data/models/m", s) for s in schedules]
    names += [
        run_label("data/models/m", schedules[0], sampling=Sampling(True, 0.7, 0, 1.0, 0)),
        run_label("data/models/other", schedules[0]),
        run_label(
            "m", None, "calm", {"calm_threshold": 0.9, "calm_measure": "softmax", "calm_min_layers": 1}
        ),
        run_label(
            "m", None, "calm", {"calm_threshold": 0.9, "calm_measure": "softmax", "calm_min_layers": 3}
        ),
        run_label("m", schedules[0], "speculative", {"draft_tokens": 4}),
        run_label("m", schedules[1], "speculative", {"draft_tokens": 4}),
    ]
    assert len(set(names)) == len(names), names
    assert names[0] == "m · linear 12->3 (skip, warmup 1, span 29) · greedy"
    assert names[1] == "m · linear 12->3 (skip, warmup 1, span to the end) · greedy"
    assert names[5] == "m · power 12->3 (skip, warmup 1, alpha 0.85) · greedy"
    assert names[8].endswith("span 29) · sampled (temperature 0.7, top-k 0, top-p 1, seed 0)")


def test_a_run_is_named_alike_from_its_settings_and_from_its_trace(model_dirs):
    """The pages name a run from its trace's metadata (`metadata_label`); the names a page gives before a run
    (its settings) and every page after it are the same words, the policy's parameters included."""
    from skipcore import CalmPolicy, Sampling, Schedule, SkipEngine, load_model
    from skipcore.labels import metadata_label, run_label

    model, tokenizer = load_model(str(model_dirs["llama"]))
    engine = SkipEngine(model, tokenizer)
    L = engine.num_layers
    schedule = Schedule(L, "linear", "skip", L, 2, 1, decay_span=3)
    sampled = Sampling(True, 0.8, 5, 0.9, 1)
    run = engine.generate(["a b"], schedule, 4, sampled)
    assert metadata_label(run.metadata) == run_label(model_dirs["llama"], schedule, sampling=sampled)
    calm = engine.generate(["a b"], CalmPolicy(threshold=0.8, min_layers=2), 4)
    assert metadata_label(calm.metadata).endswith(" · calm softmax>=0.8 min 2 · greedy")


def test_a_run_name_as_a_file_name():
    from skipcore.labels import file_stem

    stem = file_stem("skipdecode-opt-e2e · linear 12->2 (skip, warmup 1, span 25) · greedy")
    assert stem == "skipdecode-opt-e2e_linear-12-2-skip-warmup-1-span-25_greedy"
    assert file_stem("a/b · ../x") == "a-b_..-x" and file_stem("") == "run"
    assert file_stem("m · calm softmax>=0.9 · greedy") == "m_calm-softmax-ge-0.9_greedy"
    assert file_stem("m · adaptive entropy<=0.5 drop 2 min 3") == "m_adaptive-entropy-le-0.5-drop-2-min-3"
    # past the limit the longest part is cut first: a long model path, not a sampled run's seed
    sampled = (
        "linear 10->2 (skip, warmup 1, span 25) · sampled (temperature 1.3, top-k 20, top-p 0.9, seed 42)"
    )
    stem = file_stem("/a/long/path/to/a/local/model/folder/that/goes/on/and/on · " + sampled)
    assert len(stem) <= 120 and stem.startswith("a-long-path") and stem.endswith("_" + file_stem(sampled))
    assert file_stem("skipdecode-opt-e2e · " + sampled).endswith("seed-42")  # a run name fits whole
    two_long = file_stem(f"{'a' * 200} · {'b' * 200} · seed 42")  # each long part cut in turn
    assert len(two_long) <= 120 and two_long.startswith("a") and two_long.endswith("_seed-42")


# -- a run's colour: its family's, its dash its own, for the session -------------------------------------------
def test_a_run_keeps_its_colour_whatever_order_the_runs_come_in():
    from skipcore.labels import COLORS, run_family
    from skipcore.plots.style import run_styles

    known: dict = {}
    first = run_styles({"b": "exit", "a": "skip", "c": "skip"}, known)
    known.update(first)
    again = run_styles({"c": "skip", "d": "skip", "a": "skip", "b": "exit", "f": "full"}, known)
    assert {k: again[k] for k in first} == first  # every run as it was drawn before
    assert again["a"].color == again["c"].color == again["d"].color == COLORS["skip"][0]
    assert len({again[k].dash for k in "acd"}) == 3  # told apart by their dash, not another family's hue
    assert again["b"].color == COLORS["exit"][0] and again["f"].color == COLORS["full"][0]
    assert run_family("static", None, {"shape": "linear", "mode": "middle"}) == "middle"
    assert run_family("static", None, None) == "full" and run_family("calm") == "calm"


def test_a_trace_whose_metadata_holds_no_readable_schedule_is_still_named():
    """An uploaded trace's metadata, written by hand or by another tool, names its run from what it holds."""
    from skipcore.labels import metadata_label

    assert metadata_label({"model": "m", "schedule": {"shape": "linear", "num_layers": "x"}}).startswith(
        "m · schedule shape linear, num_layers x · "
    )
    # what it does not say is not named: such a trace that skipped layers read "full depth · greedy"
    assert metadata_label({}) == "? · schedule ? · decoding ?"
    assert metadata_label({"model": "m", "num_layers": 200}) == "m · schedule ? · decoding ?"
    # a None schedule is full depth where the run recorded it so, as skipcore's metadata does
    assert metadata_label({"model": "m", "schedule": None, "sampling": None}) == "m · full depth · greedy"
    assert metadata_label({"model": "m", "mode": "full"}) == "m · full depth · decoding ?"


def test_runs_of_explicit_layer_sets_are_named_by_their_sets():
    """Such a run records no schedule (mode layer_sets): it was named "full depth · greedy", as a full-depth run is,
    and two runs of different sets of one length shared "3 explicit layer sets"."""
    from skipcore import SkipEngine, load_model
    from skipcore.labels import metadata_label
    from tests.helpers import REPO

    engine = SkipEngine(
        *load_model(str(REPO / "data/models/skipdecode-opt-e2e"), device="cpu", dtype="float32")
    )
    names = set()
    for sets in ([[*range(12)], [0, 1, 11], [0, 11]], [[*range(12)], [0, 2, 11], [0, 11]]):
        meta = engine.generate(["MR: name[The Eagle]\nText:"], sets, 3).metadata
        names.add(metadata_label(meta))
    full = metadata_label(engine.generate(["MR: name[The Eagle]\nText:"], None, 3).metadata)
    assert len(names) == 2 and full not in names and all("3 explicit layer sets (" in n for n in names), names


def test_a_schedule_off_the_default_warmup_says_its_warmup():
    """Two rows of a sweep with warmups 1 and 3 are two settings: the default warmup goes unsaid, another is said."""
    from skipcore.schedule import Schedule

    default = Schedule.__dataclass_fields__["warmup_layers"].default
    row = dict(policy="static", shape="linear", mode="skip", target_speedup=3.0)
    assert setting_label({**row, "warmup": default}) == "linear/skip x3"
    assert setting_label({**row, "warmup": default + 2}) == f"linear/skip x3 warmup {default + 2}"
    assert setting_label({**row, "mode": "exit", "warmup": 0}) == "linear/exit x3"  # exit mode has no warmup
    spec = {**row, "policy": "speculative", "draft_tokens": 2, "warmup": 3}
    assert setting_label(spec).endswith("draft linear/skip x3 warmup 3")


def test_a_count_of_one_reads_in_the_singular():
    """The dashboard said "1 examples" and "for all 1 prompts" of a one-row sweep or comparison."""
    from app.dashboard.runsweep import SweepSettings
    from skipcore.labels import counted

    assert [counted(n, "example") for n in (0, 1, 2)] == ["0 examples", "1 example", "2 examples"]
    assert "1 example," in SweepSettings(num_examples=1).words()
    assert "8 examples," in SweepSettings().words()
