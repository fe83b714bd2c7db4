"""The Compare page (Streamlit's AppTest): every policy on the same prompts, scores from a split, adaptive's
parameters, speculative's lossless output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard import paths
from app.dashboard.results import CompareResult
from skipcore.labels import metadata_label
from skipcore.policies.speculative import default_draft_tokens
from tests.helpers import (
    MAX_NEW,
    assert_clean,
    by_key,
    charts,
    costs,
    drawn_name,
    open_app,
    opened_with,
    plotly_array,
    texts_shown,
    warnings,
)


# -- compare policies ----------------------------------------------------------------------------------------
def test_compare_runs_every_policy(model_dir):
    at = open_app("compare")
    assert_clean(at)
    policies = by_key(at.multiselect, "cmp_policies").value
    assert policies[:4] == ["full depth", "skip", "exit", "middle"]
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    assert list(results) == policies
    heatmaps = by_key(charts(at), "cmp_heatmaps")  # one figure: a panel per policy, their token axes linked
    spec = json.loads(heatmaps.proto.spec)
    panels = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert len(panels) == len(policies)
    axes = {k: v for k, v in spec["layout"].items() if k.startswith("xaxis")}
    assert len(axes) == len(policies) and all(
        v.get("matches") == "x" for k, v in axes.items() if k != "xaxis"
    )
    assert [a["text"] for a in spec["layout"]["annotations"]] == policies  # each panel titled by its policy
    masks = {name: set(res.trace["layer_mask"]) for name, res in results.items()}
    assert masks["skip"] != masks["exit"] != masks["middle"]  # the same budgets, different layers
    assert masks["full depth"] == {"111111"}


def test_compare_on_a_full_depth_design_and_its_kept_run_draw(model_dir):
    """A model that opens at full depth (one not trained skip-aware) makes skip, exit and middle full depth's own
    runs, of one name: the page and the run history drew their step tables with that name as several columns, a
    traceback on both, kept with the run."""
    at = opened_with({"shape": "full"}, "compare")
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    named = {metadata_label(results[name].metadata) for name in ("full depth", "skip", "exit", "middle")}
    assert len(named) == 1  # four runs of one name
    steps = [t for t in at.dataframe if "step" in t.value.columns]
    assert steps and steps[0].value.columns.is_unique
    history = open_app("history")
    assert_clean(history)


def panels(at: AppTest) -> list[dict]:
    """The Compare page's heatmap panels (one per policy)."""
    spec = json.loads(by_key(charts(at), "cmp_heatmaps").proto.spec)
    return [t for t in spec["data"] if t["type"] == "heatmap"]


def test_compare_full_depth_calm_and_scores_from_a_split(model_dir):
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "calm"])
    by_key(at.radio, "cmp_source").set_value("From a data split").run()
    by_key(at.number_input, "cmp_count").set_value(3)
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    stored = CompareResult.last(at.session_state)
    assert set(stored.quality) == {"full depth", "skip", "calm"}
    table = costs(at)
    assert {"BLEU", "ROUGE-L"} <= set(table.columns) and list(table.index) == ["full depth", "skip", "calm"]
    assert table.loc["full depth", "layer speedup (per token)"] == 1.0
    for name, res in stored.results.items():  # one run's steps: their median, which one slow step cannot move
        decode = res.trace.drop_duplicates("step").query("step >= 1")["step_ms"]
        assert table.loc[name, "median ms per decode step"] == pytest.approx(decode.median(), abs=0.051)
    said = " ".join(t.value for t in [*at.caption, *at.warning])  # a caption, or the warning of noisy steps
    assert "Each policy ran once" in said or "each policy ran once" in said, (
        said
    )  # no speedup made of two runs
    assert "These scores come from 3 examples" in " ".join(w.value for w in at.warning)  # too few to rank
    assert stored.results["calm"].metadata["policy"] == "calm"  # CALM through engine.generate


def test_compare_offers_adaptive_with_its_three_parameters(model_dir):
    at = open_app("compare")
    assert "adaptive" in by_key(at.multiselect, "cmp_policies").options
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "adaptive"]).run()
    by_key(at.slider, "cmp_adaptive_threshold").set_value(0.0)  # every step confident: the budget drops
    by_key(at.number_input, "cmp_adaptive_drop").set_value(1)
    by_key(at.number_input, "cmp_adaptive_min_layers").set_value(2)
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    res = CompareResult.last(at.session_state).results["adaptive"]
    assert res.metadata["policy"] == "adaptive"
    decode = res.trace[res.trace["step"] >= 1]
    budgets = decode.groupby("step")["budget"].first()
    L = len(res.trace["layer_mask"].iloc[0])
    assert list(budgets) == [max(2, L - s) for s in budgets.index]  # drop 1 a step down to the floor of 2
    table = costs(at)
    assert table.loc["adaptive", "layer speedup (per token)"] > 1.0
    assert len(panels(at)) == 3  # its heatmap beside the others


# -- speculative SkipDecode on the dashboard -----------------------------------------------------------------
@pytest.fixture
def shipped_model(monkeypatch) -> Path:
    """The app on the shipped skip-aware model, whose drafts the full model mostly accepts."""
    monkeypatch.delenv(paths.MODEL_ENV, raising=False)
    monkeypatch.delenv(paths.MAX_TRACE_MB_ENV, raising=False)
    assert paths.DEFAULT_MODEL_DIR.is_dir()
    return paths.DEFAULT_MODEL_DIR


def test_compare_runs_speculative_losslessly_on_the_shipped_model(shipped_model):
    at = open_app("compare")
    assert "speculative" in by_key(at.multiselect, "cmp_policies").options
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "speculative"]).run()
    default_k = by_key(at.number_input, "cmp_draft_tokens").value
    assert default_k == default_draft_tokens("cpu", "float32")  # the device's, declared once
    by_key(at.number_input, "cmp_draft_tokens").set_value(3)
    by_key(at.radio, "cmp_source").set_value("From a data split").run()
    by_key(at.number_input, "cmp_count").set_value(4)
    by_key(at.slider, "cmp_max_new").set_value(24).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    spec, full = results["speculative"], results["full depth"]
    assert spec.metadata["policy"] == "speculative" and spec.metadata["policy_params"]["draft_tokens"] == 3
    assert spec.texts == full.texts and spec.texts != results["skip"].texts  # lossless, unlike skipping
    assert "equals full depth's for all 4 prompts" in " ".join(s.value for s in at.success)
    outputs = texts_shown(at)  # the texts side by side, as for every policy
    assert list(outputs["speculative"]) == list(outputs["full depth"]) == full.texts
    table = costs(at)
    assert 1.5 < table.loc["speculative", "tokens per full-depth pass"] <= 4  # at most k + 1 = 4
    assert 0 < table.loc["speculative", "drafts accepted"] <= 1
    assert table.loc["speculative", "layer speedup (per token)"] < 1  # honest: verification costs all layers
    assert table.loc["speculative", "FLOPs speedup (decode)"] < 1
    assert table.loc["speculative", "layer speedup (per batch)"] > 1  # fewer sequential layer passes
    assert (
        table[["tokens per full-depth pass", "drafts accepted"]]
        .loc[["full depth", "skip"]]
        .isna()
        .all()
        .all()
    )
    notes = " ".join(c.value for c in at.caption)
    assert "below 1x by construction" in notes and "sequential" in notes
    # its heatmap: every cell ran, a marker over each kept draft, the round and origin on hover
    heat = json.loads(by_key(charts(at), "cmp_heatmaps").proto.spec)
    speculative = list(results).index("speculative")
    heatmaps = [i for i, t in enumerate(heat["data"]) if t["type"] == "heatmap"]
    cells, drafts = heat["data"][heatmaps[speculative]], heat["data"][heatmaps[speculative] + 1]
    assert set(plotly_array(cells["z"]).ravel()) == {1.0}
    sample = spec.trace[(spec.trace["sample"] == 0) & ~spec.trace["finished"]]
    assert drafts["x"] == list(sample.loc[sample["drafted"], "step"]) and drafts["x"]
    hover = cells["text"][0]
    assert "kept draft, proposed by a" in " ".join(hover) and "the full model's own token" in " ".join(hover)
    assert len(panels(at)) == 3


# -- compare and trade-offs ----------------------------------------------------------------------------------
def test_compare_offers_its_table_and_every_trace_for_download(model_dir):
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    labels = [b.label for b in at.download_button]
    assert "Download the costs table (CSV)" in labels and "Download Parquet" in labels
    assert by_key(at.selectbox, "cmp_dl_policy").options == ["full depth", "skip"]
    assert "These scores come from" not in warnings(at)  # typed prompts: no scores, no warning


def test_each_policys_run_is_named_in_full_and_drawn_in_its_familys_colour(model_dir):
    """The layers-per-step figure names each policy's run by everything that made it (as Run history does) and
    draws it in its policy's or mode's colour; the costs table's headers stay short, the full name on hover."""
    from skipcore.labels import COLORS, metadata_label

    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "exit", "skip", "calm"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    names = {policy: metadata_label(res.metadata) for policy, res in results.items()}
    assert len(set(names.values())) == 4 and all(n.endswith(" · greedy") for n in names.values())
    assert " (exit, " in names["exit"] and "span " in names["skip"] and "calm softmax>=0.9" in names["calm"]
    spec = json.loads(by_key(charts(at), "cmp_layers").proto.spec)
    lines = {drawn_name(t): t["line"]["color"] for t in spec["data"] if drawn_name(t) in names.values()}
    family = {"full depth": "full", "exit": "exit", "skip": "skip", "calm": "calm"}
    assert lines == {names[p]: COLORS[family[p]][0] for p in names}  # by what the run is, not its place
    table = at.dataframe[0]
    helps = {c: json.loads(table.proto.columns).get(c, {}).get("help") for c in names}
    assert helps == names


def test_a_policy_that_cannot_run_is_said_before_run_all(model_dir):
    """Draft tokens past the tokens to generate: said with the policy's own reason before anything runs, and Run all
    waits (the other policies ran first, and the refusal came after them)."""
    at = open_app("compare")
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.number_input, "cmp_draft_tokens").set_value(MAX_NEW + 5).run()
    said = " ".join(e.value for e in at.error)
    assert f"speculative would be refused: draft_tokens must be at most max_new_tokens ({MAX_NEW}" in said
    assert by_key(at.button, "cmp_run").disabled
    assert not any("Press **Run all**" in i.value for i in at.info)  # beside the button it turned off
    by_key(at.number_input, "cmp_draft_tokens").set_value(2).run()
    assert_clean(at)
    assert not by_key(at.button, "cmp_run").disabled


def test_a_design_with_warmup_layers_runs_in_every_mode(model_dir):
    """Exit and middle take the design's budgets, not its warmup layers, which run in skip mode alone: a design
    with 2 warmup layers made every mode but skip refused (a Schedule in another mode refuses them)."""
    at = open_app("designer")
    by_key(at.slider, "min_layers").set_value(3)
    by_key(at.slider, "warmup_layers").set_value(2).run()
    at.switch_page("sections/compare.py").run()
    assert_clean(at)
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.multiselect, "cmp_policies").set_value(["skip", "exit", "middle"])
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    assert {name: res.metadata["schedule"]["warmup_layers"] for name, res in results.items()} == {
        "skip": 2, "exit": 1, "middle": 1
    }  # fmt: skip


def test_an_instruct_models_runs_say_in_their_metadata_that_the_prompts_went_in_its_template(
    model_dirs, tmp_path, monkeypatch
):
    """Each policy's trace counts the template's text in `prompt_len`: its metadata (and so its download) says
    so, as `generate --trace` does."""
    from tests.helpers import opened_on_instruct_model

    at = opened_on_instruct_model(model_dirs, tmp_path / "instruct", monkeypatch, "compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_chat_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    assert {r.metadata["prompt_format"] for r in results.values()} == {"chat template"}
