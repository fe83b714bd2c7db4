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

import streamlit as st

from app.dashboard import provenance, results, state, views
from app.dashboard.address import KEEP
from app.dashboard.models import current_choice
from app.dashboard.provenance import prompts_setting, setting
from app.dashboard.results import LensComparison
from app.dashboard.tracefiles import DOWNLOAD_FORMATS
from skipcore.errors import UserError
from skipcore.lens import compare_with_full_depth, layer_lens, layer_summary, write_lens
from skipcore.lens.summary import FULL_DEPTH
from skipcore.plots.lens import STATS, agreement_figure, layer_summary_figure, lens_heatmap

FORCED, OWN = "Full depth's output (teacher-forced)", "Its own decode"


def lens_download(table, metadata: dict, fmt: str, stem: str) -> tuple[bytes, str, str]:
    """(bytes, file name, MIME type) of a lens table: Parquet, or a zip of CSV/JSONL and its .meta.json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_lens(table, Path(tmp) / f"{stem}.{fmt}", metadata)
        if fmt == "parquet":
            return path.read_bytes(), path.name, "application/vnd.apache.parquet"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in (path, path.with_name(path.name + ".meta.json")):
                zf.write(p, p.name)
        return buf.getvalue(), f"{path.name}.zip", "application/zip"


def settings_now(schedule, prompts: list[str], max_new: int, batch_size: int, tokens: str) -> dict:
    """What `Run the lens` would use now, as its result will say it."""
    choice = current_choice()
    return {
        "model": setting(choice.shown(), choice.source),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "prompts": prompts_setting(prompts),
        "tokens": setting(str(max_new)),
        "batch size": setting(str(batch_size)),
        "the schedule reads": setting(tokens),
    }


def run(
    engine, prompts: list[str], schedule, max_new: int, batch_size: int, tokens: str, settings: dict
) -> None:
    what = f"{len(prompts)} prompts × {max_new} tokens"
    bar = st.progress(0.0, text=f"Reading every layer of {what}…")

    def progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Reading every layer of {what}: batch {done} of {total}")

    try:
        cmp = compare_with_full_depth(engine, prompts, schedule, max_new, batch_size, progress=progress)
        path = cmp.path
        if tokens == OWN:
            bar.progress(1.0, text=f"Reading the schedule's own decode of {what}…")
            path = layer_lens(engine, prompts, schedule, max_new, batch_size)
    except UserError as e:
        bar.empty()
        st.error(f"The lens failed: {e}")
        return
    bar.progress(1.0, text=f"Read every layer of {what}")
    LensComparison(prompts, schedule.describe(), tokens, cmp.full, path, cmp.agreement, settings).keep()


def show_agreement(result: LensComparison) -> None:
    a = result.agreement
    path = result.path
    s = path.summary
    c = st.columns(4)
    c[0].metric(
        "Agreement with full depth",
        f"{a.overall:.1%}",
        help="Fed full depth's output, the fraction of decode tokens (steps ≥ 1) whose skip path ranks full "
        "depth's token first: what the schedule would decode as full depth did, given the same prefix.",
    )
    c[1].metric("Decode tokens", f"{a.tokens}")
    c[2].metric("Layer speedup", f"{s['layer_speedup']:.2f}x", help="of the schedule's path shown below")
    c[3].metric("Mean layers run", f"{s['mean_layers_run']:.1f} of {path.num_layers}")
    st.plotly_chart(agreement_figure({result.label: a}), key="lens_agreement", width="stretch")


def show_heatmaps(result: LensComparison) -> None:
    full, path = result.full, result.path
    c1, c2 = st.columns(2)
    stat = c1.selectbox("Colour by", list(STATS), format_func=lambda k: STATS[k][0], key="lens_stat", **KEEP)
    with c2:
        sample = views.sample_picker(full.trace, "lens_sample", result.prompts)
    width = max(t[t["sample"] == sample]["step"].max() for t in (full.table, path.table)) + 1
    on = "full depth's output" if result.tokens == FORCED else "its own decode"
    left, right = st.columns(2)
    for col, res, title in (
        (left, full, "Full depth"),
        (right, path, f"{result.label}, on {on}"),
    ):
        fig = lens_heatmap(res.table, sample, stat, title=title)
        fig.update_xaxes(range=[-0.5, width - 0.5])  # the same token columns in both panels
        col.plotly_chart(fig, key=f"lens_heat_{title}", width="stretch")
    st.caption(
        "Grey cells are layers the token skipped: its residual stream passes them unchanged, so there is no "
        "read-out of their own (it would repeat the layer below). Hover a cell for the read-out's top tokens."
    )


def show_layers(result: LensComparison) -> None:
    summaries = {
        FULL_DEPTH: layer_summary(result.full.table),
        result.label: layer_summary(result.path.table),
    }
    st.plotly_chart(layer_summary_figure(summaries, title=""), key="lens_layers", width="stretch")
    with st.expander("Per-layer table"):
        for name, s in summaries.items():
            st.markdown(f"**{name}**")
            st.dataframe(s, hide_index=True, width="stretch")


def show_downloads(result: LensComparison) -> None:
    for name, res in (("full-depth", result.full), ("schedule", result.path)):
        run_id = res.metadata["run_id"]
        cols = st.columns(len(DOWNLOAD_FORMATS))
        for col, (fmt, label) in zip(cols, DOWNLOAD_FORMATS.items(), strict=True):
            make = partial(lens_download, res.table, res.metadata, fmt, f"lens-{name}-{run_id}")
            data, file_name, mime = results.download(f"lens_{name}", run_id, fmt, make)
            col.download_button(
                f"{name}: {label}",
                data,
                file_name,
                mime,
                key=f"lens_dl_{name}_{fmt}",
                on_click="ignore",
                width="stretch",
            )


def main() -> None:
    st.title("Layer lens")
    engine, schedule = state.engine_and_schedule()
    L = engine.num_layers
    state.publish(L)
    st.caption(
        f"Model `{engine.model_name}` ({L} layers) · schedule **{schedule.describe()}**. For every generated "
        "token and layer: the final norm and LM head applied to the residual stream after that layer, along "
        "the layers the token ran."
    )
    prompts = views.prompt_picker("lens")
    c1, c2, c3 = st.columns([2, 1, 2])
    max_new = c1.slider("Tokens to generate", 1, 256, state.max_new_tokens(L), key="lens_max_new", **KEEP)
    batch_size = c2.number_input("Batch size", 1, 64, min(8, max(1, len(prompts))), key="lens_batch", **KEEP)
    tokens = c3.radio("The schedule reads", [FORCED, OWN], key="lens_tokens", **KEEP)
    now = settings_now(schedule, prompts, int(max_new), int(batch_size), tokens)
    if st.button("Run the lens", type="primary", key="lens_run", disabled=not prompts):
        run(engine, prompts, schedule, int(max_new), int(batch_size), tokens, now)
    result = LensComparison.last()
    if result is None:
        st.info("Choose prompts and press **Run the lens**.")
        return
    provenance.show(result.settings, now, "Run the lens")
    show_agreement(result)
    st.subheader("Token by layer")
    show_heatmaps(result)
    st.subheader("Per layer")
    show_layers(result)
    st.subheader("Outputs")
    texts = {"prompt": result.prompts, FULL_DEPTH: result.full.texts}
    if result.tokens == OWN:  # teacher-forced, the schedule's path was fed full depth's text
        texts[result.label] = result.path.texts
    st.table(texts)  # wrapped, never cut off
    st.subheader("Downloads")
    show_downloads(result)


main()
