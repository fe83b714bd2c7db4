"""Layer lens: what each layer would predict for every generated token, at full depth and along the designed
schedule's path, side by side; where the schedule's predictions part from full depth's, and which layers
barely change the residual stream (the case for skipping them).

The schedule's path is read on full depth's output by default (teacher-forced: the same context at every
position, so the columns line up and agreement is measured), or on its own decode.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from functools import partial
from pathlib import Path

import pandas as pd
import streamlit as st

from app.dashboard import address, figures, numbers, provenance, results, state, views
from app.dashboard.address import KEEP
from app.dashboard.estimates import TimeLeft, prompt_tokens, show_estimate
from app.dashboard.markdown import code, plain
from app.dashboard.models import current_choice
from app.dashboard.precision import model_setting
from app.dashboard.provenance import prompts_setting, setting
from app.dashboard.results import LensComparison
from app.dashboard.tracefiles import DOWNLOAD_FORMATS, DOWNLOAD_HELP
from app.dashboard.trained import chat_prompts, chat_start_note, prompt_format, reads_chat, tokens_slider
from skipcore.errors import UserError
from skipcore.labels import file_stem, metadata_label, run_family
from skipcore.lens import compare_with_full_depth, layer_lens, layer_summary, write_lens
from skipcore.measure.summary import speedup_text
from skipcore.plots.lens import STATS, agreement_figure, layer_summary_figure, lens_heatmap
from skipcore.traces.files import ZIP_COMMENT_BYTES

FORCED, OWN = "Full depth's output (teacher-forced)", "Its own decode"


def lens_download(table, metadata: dict, fmt: str, stem: str) -> tuple[bytes, str, str]:
    """(bytes, file name, MIME type) of a lens table: Parquet, or a zip of its one CSV/JSONL file, which pandas
    reads as it is (`pd.read_csv(zip)`), with the run metadata as the zip's comment, as a trace's zip holds it
    (a metadata too long for a comment, 64 KiB, goes beside the table as its .meta.json)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_lens(table, Path(tmp) / f"{stem}.{fmt}", metadata)
        if fmt == "parquet":
            return path.read_bytes(), path.name, "application/vnd.apache.parquet"
        sidecar = path.with_name(path.name + ".meta.json")
        comment = sidecar.read_bytes()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.write(path, path.name)
            if len(comment) <= ZIP_COMMENT_BYTES:
                zf.comment = comment
            else:
                zf.write(sidecar, sidecar.name)
        return buf.getvalue(), f"{path.name}.zip", "application/zip"


def settings_now(schedule, prompts: list[str], max_new: int, batch_size: int, tokens: str) -> dict:
    """What `Run the lens` would use now, as its result will say it."""
    choice = current_choice()
    return {
        "model": model_setting(choice),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "prompts": prompts_setting(prompts),
        "max new tokens": setting(str(max_new)),
        "batch size": setting(str(batch_size)),
        "the schedule reads": setting(tokens),
    }


def work(engine, schedule, prompts: list[str], max_new: int, batch_size: int, tokens: str) -> list:
    """What `Run the lens` decodes, for its time estimate: full depth and the schedule's path (and its own
    decode), each token's read-out at every layer costing about the LM head once per layer."""
    from skipcore.measure.costs import head_share
    from skipcore.measure.estimate import Decodes

    if not prompts:
        return []
    heads = 1 + round(engine.num_layers * head_share(engine.adapter.shapes))
    share = 1 / schedule.layer_speedup(max(2, max_new))
    n, t = len(prompts), prompt_tokens(engine, prompts)
    depths = [1.0, share, *([share] if tokens == OWN else [])]
    return [Decodes(n, max_new, batch_size, t, d, times=heads) for d in depths]


def run(
    engine,
    prompts: list[str],
    schedule,
    max_new: int,
    batch_size: int,
    tokens: str,
    settings: dict,
    sent=None,
    estimate=None,
) -> None:
    """Run the lens and keep its result (in the session and the run history); `sent`: the prompts as the model
    reads them (an instruct model's in its chat template), `prompts` as the page shows them."""
    what = f"{len(prompts)} prompts × {max_new} tokens"
    bar, left = st.progress(0.0, text=f"Reading every layer of {what}…"), TimeLeft(estimate)
    given = sent.prompts if sent is not None else prompts

    def progress(done: int, total: int) -> None:
        said = left.bar_text(done / total, f"Reading every layer of {what}: batch {done} of {total}")
        bar.progress(done / total, text=said)

    try:
        cmp = compare_with_full_depth(engine, given, schedule, max_new, batch_size, progress=progress)
        path = cmp.path
        if tokens == OWN:
            bar.progress(1.0, text=f"Reading the schedule's own decode of {what}…")
            path = layer_lens(engine, given, schedule, max_new, batch_size)
    except UserError as e:
        bar.empty()
        st.error(f"The lens failed: {e}")
        return
    bar.progress(1.0, text=f"Read every layer of {what}")
    for side in (cmp.full, path):
        side.metadata.update(sent.run_metadata if sent is not None else {})
    LensComparison(prompts, schedule.describe(), tokens, cmp.full, path, cmp.agreement, settings).kept()


def names(result: LensComparison) -> dict[str, str]:
    """'full' and 'path' -> each side's run, named by everything that made it (`skipcore.labels.metadata_label`)."""
    return {"full": metadata_label(result.full.metadata), "path": metadata_label(result.path.metadata)}


def colors(result: LensComparison) -> dict[str, str]:
    """Each side's run name -> its colour, the session's for that run on every page (`figures.run_styles`)."""
    runs = {
        metadata_label(res.metadata): run_family(
            res.metadata.get("policy"), res.metadata.get("mode"), res.metadata.get("schedule")
        )
        for res in (result.full, result.path)
    }
    return {name: style.color for name, style in figures.run_styles(runs).items()}


def show_agreement(result: LensComparison) -> None:
    a = result.agreement
    path = result.path
    s = path.summary
    c = st.columns(4)
    # agreement is always read fed full depth's output; beside the schedule's own decode, its labels say so
    fed = "" if result.tokens == FORCED else ", fed full depth's output"
    c[0].metric(
        f"Agreement with full depth{fed}",
        f"{a.overall:.1%}"
        if a.tokens
        else "n/a",  # one new token is the prefill's: no decode step to agree on
        help="Fed full depth's output, the fraction of decode tokens (steps ≥ 1) whose skip path ranks full "
        "depth's token first: what the schedule would decode as full depth did, given the same prefix.",
    )
    c[1].metric("Decode tokens" if not fed else "Full depth's decode tokens", f"{a.tokens}")
    c[2].metric("Layer speedup", speedup_text(s["layer_speedup"]), help="of the schedule's path shown below")
    c[3].metric("Mean layers run", f"{s['mean_layers_run']:.1f} of {path.num_layers}")
    if not a.tokens:  # an empty chart with a made-up axis said nothing
        st.caption("No decode step to agree on: one new token is the prompt's pass. Generate two or more.")
        return
    name = names(result)["path"]
    fig = agreement_figure({name: a}, colors=colors(result))
    figures.show(fig, "lens_agreement", "lens-agreement", run=name)
    with st.expander("The figure's numbers, by budget and by step"):
        st.caption(
            "Agreement: the fraction of decode tokens whose path ranks full depth's token first, per budget "
            "(layers of the token's own pass) and per decode step (with the mean layers run)."
        )
        stem = file_stem(name)
        numbers.numbers_table(a.by_budget, "lens_agreement_budget", f"lens-agreement-by-budget_{stem}")
        numbers.numbers_table(a.by_step, "lens_agreement_step", f"lens-agreement-by-step_{stem}")


def show_heatmaps(result: LensComparison) -> None:
    full, path = result.full, result.path
    c1, c2 = st.columns(2)
    stat = c1.selectbox("Colour by", list(STATS), format_func=lambda k: STATS[k][0], key="lens_stat", **KEEP)
    with c2:
        sample = views.sample_picker(full.trace, "lens_sample", result.prompts)
    width = max(t[t["sample"] == sample]["step"].max() for t in (full.table, path.table)) + 1
    on = "full depth's output" if result.tokens == FORCED else "its own decode"
    st.caption(
        f"Left: **{plain(names(result)['full'])}**. Right: **{plain(names(result)['path'])}**, on {on}."
    )
    left, right = st.columns(2)
    for col, res, title in (
        (left, full, "Full depth"),
        (right, path, f"The schedule's path, on {on}"),
    ):
        fig = lens_heatmap(res.table, sample, stat, title=title)
        fig.update_xaxes(range=[-0.5, width - 0.5])  # the same token columns in both panels
        col.plotly_chart(fig, key=f"lens_heat_{title}", width="stretch")
    st.caption(
        "Grey cells marked x are layers the token skipped: its residual stream passes them unchanged, so there "
        "is no read-out of their own (it would repeat the layer below). Hover a cell for the read-out's top tokens."
    )
    numbers.figure_numbers(
        f"Sample {sample}'s numbers, token by layer",
        heatmap_numbers(result, sample),
        "lens_heat_numbers",
        f"lens-sample-{sample}_{file_stem(names(result)['path'])}",
        "The heatmaps' numbers: every statistic of each token's read-out after each layer, on both sides (ran: "
        "whether the token ran the layer; a skipped layer's read-out repeats the layer below).",
    )


# a heatmap cell's numbers, by the lens table's columns: the token, the layer, whether it ran, each statistic
HEATMAP_NUMBERS = ("step", "token", "layer", "ran", "top_token", *STATS)


def heatmap_numbers(result: LensComparison, sample: int) -> pd.DataFrame:
    """What the two heatmaps draw for `sample`: each token's read-out after each layer, full depth's then the
    schedule's path's (`side`)."""
    sides = {"full depth": result.full.table, "schedule": result.path.table}
    table = pd.concat([t[t["sample"] == sample].assign(side=side) for side, t in sides.items()])
    return table.sort_values(["side", "step", "layer"], kind="stable")[["side", *HEATMAP_NUMBERS]]


def show_layers(result: LensComparison) -> None:
    full, path = names(result)["full"], names(result)["path"]
    summaries = {full: layer_summary(result.full.table), path: layer_summary(result.path.table)}
    fig = layer_summary_figure(summaries, title="", colors=colors(result))
    figures.show(fig, "lens_layers", "lens-per-layer", run=path)
    with st.expander("Per-layer table"):
        for name, s in summaries.items():
            st.markdown(f"**{plain(name)}**")
            st.dataframe(s, hide_index=True, width="stretch")


def show_downloads(result: LensComparison) -> None:
    for name, res in (("full-depth", result.full), ("schedule", result.path)):
        run_id = res.metadata["run_id"]
        cols = st.columns(len(DOWNLOAD_FORMATS))
        for col, (fmt, label) in zip(cols, DOWNLOAD_FORMATS.items(), strict=True):
            stem = f"lens-{name}_{file_stem(metadata_label(res.metadata))}_{run_id}"
            make = partial(lens_download, res.table, res.metadata, fmt, stem)
            data, file_name, mime = results.download(f"lens_{name}", run_id, fmt, make)
            col.download_button(
                f"{name}: {label}",
                data,
                file_name,
                mime,
                key=f"lens_dl_{name}_{fmt}",
                on_click="ignore",
                width="stretch",
                help=DOWNLOAD_HELP.get(fmt),
            )


def main() -> None:
    st.title("Layer lens")
    engine, schedule = state.engine_and_schedule(LensComparison)
    if engine is None:  # no model to run: the page's last result as kept
        show_result(LensComparison.last(), None)
        return
    L = engine.num_layers
    state.publish(L)
    st.caption(
        f"Model {code(engine.model_name)} ({L} layers) · schedule **{schedule.describe()}**. For every generated "
        "token and layer: the final norm and LM head applied to the residual stream after that layer, along "
        "the layers the token ran."
    )
    chat = reads_chat(engine)
    prompts = views.prompt_picker("lens", chat, current_choice().ref)
    chat_start_note(chat)
    sent = chat_prompts("lens", engine, prompts)
    c1, c2, c3 = st.columns([2, 1, 2])
    max_new = tokens_slider(c1, "lens", chat, state.max_new_tokens(L))
    batch_size = address.whole_number_input(
        c2, "Batch size", 1, 64, min(8, max(1, len(prompts))), "lens_batch"
    )
    tokens = c3.radio("The schedule reads", [FORCED, OWN], key="lens_tokens", **KEEP)
    now = {**settings_now(schedule, prompts, int(max_new), batch_size, tokens), **prompt_format(sent)}
    _, refused = views.prompt_refusal(engine, sent.prompts, int(max_new), "The lens")
    todo = [] if refused else work(engine, schedule, sent.prompts, int(max_new), batch_size, tokens)
    estimate = show_estimate(engine, todo, "Run the lens")
    if views.run_button("Run the lens", "lens", disabled=not prompts or bool(refused)):
        with views.run_marked("lens"):
            run(engine, prompts, schedule, int(max_new), batch_size, tokens, now, sent, estimate)
    result = LensComparison.shown(now)
    if result is None:
        if not refused:  # a refusal is said above, its button off: "Press Run the lens" would contradict it
            views.what_to_do("Run the lens", prompts)
        return
    show_result(result, now)


def show_result(result: LensComparison, now: dict | None) -> None:
    """A lens result: its agreement, heatmaps, per-layer figures, texts and downloads, none of which needs the
    model again."""
    provenance.show(result.settings, now, "Run the lens")
    show_agreement(result)
    st.header("Token by layer")
    show_heatmaps(result)
    st.header("Per layer")
    show_layers(result)
    st.header("Outputs")
    texts = {"prompt": result.prompts, names(result)["full"]: result.full.texts}
    if result.tokens == OWN:  # teacher-forced, the schedule's path was fed full depth's text
        texts[names(result)["path"]] = result.path.texts
    views.show_outputs(texts)
    st.header("Downloads")
    show_downloads(result)


main()
