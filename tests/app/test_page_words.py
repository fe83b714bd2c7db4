"""What the pages say (Streamlit's AppTest, on the tiny OPT model): a sweep file with infinite values is drawn
without them and says so (the browser's chart library failed on them with a stack trace); a policy is named once
beside its description; a page whose prompts are filled in says only which button to press."""

from __future__ import annotations

import numpy as np

from app.dashboard import sweeps
from skipcore.policies import POLICY_CLASSES
from skipcore.policies.params import summary
from tests.app.test_markdown import read, rendered
from tests.helpers import assert_clean, by_key, open_app, sweep_frame, trade_offs_of, warnings


def chart_values(chart) -> list[float]:
    """Every number in the data Streamlit sends with an Altair chart."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    frames = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
    return [v for f in frames for v in f.select_dtypes("number").to_numpy().ravel().tolist()]


def test_a_sweep_with_infinite_values_is_drawn_without_them_and_says_so(model_dir):
    table = sweep_frame()
    table.loc[3, "layer_speedup"] = np.inf
    table.loc[5, "bleu"] = -np.inf
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    upload = ("sweep.csv", table.to_csv(index=False).encode(), "text/csv")  # written as inf and -inf
    by_key(at.get("file_uploader"), "to_upload").set_value(upload).run()
    assert_clean(at)
    assert "are left out of the charts: 1 in bleu (inf), 1 in layer_speedup (inf)" in warnings(at)
    charts = at.get("vega_lite_chart")
    assert len(charts) == 2 and all(np.isfinite(v) or np.isnan(v) for c in charts for v in chart_values(c))
    assert "Infinity" not in "".join(c.proto.spec for c in charts)


def test_a_sweep_with_speedups_not_above_0_is_drawn_without_them_and_says_so(model_dir):
    """A speedup is a ratio, above 0: a file with negated ones turned the axis backwards and drew its points outside
    the plot, without a word. They are left out as an infinite value is, and said."""
    table = sweep_frame()
    table.loc[[0, 2, 4], "layer_speedup"] = [0.0, -1.5, -3.0]
    at = trade_offs_of(table)
    assert_clean(at)
    said = warnings(at)
    assert "3 in layer_speedup (0, -1.5, …: not above 0)" in said, said
    drawn = [c for c in at.get("vega_lite_chart") if "layer_speedup" in c.proto.spec]
    speedups = [v for c in drawn for v in chart_column(c, "layer_speedup")]
    assert speedups and min(speedups) > 0, speedups


def chart_column(chart, column: str) -> list[float]:
    """The values of `column` in the data Streamlit sends with an Altair chart, where it has that column."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    frames = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
    return [v for f in frames if column in f for v in f[column].dropna().tolist()]


def test_numbers_only_leaves_a_table_of_numbers_as_it_is():
    table = sweep_frame()
    same, said = sweeps.numbers_only(table)
    assert same is table and said is None


def test_a_policy_is_named_once_beside_its_description(model_dir):
    for cls in POLICY_CLASSES.values():
        assert not summary(cls).lower().startswith(cls.title.lower()), (cls.title, summary(cls))
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    assert_clean(at)
    named = [c.value.split("**")[1:] for c in at.caption if c.value.startswith("**")]  # '**CALM-DEC**: ...'
    assert len(named) >= 2 and not [(t, s) for t, s in named if s.removeprefix(": ").startswith(t)], named


def test_a_page_with_its_prompts_filled_in_says_only_to_press_its_button(model_dir):
    at = open_app("generate")
    prompts = by_key(at.text_area, "gen_text").value
    assert prompts.strip()
    infos = [i.value for i in at.info]
    assert not [i for i in infos if "Choose prompts" in i], infos
    assert any(i.startswith("Press **Generate** to run the") for i in infos), infos
    by_key(at.text_area, "gen_text").set_value("").run()
    assert any(i.value == "Choose prompts, then press **Generate**." for i in at.info)


def test_a_cell_that_is_no_number_is_left_out_and_said_not_its_column(model_dir):
    """One `layer_speedup` cell reading 'fast' made the column text: it left the pickers without a word, and the
    chart moved to another speedup; a BLEU column with no values moved the chart to ROUGE-L unsaid."""
    table = sweep_frame().astype({"layer_speedup": object})
    table.loc[3, "layer_speedup"] = "fast"
    at = trade_offs_of(table)
    assert_clean(at)
    assert by_key(at.selectbox, "to_x").value == "layer_speedup"
    assert "left out of the charts: 1 in layer_speedup ('fast')" in warnings(at)
    at = trade_offs_of(sweep_frame().assign(bleu=None))
    assert_clean(at)
    assert "No values in bleu: not offered as a quality." in [i.value for i in at.info]
    # a cell's text is the file's, quoted as typed: no link of its own
    table = sweep_frame().astype({"bleu": object})
    table.loc[2, "bleu"] = "[click](https://evil.example/x)"
    said = warnings(trade_offs_of(table))
    assert "1 in bleu ('[click](https://evil.example/x)')" in read(said) and "<a " not in rendered(said)
