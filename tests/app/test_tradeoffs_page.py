"""The Trade-offs page (Streamlit's AppTest): shipped, uploaded and small sweeps run here, every policy's
series, intervals, flags and fronts."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard import paths
from skipcore.labels import column_title
from tests.helpers import (
    adaptive_sweep_frame,
    assert_clean,
    by_key,
    errors,
    open_app,
    small_sweep_on_the_page,
    stale,
    sweep_frame,
    trade_offs_of,
)


def test_tradeoffs_from_an_uploaded_sweep(model_dir):
    at = open_app("tradeoffs")
    assert_clean(at)
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", sweep_frame().to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(specs) == 2  # theoretical and measured side by side, each in its own column
    assert all(s["width"] == "container" for s in specs)  # a chart never wider than its column
    assert by_key(at.selectbox, "to_y").value == "bleu"
    assert by_key(at.selectbox, "to_x").value == "layer_speedup"
    assert by_key(at.selectbox, "to_xm").value == "wall_speedup_decode"
    front = at.dataframe[0].value  # the largest batch size is shown first
    assert list(front["layer_speedup"]) == [1.0, 1.5, 2.0, 3.0]
    assert list(front["series"]) == ["full depth", "calm", "skip", "skip"]
    measured = at.dataframe[1].value  # the Pareto front on the measured axis too
    assert list(measured["wall_speedup_decode"]) == pytest.approx([0.8, 1.2, 1.6, 2.4])
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    assert len(at.dataframe[0].value) == 4
    # a click on the picked size empties the control: the size drawn is picked again, marked as drawn
    by_key(at.get("button_group"), "to_batch_filter").set_value(None).run()
    assert_clean(at)
    assert by_key(at.get("button_group"), "to_batch_filter").value == 1 and len(at.dataframe[0].value) == 4


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("sweep.csv", b"policy,bleu\nskip,3\n", "no speedup column"),
        ("sweep.csv", b"", "empty"),
        ("sweep.parquet", b"not parquet", "not a readable parquet"),
    ],
)
def test_tradeoffs_bad_sweep_files(model_dir, name, data, message):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value((name, data, "application/octet-stream")).run()
    assert message in errors(at)


def test_tradeoffs_shipped_sweep(model_dir, tmp_path, monkeypatch):
    path = tmp_path / "default.parquet"
    sweep_frame().to_parquet(path)
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", path)
    at = open_app("tradeoffs")
    assert_clean(at)
    assert by_key(at.radio, "to_source").value == "Shipped sweep"
    assert len(at.get("vega_lite_chart")) == 2


def test_tradeoffs_small_sweep_on_the_page(model_dir):
    at, sweep = small_sweep_on_the_page({"to_calm_threshold": [0.5]})
    assert sorted(sweep["mode"]) == ["calm", "full", "skip"]
    assert {"bleu", "rougeL", "layer_speedup", "wall_speedup_decode"} <= set(sweep.columns)
    assert len(at.get("vega_lite_chart")) == 2


def test_tradeoffs_intervals_flags_and_colour_families(model_dir):
    df = sweep_frame()
    df["wall_speedup_decode_lo"] = df["wall_speedup_decode"] * 0.9
    df["wall_speedup_decode_hi"] = df["wall_speedup_decode"] * 1.1
    df["timing_flag"] = ["above 1.2x the batch layer speedup" if i == 8 else "" for i in range(len(df))]
    base = df.assign(model_role="baseline", bleu=df["bleu"] - 3)
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", pd.concat([df, base]).to_csv(index=False).encode(), "text/csv")
    ).run()
    assert not at.exception
    xm = by_key(at.selectbox, "to_xm")
    assert "wall_speedup_decode_lo" not in xm.options  # an interval's end is its bar, not an axis
    theory, measured = (json.loads(c.proto.spec) for c in at.get("vega_lite_chart"))
    layers = measured["layer"]
    assert any(layer["mark"]["type"] == "rule" and "x2" in layer["encoding"] for layer in layers)
    assert any("shape" in layer["encoding"] for layer in layers)  # flagged timings drawn as crosses
    line = next(
        layer for layer in theory["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"]
    )
    assert {d["field"] for d in line["encoding"]["detail"]} == {"batch_size", "model_role"}  # never joined
    scale = line["encoding"]["color"]["scale"]
    colour = dict(zip(scale["domain"], scale["range"], strict=True))
    assert (
        colour["skip"] != colour["skip · base model"]
        and colour["skip · base model"] != colour["exit · base model"]
    )
    assert "flagged" in " ".join(w.value for w in at.warning)
    front = at.dataframe[1].value
    assert {"wall_speedup_decode_lo", "wall_speedup_decode_hi", "timing_flag"} <= set(front.columns)


def test_tradeoffs_draw_adaptive_as_its_own_series_against_the_static_front(model_dir):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", adaptive_sweep_frame().to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    theory = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    line = next(
        layer for layer in theory["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"]
    )
    assert line["encoding"]["color"]["field"] == "series"
    rows = at.dataframe[3].value  # all rows at batch 8, as drawn (dataframes have no key in AppTest)
    assert sorted(rows["series"]) == [
        "adaptive",
        "adaptive",
        "calm",
        "exit",
        "exit",
        "full depth",
        "skip",
        "skip",
    ]
    points = next(layer for layer in theory["layer"] if layer["mark"]["type"] == "point")
    assert {"adaptive_threshold", "adaptive_drop", "adaptive_min_layers"} <= {
        t["field"] for t in points["encoding"]["tooltip"]
    }
    # the front of every setting: the adaptive point at 2.5x beats the static 2x and CALM
    front = at.dataframe[0].value
    assert list(front["layer_speedup"]) == [1.0, 2.5, 3.0]
    assert list(front["series"]) == ["full depth", "adaptive", "skip"]
    assert front["adaptive_threshold"].iloc[1] == 0.3
    # each dynamic setting placed against the static front (same model, at least as fast)
    placed = at.dataframe[2].value.set_index("layer_speedup")
    assert placed.loc[2.5, "front_position"] == "above" and placed.loc[2.5, "vs_front"] == pytest.approx(7.0)
    assert placed.loc[2.2, "front_position"] == "below" and placed.loc[2.2, "front_bleu"] == 35.0
    assert placed.loc[1.5, "policy"] == "calm" and placed.loc[1.5, "front_position"] == "above"
    # the front of the static schedules alone, drawn and listed
    by_key(at.radio, "to_front_of").set_value("static schedules").run()
    assert_clean(at)
    front = at.dataframe[0].value
    assert list(front["layer_speedup"]) == [1.0, 2.0, 3.0] and set(front["policy"]) == {"static"}
    assert "Pareto front of static schedules" in " ".join(h.value for h in at.header)


def test_tradeoffs_without_dynamic_rows_offer_no_static_front_choice(model_dir):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    only_static = sweep_frame().query("policy == 'static'")
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", only_static.to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    assert not [r for r in at.radio if r.key == "to_front_of"]
    assert len(at.dataframe) == 3  # the two fronts and all rows: no table of dynamic policies


def test_tradeoffs_small_sweep_runs_adaptive(model_dir):
    at, sweep = small_sweep_on_the_page({"to_adaptive_threshold": [0.1]}, {"to_adaptive_min_layers": 2})
    assert list(sweep["policy"]) == ["static", "static", "adaptive"]
    row = sweep[sweep["policy"] == "adaptive"].iloc[0]
    assert (row["adaptive_threshold"], row["adaptive_drop"], row["adaptive_min_layers"]) == (0.1, 2, 2)
    assert at.dataframe[2].value["front_position"].iloc[0] in {
        "above",
        "on",
        "below",
        "beyond",
    }


def test_tradeoffs_page_draws_speculative_and_transformers_rows(model_dir, speculative_sweep):
    data = pd.read_parquet(speculative_sweep).to_csv(index=False).encode()
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(("sweep.csv", data, "text/csv")).run()
    assert_clean(at)
    notes = " ".join(c.value for c in at.caption)
    assert "choose batch size 1" in notes  # batch 2 first: generate() has no rows there
    # every timing at batch 2 is flagged (a tiny model's): no measured front, said, where the page raised
    assert [i.value for i in at.info] == [
        "No setting is on this front: every such timing is flagged as implausible."
    ]
    assert "below 1x by construction" in notes
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    assert by_key(at.selectbox, "to_xm").value == "wall_speedup"
    theory, measured = at.get("vega_lite_chart")

    def series(chart) -> set:
        """The series of the chart's points, read from the data Streamlit sends with it."""
        from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

        spec = json.loads(chart.proto.spec)
        points = next(layer for layer in spec["layer"] if layer["mark"]["type"] in ("circle", "point"))
        data = next(d for d in chart.proto.datasets if d.name == points["data"]["name"])
        return set(convert_arrow_bytes_to_pandas_df(data.data.data)["series"])

    assert series(theory) == {"full depth", "skip", "speculative"}
    assert series(measured) == {
        "full depth",
        "skip",
        "speculative",
        "transformers",
        "transformers early exit",
    }
    notes = " ".join(c.value for c in at.caption)
    assert (
        "Not on this chart (no layer speedup (realised) or BLEU): transformers (1), transformers early exit (1)"
        in notes
    )
    assert "wall_speedup_of" in notes and "end-to-end" in notes
    layers = json.loads(measured.proto.spec)["layer"]
    tooltip = next(layer["encoding"]["tooltip"] for layer in layers if "tooltip" in layer["encoding"])
    assert {
        "draft_tokens",
        "draft_target",
        "tokens_per_full_pass",
        "draft_acceptance",
        "wall_speedup_of",
    } <= {t["field"] for t in tooltip}
    # the other policies against the static front: speculative only (the sweep's timings are single runs, so
    # flagged, and no measured front is tabled)
    placed = next(d.value for d in at.dataframe if "vs_front" in d.value)
    assert list(placed["series"]) == ["speculative"]


def test_tradeoffs_small_sweep_runs_speculative(model_dir):
    at, sweep = small_sweep_on_the_page({"to_draft_tokens": [2]})
    assert list(sweep["policy"]) == ["static", "static", "speculative"]
    full, spec = sweep.iloc[0], sweep.iloc[2]
    assert (spec["draft_tokens"], spec["target_speedup"], spec["mode"], spec["shape"]) == (
        2,
        2.0,
        "skip",
        "linear",
    )
    assert spec["bleu"] == full["bleu"] and spec["chrf"] == full["chrf"]  # lossless
    assert 1 <= spec["tokens_per_full_pass"] <= 3 and spec["layer_speedup"] < 1
    assert "drafts with the first target's schedule (linear skip x2)" in " ".join(c.value for c in at.caption)
    assert len(at.get("vega_lite_chart")) == 2


@pytest.mark.slow
def test_tradeoffs_page_offers_every_shipped_sweep(model_dir):
    """The shipped policy sweeps (every policy side by side) are one pick away, named by their models, and draw
    without error."""
    if not (paths.DEFAULT_SWEEP.parent / "policies_llama.parquet").is_file():
        pytest.skip("the shipped policy sweeps are missing")
    at = open_app("tradeoffs")
    box = by_key(at.selectbox, "to_shipped")
    options = list(box.options)
    shipped = paths.shipped_sweeps()
    assert [o.rsplit("(", 1)[1] for o in options] == [f"{p.stem})" for p in shipped]
    assert [p.stem for p in shipped[:3]] == ["default", "policies_llama", "policies_opt"]
    for option, path in zip(options, shipped):  # each named by its models, drawn without error
        models = set(pd.read_parquet(path, columns=["model"])["model"])
        assert all(m in option for m in models), (option, models)
        by_key(at.selectbox, "to_shipped").set_value(option).run()  # the widget of the page as it is now
        assert_clean(at)
        assert len(at.get("vega_lite_chart")) >= 1, path.stem
    box = by_key(at.selectbox, "to_shipped")
    assert options[0].startswith("skipdecode-opt-e2e and opt-e2e-base (base model): calm, static, 76 rows")
    assert options[1].startswith("skipdecode-llama-e2e: ") and "speculative" in options[1]
    box.set_value(options[1]).run()
    assert_clean(at)
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    notes = " ".join(c.value for c in at.caption)
    assert "below 1x by construction" in notes and "transformers early exit" in notes


def test_a_new_sweep_file_is_offered_by_its_models_without_code(model_dir, tmp_path, monkeypatch):
    """Any Parquet sweep put in data/sweeps is listed, named by the models inside it."""
    sweep_frame().assign(model="skipdecode-opt-e2e").to_parquet(tmp_path / "default.parquet")
    base = sweep_frame().assign(model="smollm2-135m", model_role="baseline")
    tuned = sweep_frame().assign(model="smollm2-skip-lora")
    pd.concat([tuned, base]).to_parquet(tmp_path / "smollm2_cpu.parquet")
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", tmp_path / "default.parquet")
    at = open_app("tradeoffs")
    options = list(by_key(at.selectbox, "to_shipped").options)
    assert options[1].startswith("smollm2-skip-lora and smollm2-135m (base model): calm, static")
    by_key(at.selectbox, "to_shipped").set_value(options[1]).run()
    assert_clean(at)
    theory = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    points = next(layer for layer in theory["layer"] if "field" in layer["encoding"].get("shape", {}))
    assert points["encoding"]["shape"]["scale"]["domain"] == [
        "smollm2-skip-lora",
        "smollm2-135m (base model)",
    ]


def test_the_small_sweep_shows_each_setting_and_downloads_its_table(model_dir):
    at, _ = small_sweep_on_the_page({})
    bar = at.get("progress")[0].proto
    assert bar.value == 100 and bar.text == "2 of 2 settings done; finished"  # nothing said to be left
    assert {"Download this sweep (CSV)", "Download this sweep (Parquet)"} <= {
        b.label for b in at.download_button
    }
    assert "Made with" in " ".join(c.value for c in at.caption)
    by_key(at.number_input, "to_examples").set_value(3).run()
    assert "2 examples" in stale(at) and "3 examples" in stale(at)  # the sweep's settings changed


def test_progress_table_lists_every_setting():
    from app.dashboard.runsweep import DONE, QUEUED, RUNNING, progress_table
    from skipcore.evaluate.sweep import SweepConfig, build_grid
    from skipcore.labels import setting_label

    grid = build_grid(
        SweepConfig(model="m", dataset="d", out="x.parquet", targets=(2.0, 3.0), modes=("skip",))
    )
    table = progress_table(grid, [{"bleu": 50.0, "layer_speedup": 1.0}], running=1)
    assert list(table["status"]) == [DONE, RUNNING] + [QUEUED] * (len(grid) - 2)
    assert (
        list(table["setting"]) == [setting_label(s) for s in grid]
        and table["setting"].iloc[0] == "full depth"
    )
    assert table["BLEU"].iloc[0] == 50.0 and table["BLEU"].iloc[1:].isna().all()


def upload(at: AppTest, table: pd.DataFrame) -> AppTest:
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", table.to_csv(index=False).encode(), "text/csv")
    ).run()
    return at


def test_a_sweep_without_timings_says_why_it_has_no_measured_chart(model_dir):
    """A quality-only sweep (`--repeats 0`, as the shipped SmolLM2 quality sweep) draws the theoretical chart and
    says why the measured one is missing, instead of leaving it out silently."""
    untimed = sweep_frame().assign(
        wall_speedup_decode=float("nan"), wall_speedup_total=float("nan"), timing_runs=0
    )
    at = upload(open_app("tradeoffs"), untimed)
    assert_clean(at)
    assert len(at.get("vega_lite_chart")) == 1
    said = " ".join(i.value for i in at.info)
    assert "No measured chart" in said and "timing_runs" in said and "--repeats" in said
    at = upload(open_app("tradeoffs"), sweep_frame())  # a timed sweep: both charts, no such note
    assert len(at.get("vega_lite_chart")) == 2 and "No measured chart" not in " ".join(
        i.value for i in at.info
    )


def test_the_pareto_tables_show_quality_next_to_speed_in_few_columns(model_dir):
    """What fits a 1024 px screen: the setting in words, its speedup, its quality and what the table adds (a
    measured front's interval in one column); every other column stays in the data."""
    df = sweep_frame()
    df["wall_speedup_decode_lo"], df["wall_speedup_decode_hi"] = (
        df["wall_speedup_decode"] * 0.9,
        df["wall_speedup_decode"] * 1.1,
    )
    at = upload(open_app("tradeoffs"), df)
    assert_clean(at)
    theory, measured = at.dataframe[0], at.dataframe[1]
    assert list(theory.proto.column_order) == ["setting", "layer_speedup", "bleu"]
    assert list(measured.proto.column_order) == ["setting", "wall_speedup_decode", "95% interval", "bleu"]
    assert list(theory.value["setting"]) == [
        "full depth",
        "calm >=0.9",
        "linear/skip x2",
        "linear/skip x3",
    ]
    assert measured.value["95% interval"].iloc[-1] == "2.16-2.64x"
    assert {"series", "policy", "target_speedup"} <= set(theory.value.columns)  # kept, not shown
    assert "Colour: the policy, or a static schedule's mode" in " ".join(c.value for c in at.caption)


def test_a_setting_is_said_in_full_in_the_tables_a_base_models_rows_marked():
    from app.dashboard import sweeps

    rows = pd.DataFrame(
        {
            "policy": ["calm", "calm"],
            "calm_threshold": [0.4, 0.4],
            "calm_measure": ["softmax", "softmax"],
            "model_role": ["model", "baseline"],
            "layer_speedup": [5.71, 7.84],
            "bleu": [32.6, 10.0],
        }
    )
    out, shown = sweeps.table_view(rows, "layer_speedup", "bleu")
    assert list(out["setting"]) == ["calm softmax>=0.4", "calm softmax>=0.4 · base model"]
    assert shown == ["setting", "layer_speedup", "bleu"]


def test_a_tunes_trials_are_said_by_their_trial_in_the_tables():
    """A tune's trials read as a sweep were named by their target speedup: trial 13's 'linear 30->29' as
    'linear/skip x1', and two trials of 1.51x alike; the tune's own words name each, as its chart and report do."""
    from app.dashboard import sweeps

    rows = pd.DataFrame(
        {
            "policy": "static",
            "shape": ["full", "linear", "step"],
            "mode": ["full", "skip", "skip"],
            "target_speedup": [1.0, 1.0, 1.51],
            "tune_trial": [-1, 13, 4],
            "tune_label": ["full depth", "linear 30->29 (skip, warmup 1, span 52)", "step 30->12 (skip)"],
            "model": ["data/models/smollm2-e2e", "/m/tuned", "/m/tuned"],
            "model_role": ["reference", "model", "model"],
            "layer_speedup": [1.0, 1.03, 1.51],
            "bleu": [63.9, 63.5, 60.0],
        }
    )
    front = rows.drop(columns="model").assign(model_role="model")  # a front.csv: no model column
    assert sweeps.table_view(front, "layer_speedup", "bleu")[0]["setting"].iloc[0] == "full depth"
    joined = pd.concat([rows, rows.drop(columns=["tune_trial", "tune_label"]).iloc[[1]]], ignore_index=True)
    assert sweeps.table_view(joined, "layer_speedup", "bleu")[0]["setting"].iloc[-1] == "linear/skip x1"
    out, _ = sweeps.table_view(rows, "layer_speedup", "bleu")
    assert list(out["setting"]) == [
        "full depth (smollm2-e2e) · reference",
        "trial 13: linear 30->29 (skip, warmup 1, span 52)",
        "trial 4: step 30->12 (skip)",
    ]


def test_a_quality_column_with_no_values_is_not_offered(model_dir):
    """A sweep whose BLEU cells are all empty (the column kept, its values lost) draws on the metric that has
    values; one with no quality values at all says so in one line, not empty charts and a traceback."""
    at = upload(open_app("tradeoffs"), sweep_frame().assign(bleu=float("nan")))
    assert_clean(at)
    assert by_key(at.selectbox, "to_y").value == "rougeL" and len(at.get("vega_lite_chart")) == 2
    at = upload(
        open_app("tradeoffs"), sweep_frame().assign(bleu=float("nan"), rougeL=float("nan"), chrf=float("nan"))
    )
    assert not at.exception and not at.get("vega_lite_chart")
    assert "no quality column" in " ".join(e.value for e in [*at.error, *at.warning, *at.info])


def test_a_sweep_scored_at_one_batch_size_opens_where_it_can_be_drawn(model_dir):
    """A sweep scored at batch 1 and timed at batch 8 (quality empty there) crashed the page, which opened on the
    largest batch size; it opens on the largest it can draw and says why another cannot be drawn. A batch size
    or an example count that is no number is said, not a traceback."""
    table = sweep_frame()  # batch sizes 1 and 8
    scores = ["bleu", "rougeL", "rouge1", "rouge2", "chrf"]
    table.loc[table["batch_size"] == 8, [c for c in scores if c in table]] = float("nan")
    at = upload(open_app("tradeoffs"), table.assign(num_examples="many"))
    assert_clean(at)
    assert by_key(at.get("button_group"), "to_batch_filter").value == 1 and at.get("vega_lite_chart")
    by_key(at.get("button_group"), "to_batch_filter").set_value(8).run()
    assert_clean(at)
    assert any("At batch size 8 this table cannot be drawn" in i.value for i in at.info)
    at = upload(open_app("tradeoffs"), table.assign(batch_size=8.5))
    assert not at.exception and any(
        "batch_size column holds values that are not batch sizes (8.5)" in e.value for e in at.error
    )
    # a batch of 10^18 (hand-edited) opened the page on it, every other row hidden behind the batch control
    huge = table.assign(batch_size=table["batch_size"].astype(float), num_examples=20)
    huge.loc[huge.index[0], "batch_size"] = 1e18
    at = upload(open_app("tradeoffs"), huge)
    assert not at.exception and any("not batch sizes (1e+18)" in e.value for e in at.error), at.error
    huge.loc[huge.index[0], "batch_size"] = 64.0
    at = upload(open_app("tradeoffs"), huge)
    said = [e.value for e in at.error]
    assert any("runs batches of 64 over 20 examples" in e for e in said), said


def test_a_tunes_trials_table_leaves_its_stopped_trials_off_the_front(model_dir):
    """A tune's trials.parquet read as a sweep put its trials stopped early, scored on the first rows only, on
    the front beside trials scored on every row, and said nothing of the two kinds of score."""
    trials = sweep_frame().assign(tune_state="trial", num_examples=16)
    shown = trials[trials["batch_size"] == trials["batch_size"].max()]  # the batch size the page opens at
    best = shown["layer_speedup"].idxmax()
    trials.loc[best, ["tune_state", "bleu", "num_examples"]] = ["pruned", 99.0, 8]  # stopped, on 8 rows
    at = upload(open_app("tradeoffs"), trials)
    assert_clean(at)
    front = at.dataframe[0].value
    assert 99.0 not in front["bleu"].tolist()
    assert any("1 tuning trial stopped early left out" in i.value for i in at.info)
    assert not at.warning or "different numbers of examples" not in " ".join(w.value for w in at.warning)
    mixed = sweep_frame().assign(num_examples=[8] + [16] * (len(sweep_frame()) - 1))
    at = upload(open_app("tradeoffs"), mixed)
    assert any("different numbers of examples (8, 16)" in w.value for w in at.warning)


def test_a_link_may_name_a_column_as_the_data_does(model_dir):
    """The address writes a picker's words (`to_y=ROUGE-L`); a link written from the data's column names
    (`to_y=rougeL`, as `tune --metric rougeL` says it) was dropped without a word."""
    from streamlit.testing.v1 import AppTest

    from tests.helpers import APP, APP_TIMEOUT

    for said in ("rougeL", "ROUGE-L"):
        at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
        at.query_params.update({"to_y": said, "to_x": "flops_speedup_decode"})
        at.switch_page("sections/tradeoffs.py").run()
        assert_clean(at)
        assert by_key(at.selectbox, "to_y").value == "rougeL"
        assert by_key(at.selectbox, "to_x").value == "flops_speedup_decode"
    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update({"tune_metric": "rougeL"})
    at.switch_page("sections/tune.py").run()
    assert at.selectbox(key="tune_metric").value == "rougeL"


def test_the_tokens_a_target_is_met_over_are_no_speedup_to_draw(model_dir):
    """`speedup_over` (26 tokens in the shipped sweep) was offered as a theoretical speedup: every row at 26x."""
    at = upload(open_app("tradeoffs"), sweep_frame().assign(speedup_over=26))
    assert_clean(at)
    offered = [*by_key(at.selectbox, "to_x").options, *by_key(at.selectbox, "to_xm").options]
    assert column_title("layer_speedup") in offered and column_title("speedup_over") not in offered


def test_the_caption_says_what_each_dashed_line_is(model_dir):
    """Two kinds of dashed line: the Pareto front's (black, through rings) and a base model's series (in its own
    colour, with its own marker). The caption named the front alone, so a base model's line read as part of it."""
    df = sweep_frame()
    base = df.assign(model="a-base", model_role="baseline", bleu=df["bleu"] - 5)
    at = upload(open_app("tradeoffs"), pd.concat([df.assign(model="a-model", model_role="model"), base]))
    assert_clean(at)
    words = " ".join(c.value for c in at.caption)
    assert "Black dashed line through rings: the Pareto front" in words, words
    assert "each base model's own marker on a line dashed in its series' colour" in words, words


def test_a_batch_size_above_the_examples_runs_as_the_batch_they_fill_and_is_named_so(model_dir):
    """The page's default batch of 8 on 2 examples wrote rows saying batch 8 that ran 2 rows: they run, and are
    named, as one batch of 2, and the page says so before the run."""
    at, sweep = small_sweep_on_the_page({})  # 2 examples, the batch size left at its 8
    assert by_key(at.number_input, "to_batch").value == 8
    assert any(
        "Batch size 8 is more than the 2 examples: they run as one batch of 2" in c.value for c in at.caption
    )
    assert set(sweep["batch_size"]) == {2}


def test_draft_tokens_above_the_tokens_to_generate_are_said_before_the_run_with_the_button_off(model_dir):
    """Drafts of 8 on 2 tokens to generate were refused only after Run sweep, in the library's names
    (draft_tokens, max_new_tokens), the progress bar left at 'Starting…': said on the page first, the button off."""
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    for key, value in {"to_targets": [2.0], "to_modes": ["skip"], "to_draft_tokens": [2, 8]}.items():
        by_key(at.multiselect, key).set_value(value)
    for key, value in {"to_examples": 2, "to_max_new": 4}.items():
        by_key(at.number_input, key).set_value(value)
    at.run()
    said = [w.value for w in at.warning]
    assert any("Draft tokens 8 is more than the 4 tokens to generate" in w for w in said), said
    assert by_key(at.button, "to_run").disabled
    by_key(at.multiselect, "to_draft_tokens").set_value([2]).run()
    assert not any("tokens to generate" in w.value for w in at.warning)
    assert not by_key(at.button, "to_run").disabled


def test_an_uploaded_sweep_and_trace_are_drawn_again_when_their_page_is_opened_again(model_dir, sample_trace):
    """Streamlit empties an upload box when its page is left: the page came back with nothing drawn and no word
    of it. The file stays while the session does, said as an earlier upload, until the user forgets it or
    empties the box; another file replaces it."""
    from app.dashboard import tracefiles

    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    sweep = ("sweep.csv", sweep_frame().to_csv(index=False).encode(), "text/csv")
    by_key(at.get("file_uploader"), "to_upload").set_value(sweep).run()
    assert len(at.get("vega_lite_chart")) == 2
    at.switch_page("sections/tune.py").run()
    at.switch_page("sections/tradeoffs.py").run()
    assert_clean(at)
    assert len(at.get("vega_lite_chart")) == 2
    assert any("Showing sweep.csv, uploaded earlier" in c.value for c in at.caption)
    by_key(at.selectbox, "to_y").set_value("rougeL").run()  # the page drawn again: the file stays
    assert len(at.get("vega_lite_chart")) == 2
    by_key(at.button, "to_upload_forget").click().run()
    assert_clean(at)
    assert not at.get("vega_lite_chart") and not any("uploaded earlier" in c.value for c in at.caption)

    trace, meta = sample_trace
    data, name, _ = tracefiles.trace_download(trace, meta, "parquet")
    at.switch_page("sections/explorer.py").run()
    by_key(at.get("file_uploader"), "explorer_upload").set_value(
        (name, data, "application/octet-stream")
    ).run()
    assert "schema OK" in at.success[0].value
    at.switch_page("sections/history.py").run()
    at.switch_page("sections/explorer.py").run()
    assert_clean(at)
    assert at.success and "schema OK" in at.success[0].value
    assert any(f"Showing {name}, uploaded earlier" in c.value for c in at.caption)
    box = by_key(at.get("file_uploader"), "explorer_upload")
    box.set_value((name, data, "application/octet-stream")).run()  # uploaded again, then removed from its box
    assert at.success and not any("uploaded earlier" in c.value for c in at.caption)
    by_key(at.get("file_uploader"), "explorer_upload").set_value(None).run()
    assert_clean(at)
    assert not at.success and not any("uploaded earlier" in c.value for c in at.caption)


def test_an_uploaded_sweep_is_held_to_what_a_run_can_make_and_to_the_sweeps_timing_rule(model_dir, tmp_path):
    """An edited or foreign sweep drew a BLEU of 250 as the front, a 500x layer speedup on a 12-layer model on the
    theoretical front, and a 40x unflagged timing at full depth on the measured one: scores outside 0 to 100 and
    layer speedups above the model's depth are left out and said, and each timing the file did not flag is held
    to the sweep's own rule. The shipped sweep, made by that rule, has nothing to add."""
    from app.dashboard import sweeps

    shipped = pd.read_parquet(paths.DEFAULT_SWEEP)
    assert sweeps.impossible(shipped)[1] is None and sweeps.flagged_here(shipped)[1] == 0
    edited = shipped.copy()
    edited.loc[edited.index[1], "bleu"] = 250.0
    edited.loc[edited.index[2], "layer_speedup"] = 500.0
    full = edited["mode"].eq("full")
    edited.loc[full, ["wall_speedup_decode", "wall_speedup_decode_lo", "wall_speedup_decode_hi"]] = [
        40.0,
        39,
        41,
    ]
    edited.loc[full, "timing_flag"] = ""
    left, said = sweeps.impossible(edited)
    assert "1 in bleu (250: a score is 0 to 100)" in said and "1 in layer_speedup (500: above" in said, said
    assert left["bleu"].isna().sum() == 1 and left["layer_speedup"].max() <= left["num_layers"].max()
    flagged, new = sweeps.flagged_here(left)
    assert new == int(full.sum()) and flagged.loc[full, "timing_flag"].str.contains("above").all()

    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    csv = ("edited.csv", edited.to_csv(index=False).encode(), "text/csv")
    by_key(at.get("file_uploader"), "to_upload").set_value(csv).run()
    assert_clean(at)
    warned = " ".join(w.value for w in at.warning)
    assert "Values no run can make are left out" in warned and "the file did not flag" in warned, warned


def test_a_file_that_cannot_be_read_is_said_alone(model_dir):
    """An empty or garbage file was said in one line, then the page also asked for a sweep table as if none had
    been uploaded. Before any upload the page asks for one."""
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    assert [i.value for i in at.info] == [
        "Upload a sweep table: one row per setting, quality and speedup columns."
    ]
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", b"\x00\x01garbage", "text/csv")
    ).run()
    assert not at.exception and len(at.error) == 1 and not at.info, ([e.value for e in at.error], at.info)


def test_a_table_joined_to_itself_is_drawn_once_and_said(model_dir):
    """A sweep file holding its rows twice (two tables concatenated, one of them twice) drew every point twice over
    itself without a word; each repeated row is drawn once, and the page says how many it left out. Two
    measurements of one setting differ in their timings and are both kept."""
    once = sweep_frame()
    assert not once.duplicated().any()
    alone = trade_offs_of(once)
    twice = trade_offs_of(pd.concat([once, once.iloc[:3]], ignore_index=True))
    assert_clean(twice)
    assert "3 rows repeat an earlier row in every column" in " ".join(i.value for i in twice.info)
    specs = [[c.proto.spec for c in at.get("vega_lite_chart")] for at in (alone, twice)]
    assert specs[0] == specs[1]
    remeasured = once.iloc[:1].assign(wall_speedup_decode=once["wall_speedup_decode"].iloc[0] * 1.01)
    kept = trade_offs_of(pd.concat([once, remeasured], ignore_index=True))
    assert not any("repeat" in i.value for i in kept.info)
