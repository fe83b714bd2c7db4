"""Chart details a reader trips over (Streamlit's AppTest and figure-level checks): a point at the top value drawn
whole, tables in the project's words, no literal "None", a layer axis that ends at the model's last layer."""

from __future__ import annotations

import json

from tests.helpers import assert_clean, by_key, open_app, sweep_frame


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
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", df.to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    for chart in at.get("vega_lite_chart"):
        (low, high), *_ = _y_domains(json.loads(chart.proto.spec))
        assert low == 0 and high >= 60.2 * 1.03
