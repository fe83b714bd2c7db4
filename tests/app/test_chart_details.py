"""Chart details a reader trips over (Streamlit's AppTest and figure-level checks): a point at the top value drawn
whole, tables in the project's words, no literal "None", a layer axis that ends at the model's last layer."""

from __future__ import annotations

import json

import pandas as pd

from tests.helpers import MAX_NEW, assert_clean, by_key, charts, open_app, sweep_frame, trade_offs_of


def _y_domains(spec: dict) -> list[list[float]]:
    return [
        lay["encoding"]["y"]["scale"]["domain"]
        for lay in spec["layer"]
        if isinstance(lay.get("encoding", {}).get("y"), dict)
        and "domain" in lay["encoding"]["y"].get("scale", {})
    ]


def test_a_point_at_the_top_quality_is_drawn_whole_where_every_quality_is_close(model_dir):
    """The y range ran to 5% of the values' spread past the top: with qualities 60.0 to 60.2 that is 0.01, and the
    top points were cut in half by the chart's edge."""
    df = sweep_frame()
    df["bleu"] = 60.0 + 0.2 * (df.index % 2)
    at = trade_offs_of(df)
    assert_clean(at)
    for chart in at.get("vega_lite_chart"):
        (low, high), *_ = _y_domains(json.loads(chart.proto.spec))
        assert low == 0 and high >= 60.2 * 1.03


def _tune_trials() -> pd.DataFrame:
    rows = [  # (trial, state, label, bleu, layer speedup, FLOPs speedup)
        (-1, "reference", "full depth", 64.04321, 1.0, 1.0),
        (0, "trial", "linear 6->2", 63.21234, 1.5, 1.4),
        (1, "pruned", "power 6->1", 40.0, 3.0, 2.5),
    ]
    cols = ["tune_trial", "tune_state", "tune_label", "bleu", "layer_speedup", "flops_speedup_decode"]
    return pd.DataFrame(rows, columns=cols)


def test_tunes_front_table_says_its_columns_in_words_and_quality_to_two_decimals():
    from app.dashboard.tuning import front_table

    table, config = front_table(_tune_trials(), "bleu", "layer_speedup")
    assert list(table.columns) == [
        "trial",
        "setting",
        "BLEU",
        "layer speedup (realised)",
        "FLOPs speedup (decode)",
    ]
    assert not [c for c in table.columns if "_" in c]  # no raw column name
    assert config["BLEU"]["type_config"]["format"] == "%.2f"  # as the chosen setting's line and the floor
    assert config["FLOPs speedup (decode)"]["type_config"]["format"] == "%.2fx"


def test_tunes_shapes_box_has_the_pages_width(model_dir):
    """Six shapes picked in a third of the page showed 'constan'; the box is on a row of its own."""
    at = open_app("tune")
    assert_clean(at)
    shapes = by_key(at.multiselect, "tune_shapes")
    columns = [c for c in at.main.get("column") if shapes in list(c)]  # `in` walks a block's own children
    assert not columns


def test_run_historys_listing_says_a_missing_speedup_as_a_dash_not_none(model_dir):
    """A comparison and a lens run have no FLOPs speedup of their own: the listing's column held None, an object
    column the table wrote as a literal 'None'."""
    at = open_app("lens")
    by_key(at.slider, "lens_max_new").set_value(MAX_NEW)
    by_key(at.button, "lens_run").click().run()
    at.switch_page("sections/compare.py").run()
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    at.switch_page("sections/history.py").run()
    assert_clean(at)
    listing = at.dataframe[0]
    table = listing.value
    assert set(table["kind"]) == {"comparison", "lens"}
    for column in ("layer speedup", "FLOPs speedup"):
        assert pd.api.types.is_float_dtype(table[column]), column  # missing is NaN, not the object None
    assert listing.proto.placeholder == "-"


def _layer_ticks(axis: dict) -> list[float]:
    """The ticks a plotly layer axis draws: its tick values, or every `dtick` across its range."""
    if axis.get("tickvals") is not None:
        return list(axis["tickvals"])
    low, high = axis["range"]
    step = axis.get("dtick") or 1
    return [t for t in range(0, int(high) + 1, int(step)) if low <= t <= high]


def test_compares_speculative_heatmap_ticks_the_models_layers_and_no_more(model_dir):
    """The draft markers sit above the top layer; the axis that makes room for them ticked 'L' (a 12 on a 12-layer
    model, whose layers are 0..11)."""
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "speculative"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    L = 6
    heatmaps = [json.loads(c.proto.spec) for c in charts(at) if '"heatmap"' in c.proto.spec]
    assert heatmaps
    axes = [
        a
        for spec in heatmaps
        for k, a in spec["layout"].items()
        if k.startswith("yaxis") and "range" in a and a.get("title", {}).get("text") == "layer"
    ]
    assert any(a["range"][1] > L - 0.5 for a in axes)  # the room above the top layer is there
    for axis in axes:
        assert max(_layer_ticks(axis)) <= L - 1, axis


def _parents(node, parent=None):
    """(element, the block that holds it) for every element of a page's tree."""
    yield node, parent
    for child in getattr(node, "children", {}).values():
        yield from _parents(child, node)


def test_the_designers_metrics_wrap_as_wide_as_their_words_instead_of_four_cut_columns(model_dir):
    """In four columns of a narrow page (800 px with the sidebar open) each metric was cut to 'La... 2...'; they are
    one row that wraps (a horizontal container), so a metric that does not fit moves to the next line."""
    at = open_app()
    assert_clean(at)
    holders = [p for n, p in _parents(at.main) if type(n).__name__ == "Metric"]
    assert len(holders) == 4 and all(h is holders[0] for h in holders)
    row = holders[0].proto.flex_container
    assert type(holders[0]).__name__ != "Column" and row.wrap and row.direction == row.HORIZONTAL


def test_the_cost_figures_panels_are_stacked_so_their_titles_never_meet():
    """Side by side, 'FLOPs per decode step' and 'KV cache after step' overlapped in a narrow column: the panels
    are one above the other, sharing the step axis, each title over its own panel."""
    import pandas as pd

    from skipcore import plots

    steps = pd.DataFrame(
        {
            "step": range(5),
            "flops": [9e6, 4e6, 3e6, 2e6, 2e6],
            "flops_full": [9e6, 5e6, 5e6, 5e6, 5e6],
            "kv_cache_bytes": [100, 110, 118, 125, 131],
            "kv_cache_bytes_full": [100, 112, 124, 136, 148],
        }
    )
    fig = plots.cost_figure(steps)
    titles = [a for a in fig.layout.annotations if a.text in ("FLOPs per decode step", "KV cache after step")]
    assert len(titles) == 2
    (top, bottom) = sorted(titles, key=lambda a: -a.y)
    assert top.x == bottom.x and top.y > bottom.y  # same centre, different rows: no width makes them overlap
    assert fig.layout.yaxis.domain[0] > fig.layout.yaxis2.domain[1]  # the FLOPs panel wholly above the KV one


def test_a_figure_says_its_run_once_and_wraps_words_a_phone_would_cut(monkeypatch):
    """A title, a legend entry (a policy's rule "entropy<=2" is no markup) and the run named under the title are
    wrapped to a phone's chart; a title that names its run already is not given it again."""
    import plotly.graph_objects as go

    from app.dashboard import figures

    shown = []
    monkeypatch.setattr(figures.st, "plotly_chart", lambda fig, **kw: shown.append(fig))
    monkeypatch.setattr(figures.st, "session_state", {})
    run = "adaptive skip entropy<=2, all->3 layers (skip, warmup 1) on skipdecode-opt-e2e · greedy"
    fig = go.Figure(
        go.Scatter(x=[0], y=[0], name=run), layout={"title": "Layers per step of every generated token"}
    )
    figures.show(fig, "k", run=run)
    title = shown[-1].layout.title.text
    assert title.count("<sup>") > 1 and "<br>" in shown[-1].data[0].name
    assert max(len(line) for line in shown[-1].data[0].name.split("<br>")) <= figures.LINE_CHARACTERS
    named = go.Figure(layout={"title": f"Layers per step: {run}"})
    figures.show(named, "k", run=run)
    assert "<sup>" not in shown[-1].layout.title.text  # named once


def test_tunes_front_table_is_the_reports_front():
    """The page's front table listed the floor's reference model's full depth (trial -1, 'full depth') as a point
    of the tuned model's front, where the report's front leaves another model's full depth off."""
    from app.dashboard.tuning import front_table
    from skipcore.evaluate.tune.choice import outcome

    trials = _tune_trials().assign(model=["reference", "tuned", "tuned"])
    table, _ = front_table(trials, "bleu", "layer_speedup")
    o = outcome(trials, "bleu", "layer_speedup", 60.0, 64.0, model_is_reference=False)
    assert table["trial"].tolist() == o.front["tune_trial"].tolist() == [0]
    table, _ = front_table(trials.assign(model="tuned"), "bleu", "layer_speedup")
    # the model's own full depth is a setting of it, and no trial: its number blank
    assert table["setting"].tolist()[0] == "full depth" and table["trial"].isna().tolist() == [True, False]
