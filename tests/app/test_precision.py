"""The precision picker (Streamlit's AppTest): the dtype the pages run the model in, what the sidebar says about
it, the runs it makes, and what Compare says of speculative SkipDecode in half precision."""

from __future__ import annotations

import pytest

from app.dashboard.results import CompareResult, GenerateResult, LensComparison
from skipcore.models import dtype_choice
from tests.helpers import MAX_NEW, assert_clean, by_key, open_app, opened_with, small_sweep_on_the_page


def precision(at):
    return by_key(at.sidebar.selectbox, "dtype")


def said(at) -> str:
    return " ".join(c.value for c in at.sidebar.caption)


def test_the_picker_keeps_float32_under_auto_and_says_why(model_dir):
    at = open_app()
    assert_clean(at)
    assert precision(at).options == ["auto", "float32", "bfloat16"] and precision(at).value == "auto"
    assert f"Runs in float32 (auto: float32, {dtype_choice.Promise.PAGES.value})" in said(at)
    assert "bfloat16 is faster here" not in said(at)  # a CPU without native bfloat16, or a model this small


@pytest.mark.parametrize("flags", [["avx512_bf16"], []])
def test_the_picker_says_when_bfloat16_is_faster_here(model_dir, monkeypatch, flags):
    """What auto of a generation would pick for this model (the tiny model counts as large enough here)."""
    monkeypatch.setattr(dtype_choice, "cpu_bf16_flags", lambda cpuinfo=None: flags)
    monkeypatch.setattr(dtype_choice, "BF16_MIN_WEIGHTS", 0)
    at = open_app()
    assert_clean(at)
    assert ("bfloat16 is faster here (this CPU has avx512_bf16" in said(at)) is bool(flags)


def test_a_run_in_bfloat16_says_so_and_a_float32_result_goes_stale(model_dir):
    at = opened_with({"dtype": "bfloat16"}, "generate")  # a link keeps the precision
    assert_clean(at)
    assert precision(at).value == "bfloat16" and "Runs in bfloat16, as asked." in said(at)
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    assert result.metadata["dtype"] == "bfloat16" and result.metadata["dtype_reason"] == "bfloat16: asked for"
    assert result.settings["model"][0].endswith(" in bfloat16")
    assert not at.warning
    precision(at).set_value("auto").run()  # float32 here: the kept result says it was made in bfloat16
    stale = " ".join(w.value for w in at.warning)
    assert "in bfloat16 → " in stale and " in float32" in stale
    by_key(at.button, "gen_run").click().run()
    assert GenerateResult.last(at.session_state).metadata["dtype"] == "float32"


@pytest.mark.parametrize(("dtype", "prompts"), [("bfloat16", 1), ("bfloat16", 2), ("auto", 1)])
def test_compare_says_speculative_in_bfloat16_on_a_cpu_is_full_depths(model_dir, dtype, prompts):
    """On a CPU speculative in bfloat16 keeps full depth's tokens at every batch size, a one-row batch included:
    the page says so, with no caveat."""
    at = opened_with({"dtype": dtype}, "compare")
    by_key(at.multiselect, "cmp_policies").set_value(["speculative"])
    by_key(at.text_area, "cmp_text").set_value("\n".join(["Hello there", "The cat sat"][:prompts]))
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    ran = CompareResult.last(at.session_state).results["speculative"].metadata["dtype"]
    assert ran == ("float32" if dtype == "auto" else dtype)
    notes = " ".join(i.value for i in at.info)
    assert "its output is full depth's, token for token" in notes and "is exact" not in notes


def test_the_lens_and_a_small_sweep_run_in_the_precision_picked(model_dir):
    at = opened_with({"dtype": "bfloat16"}, "lens")
    by_key(at.slider, "lens_max_new").set_value(MAX_NEW)
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    lens = LensComparison.last(at.session_state)
    assert lens.path.metadata["dtype"] == lens.full.metadata["dtype"] == "bfloat16"
    _, sweep = small_sweep_on_the_page({}, address={"dtype": "bfloat16"})
    assert set(sweep["dtype"]) == {"bfloat16"}


def test_an_address_with_an_unknown_precision_opens_on_auto(model_dir):
    at = opened_with({"dtype": "int8"}, "generate")
    assert_clean(at)
    assert precision(at).value == "auto"


def test_reopening_a_run_brings_back_its_precision(model_dir):
    at = opened_with({"dtype": "bfloat16"}, "generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    at = open_app("history")  # a new session, on auto
    assert precision(at).value == "auto"
    by_key(at.button, "history_reopen").click().run()
    assert_clean(at)
    assert at.title[0].value == "Generate and trace" and precision(at).value == "bfloat16"
    assert not at.warning  # the run's settings are the page's again, the precision among them
