"""The schedule designer (Streamlit's AppTest, on the tiny OPT model): sliders, shapes, fits, exports, the
address, and models that cannot be used."""

from __future__ import annotations

import json
import struct

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file
from streamlit.testing.v1 import AppTest

from app.dashboard import paths
from skipcore.schedule import Schedule
from skipcore.traces import read_trace
from tests.helpers import (
    APP,
    APP_TIMEOUT,
    MAX_NEW,
    as_trained_model,
    assert_clean,
    by_key,
    charts,
    errors,
    open_app,
    opened_with,
    warnings,
)


# -- schedule designer ---------------------------------------------------------------------------------------
def test_designer_opens_on_the_default_model(model_dir):
    at = open_app()
    assert_clean(at)
    assert at.title[0].value == "Schedule designer"
    assert "6 layers" in at.caption[0].value
    assert {m.label for m in at.metric} >= {"Layer speedup", "FLOPs speedup", "KV cache, last step"}
    assert len(charts(at)) == 3  # budget step plot, mask heatmap, costs
    assert "heatmap" in charts(at)[1].proto.spec
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert sch.num_layers == 6 and sch.shape == "linear" and sch.mode == "skip"
    assert [d.label for d in at.download_button] == ["Download these numbers (CSV)", "Download schedule JSON"]


def test_designer_sliders_change_the_schedule_and_it_carries_over(model_dir):
    at = open_app()
    by_key(at.slider, "max_layers").set_value(6)
    by_key(at.slider, "min_layers").set_value(3)
    by_key(at.selectbox, "mode").set_value("middle")
    at.run()
    assert_clean(at)
    sch = Schedule.from_dict(
        json.loads(json.dumps(at.session_state["schedule"]))
    )  # what the JSON export holds
    assert (sch.max_layers, sch.min_layers, sch.mode) == (6, 3, "middle")
    speedup = next(m for m in at.metric if m.label == "Layer speedup").value
    assert speedup == f"{sch.layer_speedup(32):.2f}x"
    # the figures' numbers as a table (a chart's data for a screen reader, and to copy): the design's budgets
    steps = at.dataframe[0].value
    assert len(steps) > 1 and steps["num_layers_run"].tolist() == sch.budgets(len(steps))
    assert (steps["flops"] <= steps["flops_full"]).all() and steps["flops"].iloc[-1] < steps[
        "flops_full"
    ].iloc[-1]
    at.switch_page("sections/generate.py").run()
    assert "linear 6->3 (middle, span " in at.caption[0].value  # every parameter of the design said
    at.switch_page("sections/designer.py").run()  # and the designer still shows it
    assert by_key(at.slider, "min_layers").value == 3
    assert by_key(at.selectbox, "mode").value == "middle"


def test_exported_schedule_runs_in_the_cli(model_dir, tmp_path, capsys):
    from skipcore.commands import main

    at = open_app()
    by_key(at.selectbox, "shape").set_value("step").run()
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(at.session_state["schedule"]))  # what "Download schedule JSON" holds
    trace_path = tmp_path / "t.parquet"
    argv = ["generate", "--model", str(model_dir), "--schedule-json", str(path), "--max-new-tokens", "5"]
    assert main([*argv, "--prompt", "MR: name[The Eagle]\nText:", "--trace", str(trace_path)]) == 0
    _, meta = read_trace(trace_path)
    assert meta["schedule"] == at.session_state["schedule"]


@pytest.mark.parametrize(
    ("shape", "extra", "message"),
    [
        ("linear", {"max_layers": 2, "min_layers": 4}, "Min layers (4) is greater than Max layers (2)"),
        # said by the sliders' labels, not the schedule's field names ('warmup_layers (1) must be smaller ...')
        (
            "linear",
            {"max_layers": 1, "min_layers": 1},
            "Warmup layers (1) must be smaller than Min layers (1)",
        ),
        ("custom", {"budgets": "4, 5"}, "must not increase"),
        ("custom", {"budgets": "four"}, "whole numbers"),
        ("custom", {"budgets": "9"}, "outside [1, 6]"),
    ],
)
def test_designer_invalid_settings_show_a_message(model_dir, shape, extra, message):
    at = open_app()
    by_key(at.selectbox, "shape").set_value(shape)
    at.run()
    for key, value in extra.items():
        widget = next(w for w in [*at.slider, *at.text_input] if w.key == key)
        widget.set_value(value)
    at.run()
    text = errors(at)
    assert "Invalid schedule" in text and message in text
    at.switch_page("sections/generate.py").run()  # the other pages refuse it too, with the reason
    assert "invalid" in errors(at) and message in errors(at)


@pytest.mark.parametrize(("shape", "widget"), [("power", "alpha"), ("step", "stages"), ("custom", "budgets")])
def test_designer_shape_specific_controls(model_dir, shape, widget):
    at = open_app()
    by_key(at.selectbox, "shape").set_value(shape)
    at.run()
    keys = {w.key for w in [*at.slider, *at.text_input]}
    assert widget in keys
    if shape == "custom":
        by_key(at.text_input, "budgets").set_value("6, 4, 4, 2").run()
    assert_clean(at)
    assert Schedule.from_dict(at.session_state["schedule"]).shape == shape


def test_designer_fit_to_target(model_dir):
    at = open_app()
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert abs(sch.layer_speedup(32) - 3.0) < 0.6


def test_designer_speedups_are_over_a_typical_output(model_dirs, monkeypatch, tmp_path):
    """For a skipcore-trained model the designer fits and reports speedups over its median output + EOS."""
    from skipcore.schedule import schedule_for_speedup

    model = as_trained_model(model_dirs["opt"], tmp_path / "trained", 20, 8, 9, objective="elastic")
    monkeypatch.setenv(paths.MODEL_ENV, str(model))
    at = open_app()
    assert_clean(at)
    assert by_key(at.slider, "speedup_over").value == 10 and by_key(at.slider, "max_new_tokens").value == 20
    sch = Schedule.from_dict(at.session_state["schedule"])
    expected = schedule_for_speedup(6, 2.0, 10, "linear", "skip", 1, decay_span=8)
    assert (sch.max_layers, sch.min_layers) == (expected.max_layers, expected.min_layers)
    speedup = next(m for m in at.metric if m.label == "Layer speedup").value
    assert speedup == f"{sch.layer_speedup(10):.2f}x" != f"{sch.layer_speedup(20):.2f}x"
    by_key(at.slider, "speedup_over").set_value(20)
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    sch = Schedule.from_dict(at.session_state["schedule"])
    fit = schedule_for_speedup(6, 3.0, 20, "linear", "skip", 1, decay_span=8)
    assert (sch.max_layers, sch.min_layers) == (fit.max_layers, fit.min_layers)


def test_missing_default_model_falls_back_to_a_shape(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.MODEL_ENV, str(tmp_path / "nowhere"))
    at = open_app()
    assert not at.exception
    assert "was not found" in at.sidebar.warning[0].value
    by_key(at.sidebar.selectbox, "model").set_value("shape:opt-1.3b").run()
    assert "24 layers" in at.caption[0].value  # the OPT-1.3B shape, no weights needed
    assert len(charts(at)) == 3
    # a real model's sizes without its package
    by_key(at.sidebar.selectbox, "model").set_value("shape:gemma-3-270m").run()
    assert not at.exception and "18 layers" in at.caption[0].value and len(charts(at)) == 3
    at.switch_page("sections/generate.py").run()
    assert not at.exception and "choose one with weights" in at.info[0].value
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    by_key(at.sidebar.text_input, "model_path").set_value(str(tmp_path / "also-missing")).run()
    assert "Not a folder or a .gguf file" in at.sidebar.error[0].value


def test_local_directory_that_is_not_a_model(model_dir, tmp_path):
    at = open_app("generate")
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    (tmp_path / "empty").mkdir()
    by_key(at.sidebar.text_input, "model_path").set_value(str(tmp_path / "empty")).run()
    assert not at.exception
    assert (
        "holds no config.json" in at.sidebar.error[0].value and "This page runs a model" in at.info[0].value
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    by_key(at.sidebar.text_input, "model_path").set_value(str(broken)).run()
    assert not at.exception
    said = [e.value for e in at.error if "Cannot load the model" in e.value]
    assert (
        len(said) == 1
    )  # once: the sidebar's precision line read the config too, and said it above the title
    at.switch_page("sections/designer.py").run()  # the designer says it in the same one line
    assert not at.exception and len([e for e in at.error if "Cannot load the model" in e.value]) == 1


def _local(at, path):
    """Choose a typed local model in the sidebar."""
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    return by_key(at.sidebar.text_input, "model_path").set_value(str(path)).run()


def refused_in_one_line(at) -> str:
    """The page says why the model cannot be used in one line under its title, and draws nothing else."""
    said = errors(at)  # no traceback
    assert "Cannot load the model" in said and not at.metric and not charts(at), said
    return said


@pytest.mark.parametrize("size", [4, 10, 30])
def test_a_gguf_file_cut_short_is_refused_in_one_line(model_dir, tmp_path, monkeypatch, size):
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path / "cache"))
    header = b"GGUF" + struct.pack("<IQQ", 3, 2, 5) + struct.pack("<Q", 20) + b"general.architecture"
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(header[:size])  # `head -c` of a GGUF file: it ends inside its header
    at = _local(open_app(), cut)
    said = refused_in_one_line(at)
    assert "cut.gguf" in said and "damaged or incomplete" in said
    at.switch_page("sections/generate.py").run()  # the loader says the same, before converting anything
    assert refused_in_one_line(at) == said
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


def test_an_adapter_that_names_itself_as_its_base_is_refused_in_one_line(model_dir, tmp_path):
    adapter = tmp_path / "looped"
    adapter.mkdir()
    config = {"peft_type": "LORA", "base_model_name_or_path": str(adapter), "r": 2, "lora_alpha": 4}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    save_file(
        {"base_model.model.lm_head.lora_A.weight": torch.zeros(2, 4)}, adapter / "adapter_model.safetensors"
    )
    at = _local(open_app(), adapter)
    assert "looped" in refused_in_one_line(at)
    at.switch_page("sections/generate.py").run()
    assert not at.exception and "looped" in at.sidebar.error[0].value


# -- the shared plotting code --------------------------------------------------------------------------------
def test_designer_costs_match_a_measured_trace(model_dirs):
    """The designer's theoretical FLOPs and KV bytes are exactly what the engine's trace reports."""
    from skipcore import plots
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    model.generation_config.eos_token_id = -1  # no early stop: every step is run
    eng = SkipEngine(model, tok)
    sch = Schedule(6, "linear", "middle", 6, 2, decay_span=4)
    trace = eng.generate(["The Eagle is a cheap"], sch, 8).trace
    theory = plots.theoretical_steps(sch, eng.adapter.shapes, int(trace["prompt_len"].iloc[0]), 8)
    cols = [
        "step",
        "num_layers_run",
        "layer_mask",
        "flops",
        "flops_full",
        "kv_cache_bytes",
        "kv_cache_bytes_full",
    ]
    pd.testing.assert_frame_equal(theory[cols], trace[cols], check_dtype=False)
    summary = plots.theoretical_summary(theory, 6)
    assert summary["layer_speedup"] == pytest.approx(sch.layer_speedup(8))


# -- what a fit, a length and a figure say -------------------------------------------------------------------
def test_designer_offers_the_targets_a_fit_can_reach(model_dir):
    """The target goes up to what the shape and mode reach at their lowest budget (never the layer count, which
    a fit refuses), fits there, and comes down with the design where it changes under it."""
    at = open_app()
    by_key(at.number_input, "target").set_value(2.0)
    by_key(at.button, "fit").click().run()
    assert at.success and "Fitted" in " ".join(s.value for s in at.success)
    reach = Schedule(6, "linear", "skip", 2, 2, 1).layer_speedup(32)  # the lowest budget at every step
    target = by_key(at.number_input, "target")
    assert reach < 6 and target.max == pytest.approx(reach) and f"up to {reach:.2f}x" in target.help
    target.set_value(target.max)
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    assert Schedule.from_dict(at.session_state["schedule"]).layer_speedup(32) == pytest.approx(reach)
    assert "Fitted" in " ".join(s.value for s in at.success)
    by_key(at.slider, "max_layers").set_value(6).run()
    by_key(at.slider, "min_layers").set_value(4).run()
    # two layers always run, and one above them: less reach
    by_key(at.slider, "warmup_layers").set_value(2).run()
    lower = Schedule(6, "linear", "skip", 3, 3, 2).layer_speedup(32)
    assert_clean(at)
    assert lower < reach and by_key(at.number_input, "target").value == pytest.approx(lower)


def test_designer_typical_length_beyond_generation_is_said_and_capped(model_dir):
    at = open_app()
    by_key(at.slider, "max_new_tokens").set_value(10)
    by_key(at.slider, "speedup_over").set_value(20).run()
    assert "more than the tokens to generate" in " ".join(w.value for w in at.warning)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert next(m for m in at.metric if m.label == "Layer speedup").value == f"{sch.layer_speedup(10):.2f}x"


def test_designer_figures_at_length_two_and_the_mask_key(model_dir):
    at = open_app()
    by_key(at.slider, "max_new_tokens").set_value(2)
    by_key(at.slider, "speedup_over").set_value(2).run()
    assert_clean(at)
    mask, costs = (json.loads(c.proto.spec) for c in charts(at)[1:3])
    assert mask["data"][0]["showscale"] and mask["data"][0]["colorbar"]["ticktext"] == ["skipped", "ran"]
    flops = [t for t in costs["data"] if t.get("xaxis", "x") == "x"]
    assert flops and all("markers" in t["mode"] for t in flops)  # one decode step, still drawn
    kv = next(m for m in at.metric if m.label == "KV cache, last step")
    assert kv.delta.endswith("vs full") and "KiB" not in kv.delta  # short enough for its column


def test_design_is_kept_in_the_url(model_dir):
    """A link restores the design on the designer (its widgets are bound to the address) and on a page that runs it
    (read once, before the designer is drawn); a page that runs the design names it in its own address.
    (AppTest does not show a bound widget writing the address: the browser test checks that.)"""
    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update({"mode": "exit", "min_layers": "2", "max_layers": "5"})
    at.run()
    assert_clean(at)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert (sch.mode, sch.min_layers, sch.max_layers) == ("exit", 2, 5)
    by_key(at.slider, "min_layers").set_value(3).run()
    at.switch_page("sections/generate.py").run()
    assert_clean(at)
    assert "linear 5->3 (exit, span " in at.caption[0].value
    # straight to Generate, before any designer: the link's design is the one run; values the designer's widgets
    # cannot take are left out (the model's default stands)
    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update({"mode": "middle", "max_layers": "5", "min_layers": "99"})
    at.switch_page("sections/generate.py").run()
    assert_clean(at)
    assert "linear 5->" in at.caption[0].value and "(middle, span " in at.caption[0].value
    assert at.query_params["mode"] == "middle" and at.query_params["max_layers"] == "5"
    assert "min_layers" not in at.query_params or at.query_params["min_layers"] != "99"


# -- the designer --------------------------------------------------------------------------------------------
def test_a_model_not_trained_skip_aware_opens_at_full_depth_with_the_command_lines_note(base_model_dir):
    """A model without skip-aware training opens at full depth, as `skipcore generate` runs it, and says so; a
    schedule that skips is warned about; the FLOPs speedup is said beside the head's ceiling."""
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.theory import flops_ceiling
    from skipcore.models.loading import load_config

    at = open_app()
    assert_clean(at)
    assert Schedule.from_dict(at.session_state["schedule"]).shape == "full"
    note = " ".join(i.value for i in at.info)
    said = "was not trained skip-aware, so it opens at full depth; choose a shape in the schedule designer"
    assert said in note
    assert "was not trained skip-aware" not in warnings(at)  # full depth skips nothing
    by_key(at.selectbox, "shape").set_value("linear").run()
    assert "was not trained skip-aware" in warnings(at)  # a random model with no training record
    assert "opens at full depth" not in " ".join(i.value for i in at.info)
    flops = next(m for m in at.metric if m.label == "FLOPs speedup")
    shapes = shapes_from_config(load_config(str(base_model_dir)))
    context = designed_context(at)
    assert flops.delta == f"of at most {flops_ceiling(shapes, 'skip', 1, context):.2f}x"


def test_the_designer_says_why_a_fit_starts_below_full_depth(model_dir):
    at = open_app()
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    schedule = at.session_state["schedule"]
    assert schedule["max_layers"] < 6
    why = " ".join(i.value for i in at.info)
    assert f"Max layers came down from 6 to {schedule['max_layers']}" in why and "reaches at most" in why
    assert "default decay span" in why
    by_key(at.selectbox, "shape").set_value("power").run()  # a power decay is alpha's: it has no span
    by_key(at.slider, "alpha").set_value(0.95).run()
    by_key(at.button, "fit").click().run()
    why = " ".join(i.value for i in at.info)
    assert "a power decay with alpha 0.95 reaches at most" in why and "span" not in why, why


def designed_context(at) -> int:
    """The longest context the designer's numbers reach: its typical prompt and output."""
    ss = at.session_state
    return int(ss["prompt_len"]) + min(int(ss["speedup_over"]), int(ss["max_new_tokens"]))


def test_the_head_ceiling_bounds_the_flops_speedup_beside_it_at_its_context(model_dir):
    """The ceiling grows with the context (attention grows, the head does not): costed at one fixed context, a
    long typical prompt read 'FLOPs speedup 8.53x of at most 8.13x'. It is costed at the longest context of the
    numbers beside it: the designer's typical prompt and output, a Generate run's longest position."""
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.theory import flops_ceiling
    from skipcore.models.loading import load_config

    shapes = shapes_from_config(load_config(str(model_dir)))

    def speedup_and_bound(at) -> tuple[float, float]:
        m = next(m for m in at.metric if m.label == "FLOPs speedup")
        return float(m.value.rstrip("x")), float(m.delta.removeprefix("of at most ").rstrip("x"))

    at = open_app()
    by_key(at.selectbox, "shape").set_value("constant").run()
    by_key(at.slider, "min_layers").set_value(2)  # one warmup layer and a top layer: the cheapest skip step
    by_key(at.slider, "prompt_len").set_value(1500).run()
    assert_clean(at)
    speedup, bound = speedup_and_bound(at)
    assert speedup <= bound and bound == round(flops_ceiling(shapes, "skip", 1, designed_context(at)), 2)
    assert bound > round(flops_ceiling(shapes, "skip", 1), 2)  # the 64-position value would not bound it
    at.switch_page("sections/generate.py").run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    speedup, bound = speedup_and_bound(at)
    assert speedup <= bound


def test_a_typical_length_past_the_models_positions_is_said(model_dir):
    """The typical-prompt slider reaches 2048 tokens whatever the model takes: the costs of a run the model would
    refuse were drawn without a word."""
    from skipcore.adapters import max_positions
    from skipcore.models.loading import load_config

    positions = max_positions(load_config(str(model_dir)))
    at = open_app()
    assert "past this model's" not in " ".join(w.value for w in at.warning)
    by_key(at.slider, "prompt_len").set_value(positions).run()
    assert_clean(at)
    assert f"past this model's {positions} positions" in " ".join(w.value for w in at.warning)


def test_a_constant_design_has_one_budget_and_its_fit_says_no_start(model_dir):
    """A constant's max runs nowhere: no Max layers slider, and the fit does not explain a start below full depth
    (it read "Max layers came down from 12 to 6 ... needs a lower start" beside a met target)."""
    at = open_app()
    by_key(at.selectbox, "shape").set_value("constant").run()
    assert "max_layers" not in {s.key for s in at.slider} and "min_layers" in {s.key for s in at.slider}
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    assert not any("came down" in m.value for m in [*at.info, *at.caption, *at.warning, *at.markdown])


@pytest.mark.parametrize("page", ["generate", "compare", "tune", "tradeoffs"])
def test_every_page_that_runs_skipping_schedules_warns_of_a_model_not_trained_skip_aware(
    base_model_dir, page
):
    """Tune's search and Trade-offs' small sweep ran skipping schedules on such a model without a word, where the
    designer, Generate and Compare warned."""
    at = open_app()
    by_key(at.selectbox, "shape").set_value("linear").run()  # Generate runs the designed schedule
    at.switch_page(f"sections/{page}.py").run()
    if page == "tradeoffs":
        by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    assert_clean(at)
    assert "was not trained skip-aware" in warnings(at)


def test_sliders_of_another_shape_or_mode_do_not_reach_the_schedule():
    """The design keeps every slider's value when the shape or mode changes; a Schedule refuses a setting it does not
    read (alpha beside a linear shape, warmup layers in exit mode), so the design passes each only where it is read."""
    from app.dashboard.state import build_schedule, default_params

    values = {**default_params(12), "shape": "linear", "mode": "exit", "min_layers": 3, "max_layers": 12}
    values.update(alpha=0.5, stages=3, warmup_layers=2)
    made = build_schedule(values, 12)
    assert (made.shape, made.mode, made.alpha, made.stages, made.warmup_layers) == (
        "linear",
        "exit",
        0.9,
        4,
        1,
    )
    power = build_schedule({**values, "shape": "power", "mode": "skip"}, 12)
    assert (power.alpha, power.stages, power.warmup_layers) == (0.5, 4, 2)


def test_the_kv_element_size_follows_the_precision_the_model_runs_in(model_dir):
    """The designer's KV cache is sized in the precision the sidebar runs the model in, as Generate's cache holds
    it (it stayed at float32's 4 bytes with bfloat16 picked), unless an element size is chosen."""
    as_run = "as the model runs (the sidebar's precision)"  # the option's words, as a link holds them

    def kv(address: dict) -> str:
        at = opened_with(address, "designer")
        assert_clean(at)
        return next(m for m in at.metric if m.label == "KV cache, last step").value

    def size(value: str) -> float:
        number, unit = value.split()
        return float(number.replace(",", "")) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)

    full, half = kv({"dtype": "float32"}), kv({"dtype": "bfloat16"})
    assert size(full) == pytest.approx(2 * size(half), rel=0.02), (full, half)
    assert kv({"dtype": "bfloat16", "kv_dtype": "float32 (4 bytes)"}) == full
    assert kv({"dtype": "float32", "kv_dtype": as_run}) == full


@pytest.mark.parametrize(
    "params, floor",
    [
        (
            {"shape": "power", "alpha": "1.0", "max_layers": "5", "min_layers": "2"},
            "its decode steps run 5 layers",
        ),
        (
            {
                "shape": "linear",
                "default_span": "false",
                "decay_span": "512",
                "max_layers": "5",
                "min_layers": "2",
            },
            "a shorter decay span",
        ),
        ({"shape": "linear", "max_layers": "5", "min_layers": "2"}, None),
    ],
)
def test_a_design_that_never_reaches_its_floor_says_so(model_dir, params, floor):
    """'power 5->2 (alpha 1)' runs 5 layers at every step (n(s) = max * alpha^(s-1)), and a decay span past the
    tokens stops part way: the label names a floor the run never reaches, said nowhere. A design that reaches it
    says nothing more."""
    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update(params)
    at.run()
    assert_clean(at)
    sch = Schedule.from_dict(at.session_state["schedule"])
    lowest = min(sch.budgets(int(at.session_state["max_new_tokens"]))[1:])
    said = [c.value for c in at.caption if "never reaches its floor" in c.value]
    if floor is None:
        assert lowest == sch.min_layers and not said
    else:
        assert lowest > sch.min_layers and len(said) == 1 and floor in said[0], said
        assert f"floor of {sch.min_layers} layers" in said[0] and f"run {lowest} layers" in said[0]
