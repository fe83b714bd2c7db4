"""The Generate page (Streamlit's AppTest): texts, heatmaps, downloads, sampling, batches and progress."""

from __future__ import annotations

import html
import json
import re
import zipfile

import pandas as pd

from app.dashboard import tracefiles
from app.dashboard.numbers import NUMBERS_CSV
from app.dashboard.results import DOWNLOADS, GenerateResult
from app.dashboard.views import CHAT_EXAMPLE_PROMPTS
from skipcore.traces import TRACE_COLUMNS, read_trace
from tests.helpers import (
    MAX_NEW,
    assert_clean,
    by_key,
    charts,
    open_app,
    texts_shown,
    with_tokenizer,
)


# -- generate and trace --------------------------------------------------------------------------------------
def test_generate_shows_texts_heatmap_and_downloads(model_dir, tmp_path):
    at = open_app("generate")
    assert_clean(at)
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    assert len(result.texts) == 2 and set(TRACE_COLUMNS) <= set(result.trace.columns)
    bar = at.get("progress")[-1].proto  # the per-step progress bar, left full
    tokens = int((~result.trace["finished"]).sum())  # counted from the rows still running, not the cap
    assert bar.value == 100 and bar.text.startswith(f"Generated {tokens} tokens for 2 prompts")
    figs = charts(at)
    assert len(figs) == 3 and '"heatmap"' in figs[0].proto.spec  # exit heatmap, costs, latency
    spec = json.loads(figs[0].proto.spec)
    assert spec["data"][0]["text"][0][0].startswith("step 0")  # hover: step, token, layers, FLOPs, log p
    assert "log p" in spec["data"][0]["text"][0][0]
    assert [d.label for d in at.download_button if d.label != NUMBERS_CSV] == [
        f"Download {label}" for label in tracefiles.DOWNLOAD_FORMATS.values()
    ]  # and beside the figures, their numbers as CSV (tests/app/test_chart_numbers.py)
    # the bytes behind each button read back with skipcore's reader, and the zips with plain pandas
    for (key, run_id, _fmt), (data, name, _) in at.session_state[DOWNLOADS].items():
        assert key == "gen"
        path = tmp_path / name
        path.write_bytes(data)
        trace, meta = read_trace(path)
        assert len(trace) == len(result.trace) and meta["run_id"] == run_id == result.metadata["run_id"]
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                assert zf.namelist() == [name[:-4]]  # one member: what pandas opens without unpacking
            plain = pd.read_csv(path) if name.endswith(".csv.zip") else pd.read_json(path, lines=True)
            assert len(plain) == len(trace) and plain["run_id"].eq(run_id).all()
            assert plain["layer_mask"].str.removeprefix("m").tolist() == trace["layer_mask"].tolist()
        # the explorer's upload path reads the same bytes back
        up, up_meta = tracefiles.read_uploaded_trace(name, data, 10**8)
        assert len(up) == len(trace) and up_meta["run_id"] == run_id
    # the result survives a trip to another page
    at.switch_page("sections/explorer.py").run()
    at.switch_page("sections/generate.py").run()
    assert len(charts(at)) == 3


def test_generate_from_a_data_split(model_dir):
    at = open_app("generate")
    by_key(at.radio, "gen_source").set_value("From a data split").run()
    by_key(at.number_input, "gen_count").set_value(3).run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    prompts = GenerateResult.last(at.session_state).prompts
    assert len(prompts) == 3 and all(p.startswith("MR: name[") and p.endswith("\nText:") for p in prompts)


def test_a_data_split_reaches_a_fine_tune_in_the_format_it_was_trained_on(
    skip_aware_opt, tmp_path, monkeypatch
):
    """Rows drawn from the shipped E2E split reach a model skipcore fine-tuned on another task's prompts in that
    task's format, as the command line gives them, and the page says so (they went as 'MR: ...' prompts)."""
    import shutil

    from app.dashboard import paths

    folder = tmp_path / "generic-tune"
    shutil.copytree(skip_aware_opt, folder)
    record = json.loads((folder / "skipcore_training.json").read_text())
    (folder / "skipcore_training.json").write_text(json.dumps({**record, "data": {"task": "generic"}}))
    monkeypatch.setenv(paths.MODEL_ENV, str(folder))
    at = open_app("generate")
    by_key(at.radio, "gen_source").set_value("From a data split").run()
    by_key(at.number_input, "gen_count").set_value(2).run()
    assert any("trained on generic prompts" in c.value for c in at.caption), [c.value for c in at.caption]
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    prompts = GenerateResult.last(at.session_state).prompts
    assert len(prompts) == 2 and all(
        p.startswith("Input: name[") and p.endswith("\nOutput:") for p in prompts
    )


def test_generate_with_sampling(model_dir):
    at = open_app("generate")
    by_key(at.checkbox, "gen_do_sample").check()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    assert GenerateResult.last(at.session_state).metadata["sampling"]["do_sample"] is True


def test_a_greedy_run_records_no_sampling_setting_its_boxes_hold(model_dir):
    """A seed (or temperature) left in the boxes while sampling is off changed nothing but the greedy run's recorded
    sampling and configuration hash: the same greedy setup is one configuration, as on the command line."""
    from tests.helpers import opened_with

    made = []
    for address in ({"gen_seed": "7", "gen_temp": "1.5"}, {}):
        at = opened_with({**address, "gen_max_new": str(MAX_NEW)}, "generate")
        assert by_key(at.number_input, "gen_seed").disabled
        by_key(at.button, "gen_run").click().run()
        assert_clean(at)
        made.append(GenerateResult.last(at.session_state).metadata)
    assert made[0]["sampling"] == made[1]["sampling"] and made[0]["sampling"]["seed"] == 0
    assert made[0]["config_hash"] == made[1]["config_hash"]
    at = opened_with({"gen_seed": "7", "gen_do_sample": "true", "gen_max_new": str(MAX_NEW)}, "generate")
    by_key(at.button, "gen_run").click().run()  # sampling: its seed is the run's
    assert GenerateResult.last(at.session_state).metadata["sampling"]["seed"] == 7


def test_generate_batch_size_labels_outputs_and_history(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    assert by_key(at.number_input, "gen_batch").value == 2  # the two typed prompts
    by_key(at.button, "gen_run").click().run()
    by_key(at.radio, "gen_source").set_value("From a data split").run()
    by_key(at.number_input, "gen_count").set_value(16).run()
    assert by_key(at.number_input, "gen_batch").value == 16  # follows the prompts, not the first count
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    picker = next(w for w in at.selectbox if w.label == "Sample (batch row)")
    assert picker.options[0].startswith("0: MR: name[") and result.prompts[0][4:20] in picker.options[0]
    outputs = texts_shown(at)
    assert list(outputs["output"]) == result.texts  # whole texts in a wrapping table
    # both runs are kept on disk, listed on the Run history page and compared there against full depth
    from app.dashboard.runstore import RunStore

    runs = RunStore().runs()
    assert [r.id for r in runs] == [2, 1] and len(runs[0].prompts) == 16
    at.switch_page("sections/history.py").run()
    assert_clean(at)
    listing = at.dataframe[0].value
    assert list(listing["run"]) == [2, 1] and listing["prompts"].iloc[0].startswith("16 prompts")
    history = json.loads(by_key(charts(at), "history_fig").proto.spec)
    assert history["data"][0]["name"].startswith("full depth") and len(history["data"]) == 2  # the newest run
    table = at.dataframe[1].value
    assert list(table["run"])[0] == "full depth" and len(table) == 2


def test_progress_counts_batches_and_steps():
    from app.dashboard.views import progress_text

    assert progress_text(30, 128, 64).startswith("batch 1 of 2, step 30")
    assert progress_text(64, 128, 64).startswith("batch 1 of 2, step 64")
    assert progress_text(65, 128, 64).startswith("batch 2 of 2, step 1 ")


def test_long_generations_show_the_tokens_chosen(model_dir, sample_trace):
    from app.dashboard import views

    trace = sample_trace[0]
    long = pd.concat([trace.assign(step=trace["step"] + 8 * k) for k in range(8)])  # 64 token columns
    fig = views.token_heatmap(long, 0, (10, 49))  # the page's "Tokens shown" slider chose them
    assert list(fig.layout.xaxis.range) == [9.5, 49.5] and not fig.layout.xaxis.rangeslider.visible
    short = views.token_heatmap(trace, 0)
    assert short.layout.xaxis.range is None  # a short run shows every token


def test_a_run_says_its_name_in_its_figures_and_files_and_full_depth_saves_no_kv(model_dir):
    """Every figure of a run says the run (its title and its file's name) and draws it in its family's colour; a
    full-depth run's KV cache has no '-0% vs full' arrow."""
    from app.dashboard.figures import SMALL_LINE_CHARACTERS
    from skipcore.labels import COLORS, file_stem, metadata_label

    at = open_app()  # the designer
    by_key(at.selectbox, "mode").set_value("exit").run()
    at.switch_page("sections/generate.py").run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    name = metadata_label(GenerateResult.last(at.session_state).metadata)
    assert " (exit, " in name and name.endswith(" · greedy")
    assert f"Run: **{name}**" in " ".join(c.value for c in at.caption)
    for fig in charts(at):
        spec = json.loads(fig.proto.spec)
        title = spec["layout"]["title"]["text"]  # the run named under the title, in lines a phone holds
        lines = re.findall(r"<sup>(.*?)</sup>", title)
        # as Plotly shows it: its entities ('->' written '-&gt;', so no name is read as Plotly's markup)
        assert html.unescape(" ".join(lines)) == name and max(map(len, lines)) <= SMALL_LINE_CHARACTERS
        assert file_stem(name) in json.loads(fig.proto.config)["toImageButtonOptions"]["filename"]
    costs = json.loads(by_key(charts(at), "gen_costs").proto.spec)
    assert {t["line"]["color"] for t in costs["data"] if t["name"] == "schedule"} == {COLORS["exit"][0]}
    assert next(m for m in at.metric if m.label == "KV cache").delta  # exit mode saves KV: an arrow
    at.switch_page("sections/designer.py").run()
    by_key(at.selectbox, "shape").set_value("full").run()
    at.switch_page("sections/generate.py").run()
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    assert not next(m for m in at.metric if m.label == "KV cache").delta  # full depth saves nothing


# -- a model not trained to skip, an instruct model ----------------------------------------------------------
def test_a_model_not_trained_skip_aware_runs_at_full_depth_with_the_command_lines_note(base_model_dir):
    at = open_app("generate")
    assert_clean(at)
    note = " ".join(i.value for i in at.info)
    assert "was not trained skip-aware, so it opens at full depth" in note
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    assert result.settings["schedule"][0] == "full depth" and (result.trace["num_layers_run"] == 6).all()


def test_an_instruct_models_prompts_go_in_its_chat_template_unless_the_box_is_ticked(
    model_dirs, tmp_path, monkeypatch
):
    from tests.helpers import opened_on_instruct_model

    at = opened_on_instruct_model(model_dirs, tmp_path / "instruct", monkeypatch, "generate")
    assert_clean(at)
    said = " ".join(c.value for c in at.caption)
    assert "is an instruct model: each prompt goes in its chat template as a user turn (the box above" in said
    by_key(at.slider, "gen_chat_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    chat = GenerateResult.last(at.session_state)
    assert chat.settings["prompt format"][0] == "chat template"
    assert chat.metadata["prompt_format"] == "chat template"  # the trace's download says it too
    assert chat.prompts[0] == CHAT_EXAMPLE_PROMPTS.splitlines()[0]  # the page shows the prompts as typed
    by_key(at.checkbox, "gen_raw").check().run()
    assert "These results are from other settings" in " ".join(w.value for w in at.warning)
    by_key(at.button, "gen_run").click().run()
    raw = GenerateResult.last(at.session_state)
    assert raw.settings["prompt format"][0] == "raw text" and raw.metadata["prompt_format"] == "raw text"
    assert chat.trace["prompt_len"].min() > raw.trace["prompt_len"].max() - 1  # the template's text went in


def test_a_chat_template_that_cannot_wrap_the_prompts_is_said_under_its_box(
    model_dirs, tmp_path, monkeypatch
):
    """A model whose template raises its own error (a system turn it requires) failed the page with a traceback;
    it is said in one line, and ticking the raw-text box runs the prompts as they are."""
    from app.dashboard import paths

    template = "{{ raise_exception('Conversation must start with a system message') }}"
    folder = with_tokenizer(model_dirs["opt"], tmp_path / "instruct", chat_template=template)
    monkeypatch.setenv(paths.MODEL_ENV, str(folder))
    at = open_app("generate")
    assert not at.exception
    (said,) = [e.value for e in at.error]
    assert "chat template cannot wrap a prompt: Conversation must start with a system message" in said
    by_key(at.checkbox, "gen_raw").check().run()
    assert_clean(at)
    by_key(at.slider, "gen_chat_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    assert GenerateResult.last(at.session_state).settings["prompt format"][0] == "raw text"


def test_an_output_that_says_nothing_is_flagged(model_dir, monkeypatch):
    from skipcore.decode.engine import SkipEngine

    generate = SkipEngine.generate

    def silent(self, *args, **kwargs):
        result = generate(self, *args, **kwargs)
        result.texts[0] = ""  # as a model that ends its turn at once writes
        return result

    monkeypatch.setattr(SkipEngine, "generate", silent)
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert not at.exception
    assert "Output 1 of 2 is empty" in " ".join(w.value for w in at.warning)


def test_a_run_with_no_decode_step_says_its_speedups_are_not_applicable(model_dir):
    """One new token is the prefill alone: the page said 'nanx' where the command line says n/a."""
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(1)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Layer speedup"] == "n/a" and shown["FLOPs speedup"] == "n/a"
    assert not any("nan" in str(v) for v in shown.values())


def test_a_length_past_the_models_positions_is_said_before_generate_is_pressed(
    model_dirs, tmp_path, monkeypatch
):
    """The token slider reaches a 256-position model's whole range, which no prompt leaves room for: the refusal came
    only after Generate was pressed. It is said above the button, which waits for a length that fits."""
    import shutil

    from tests.app.conftest import _open_on

    short = tmp_path / "llama-128"  # a rotary model (no position table to resize) that takes 128 positions
    shutil.copytree(model_dirs["llama"], short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    _open_on(short, monkeypatch)
    at = open_app("generate")
    slider = by_key(at.slider, "gen_max_new")
    slider.set_value(slider.max).run()
    assert_clean(at)
    said = " ".join(w.value for w in at.warning)
    assert "Generate would be refused: the longest prompt" in said and "exceeds the model's" in said
    assert by_key(at.button, "gen_run").disabled
    assert not any("Press **Generate**" in i.value for i in at.info)  # not beside its button turned off
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW).run()
    assert "would be refused" not in " ".join(w.value for w in at.warning)
    assert not by_key(at.button, "gen_run").disabled
    assert any("Press **Generate**" in i.value for i in at.info)


def test_a_batch_larger_than_the_prompts_is_recorded_as_the_batch_it_ran(model_dir):
    """Batch 8 typed for two prompts ran one batch of two, and the run said "batch size 8"."""
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.number_input, "gen_batch").set_value(8)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    assert len(result.prompts) == 2 and result.settings["batch size"][0] == "2"


def test_a_runs_progress_bar_is_redrawn_at_most_every_fifth_of_a_second(monkeypatch):
    """Redrawn at every decode step, a small model's steps ran about 4x slower in the browser than timed alone
    (each redraw a message to the page): its steps and the estimates made from them were the bar's. The last step
    is always drawn."""
    from app.dashboard import views

    clock = iter([0.0, 0.05, 0.1, 0.25, 0.3, 0.31])
    monkeypatch.setattr(views.time, "monotonic", lambda: next(clock))
    drawn = []
    update = views.throttled(lambda done, total: drawn.append(done))
    for done in range(1, 7):
        update(done, 6)
    assert drawn == [1, 4, 6]  # the first, the one a fifth of a second on, and the last


def test_a_stopped_run_is_said_once_to_its_session_and_to_a_reloads_new_one(model_dir):
    """Back during a run said it stopped; Forward onto the address that holds the run's mark said it again, as if
    the tab had been reloaded. The mark tells a new session (a reload, a copied address) what its own session
    already said."""
    from app.dashboard import views
    from tests.helpers import opened_with

    mark = "gen.0123abcd"
    views._marked(mark, False)  # a run this server saw start and never end
    at = open_app("generate")
    at.session_state[views.OWN_MARKS] = {mark}  # started by this session, which said so when it was left
    at.query_params[views.WORKING] = mark
    at.run()
    assert_clean(at)
    assert not any("The last run did not finish" in w.value for w in at.warning)
    reloaded = opened_with({views.WORKING: mark}, "generate")
    (said,) = [w.value for w in reloaded.warning if "The last run did not finish" in w.value]
    assert "its tab was reloaded" in said


def test_the_tokens_generated_are_said_as_a_range_only_where_rows_differ():
    """'(4-4 per prompt, at most 4)' for rows of one length: said as one count, the cap only where not reached."""
    import pandas as pd

    from app.dashboard.views import generated_text

    def trace(lengths: list[int], cap: int) -> pd.DataFrame:
        rows = [(s, t >= n) for s, n in enumerate(lengths) for t in range(cap)]
        return pd.DataFrame(rows, columns=["sample", "finished"])

    assert generated_text(trace([4, 4], 4), 2, 4) == "Generated 8 tokens for 2 prompts (4 per prompt)"
    assert (
        generated_text(trace([3, 3], 4), 2, 4)
        == "Generated 6 tokens for 2 prompts (3 per prompt of at most 4)"
    )
    assert (
        generated_text(trace([2, 4], 4), 2, 4)
        == "Generated 6 tokens for 2 prompts (2-4 per prompt, at most 4)"
    )
