"""Page pieces used by more than one page: the prompt picker, sampling settings and the trace views.

The same `show_trace` draws a trace fresh from the engine (Generate), one per policy (Compare) and an
uploaded file (Trace explorer), so a trace looks the same wherever it came from.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.dashboard import address, figures, numbers, paths, results, speculation
from app.dashboard.address import KEEP
from app.dashboard.markdown import code, plain, texts_table
from app.dashboard.paths import DATASET_DIR, display_path
from app.dashboard.tracefiles import DOWNLOAD_FORMATS, DOWNLOAD_HELP, trace_download
from skipcore import Sampling, plots, summarize
from skipcore.errors import UserError
from skipcore.labels import file_stem, metadata_label, run_family
from skipcore.measure.summary import speedup_text, step_time_spread
from skipcore.models.reference import ModelRef
from skipcore.plots.trace import rows_by_sample

EXAMPLE_PROMPTS = (
    "MR: name[The Eagle], eatType[coffee shop], food[French], priceRange[cheap], area[riverside]\nText:\n"
    "MR: name[Green Man], food[Italian], customer rating[5 out of 5], familyFriendly[yes]\nText:"
)
CHAT_EXAMPLE_PROMPTS = (  # what an instruct model is made for: a user's questions
    "In two sentences, what makes a good riverside coffee shop?\n"
    "Describe The Eagle, a cheap French coffee shop by the river, in one sentence."
)
TYPED, FROM_DATA = "Type prompts", "From a data split"
# what a trace's figures draw, by the trace's own column names (so their CSV reads as a trace does): a sample's
# tokens (the heatmap, FLOPs and KV cache; `flops_total` where a policy's own work adds to a token's cost) and each
# batch step's time
TOKEN_NUMBERS = ("step", "token", "num_layers_run", "layer_mask", "flops", "flops_total", "flops_full",
                 "kv_cache_bytes", "kv_cache_bytes_full")  # fmt: skip
STEP_TIME_NUMBERS = ("batch", "step", "num_layers_run", "step_ms")


@st.cache_data(show_spinner=False)
def _split_examples(split: str) -> list:
    """Every example of a split of the shipped corpus (`skipcore.data.Example`s)."""
    from skipcore.data import load_examples

    return load_examples(DATASET_DIR, split=split)


def _split_prompt_blocks(text: str) -> list[str]:
    """Typed prompts: one per line, except that an E2E prompt spans two lines ('MR: ...' then 'Text:')."""
    prompts: list[str] = []
    for line in (ln.rstrip() for ln in text.splitlines()):
        if not line.strip():
            continue
        if line.strip() == "Text:" and prompts and prompts[-1].startswith("MR:") and "\n" not in prompts[-1]:
            prompts[-1] += "\nText:"
        else:
            prompts.append(line)
    return prompts


def references(key: str) -> list[list[str]] | None:
    """The references of the prompts `prompt_picker(key)` drew from a data split; None for typed prompts."""
    return st.session_state.get(f"{key}_references")


def prompt_picker(key: str, chat: bool = False, model: ModelRef | None = None) -> list[str]:
    """A batch of prompts, typed or drawn from a split of the shipped synthetic E2E corpus (whose references
    `references(key)` then gives, for scoring). Typed prompts start from E2E meaning representations, or for an
    instruct model (`chat`) from questions, in a box of its own so that neither kind's text is carried over. Drawn
    rows reach `model` (the chosen model) in the prompt format skipcore fine-tuned it on, as a sweep gives them
    (`skipcore.evaluate.sweep.units.for_model`), said under the prompts where that is not E2E's."""
    source = st.radio("Prompts", [TYPED, FROM_DATA], horizontal=True, key=f"{key}_source", **KEEP)
    st.session_state[f"{key}_references"] = None
    if source == TYPED:
        text_key, example = (
            (f"{key}_chat_text", CHAT_EXAMPLE_PROMPTS) if chat else (f"{key}_text", EXAMPLE_PROMPTS)
        )
        address.text_from_address(text_key, example)
        text = st.text_area(
            "One prompt per line" + ("" if chat else " (an E2E prompt may put `Text:` on its own line)"),
            height=130,
            key=text_key,
            persist_state="session",
        )
        if not address.keep_text(text_key, text, example):
            st.caption(
                "These prompts are too long to keep in the page's address: a reload or a shared link starts from "
                "the example prompts (they stay while this tab is open)."
            )
        return _split_prompt_blocks(text)
    splits = sorted(p.stem for p in DATASET_DIR.glob("*.csv")) if DATASET_DIR.is_dir() else []
    if not splits:
        st.warning(f"No data splits found in {code(display_path(DATASET_DIR))}; type prompts instead.")
        return []
    c1, c2, c3 = st.columns(3)
    split = c1.selectbox(
        "Split", splits, index=splits.index("dev") if "dev" in splits else 0, key=f"{key}_split", **KEEP
    )
    try:
        pool = _split_examples(split)
    except UserError as e:
        st.error(f"Cannot read the {split} split: {e}")
        return []
    count = address.whole_number_input(
        c2, "How many", 1, min(64, len(pool)), min(4, len(pool)), f"{key}_count"
    )
    start = address.whole_number_input(c3, "Starting at example", 0, max(0, len(pool) - 1), 0, f"{key}_start")
    from skipcore.data import format_prompt
    from skipcore.evaluate.sweep.units import for_model

    drawn = pool[start : start + count]
    chosen, note = for_model(drawn, model) if model is not None else (drawn, "")
    st.session_state[f"{key}_references"] = [list(ex.references) for ex in chosen]
    prompts = [format_prompt(ex.task, ex.source) for ex in chosen]
    if note:
        st.caption(f"{plain(note)}.")
    with st.expander(f"{len(prompts)} prompts from {split}"):
        for p in prompts:
            st.text(p)
    return prompts


KEPT_UPLOAD = "_kept_upload_"  # + an upload box's key, in the session: (file name, bytes) of its last upload
HELD_UPLOAD = "_held_upload_"  # + an upload box's key, in the session: the box held a file when last drawn


def kept_upload(label: str, types: list[str], key: str) -> tuple[str, bytes] | None:
    """An upload box whose file stays while the session does: Streamlit empties an upload box when its page is
    left (it keeps no upload's state off its page), so the page came back without the table or trace it drew. Where
    the box is new (its page opened again) and the session holds its last upload, that file is shown again, said
    so, with a button to forget it; emptied by the user (the box's own remove), it is forgotten."""
    kept, held = KEPT_UPLOAD + key, HELD_UPLOAD + key
    # the user emptied the box that held a file; a box new on the page (opened again) held nothing
    removed = key in st.session_state and st.session_state.get(held, False)
    upload = st.file_uploader(label, type=types, key=key, max_upload_size=paths.upload_limit_mb())
    st.session_state[held] = upload is not None
    if upload is not None:
        st.session_state[kept] = (upload.name, upload.getvalue())
        return st.session_state[kept]
    if removed:
        st.session_state.pop(kept, None)
    if kept not in st.session_state:
        return None
    name, data = st.session_state[kept]
    c1, c2 = st.columns([5, 1], vertical_alignment="center")
    c1.caption(f"Showing {plain(name)}, uploaded earlier in this session: upload another file to replace it.")
    if c2.button("Forget it", key=f"{key}_forget", help="empty the page of this file"):
        del st.session_state[kept]
        st.rerun()
    return name, data


def what_to_do(button: str, prompts: list[str], unchosen: str | None = None) -> None:
    """The line a page shows before its first result: what is still to choose (the prompts, and `unchosen`: what
    else the page needs that is not chosen yet), or, once all is there, only the button to press (it said
    "Choose prompts" beside prompts already filled in)."""
    missing = [m for m in (unchosen, None if prompts else "prompts") if m]
    if missing:
        st.info(f"Choose {' and '.join(missing)}, then press **{button}**.")
    else:
        count = f"the {len(prompts)} prompts" if len(prompts) > 1 else "the prompt"
        st.info(f"Press **{button}** to run {count}.")


def _working(key: str) -> str:
    return f"_working_{key}"


# in the page address from a page's run's start, the page's last run there: the run's key and its own token (a
# reload starts a new session, which has only the address)
WORKING = "run"
OWN_MARKS = "_run_marks"  # the marks of the runs this session started: a reload's new session has none
MARKS_KEPT = 10_000  # the runs `_marks` remembers, the newest: a few bytes each


@st.cache_resource(show_spinner=False)
def _marks() -> tuple[dict[str, bool], threading.Lock]:
    """Every session's run marks (`run_marked`) this server saw, oldest first: True for a run that finished, False
    for one that started and has not, and the lock their writers take (sessions run in threads of their own). A
    reload's new session, or another tab on a copied address, has only the mark: here it learns what became of the
    run. A server started anew knows none: a mark from before says nothing."""
    return {}, threading.Lock()


def _marked(mark: str, finished: bool) -> None:
    marks, lock = _marks()
    with lock:
        marks[mark] = finished
        while len(marks) > MARKS_KEPT:
            marks.pop(next(iter(marks)))


@contextmanager
def run_marked(key: str) -> Iterator[None]:
    """A page's run, marked while it works. Streamlit stops a page's script when another page is opened, a widget
    reruns the page, or the tab is reloaded, and the run's results go with it; the mark left standing says so on
    the page's next draw (`run_button`) instead of a page that silently has nothing. The mark is in the session
    (leaving the page, a widget) and in the page address (a reload, whose new session has only the address), and
    the server notes the run's start and its end (`_marks`). A run that ends, or ends in an error it shows, takes
    its session's mark away and is noted as finished; its address mark stays where it is, the address of its
    results: each change of the address is a browser history entry, and taking it out again made a second one
    per run (Back stayed on the page twice). The next run's mark replaces it."""
    mark = f"{key}.{uuid.uuid4().hex[:8]}"
    st.session_state[_working(key)] = True
    st.session_state.setdefault(OWN_MARKS, set()).add(mark)
    _marked(mark, False)
    st.query_params[WORKING] = mark
    yield  # no finally: the stop Streamlit raises in a stopped script leaves the marks
    st.session_state.pop(_working(key), None)
    _marked(mark, True)


def run_button(label: str, key: str, disabled: bool = False) -> bool:
    """A page's run button (its widget key `{key}_run`), and beside it, once, that the page's last run
    (`run_marked` under `key`) was stopped before it finished, unless the button starts a new one now. The address's
    mark says so where this server saw that run start and never end (a mark of a finished run, or one it never
    saw, says nothing: the address of a finished run's results, copied or reloaded, or kept past a restart); said,
    it is taken out of the address."""
    pressed = st.button(label, type="primary", key=f"{key}_run", disabled=disabled)
    in_session = st.session_state.pop(_working(key), False)
    mark = st.query_params.get(WORKING, "")
    # the address's mark says what a new session cannot know; a run this session started is said by the session
    # (Forward onto the address of a run stopped by Back said it again, as a reload)
    ours = mark in st.session_state.get(OWN_MARKS, ())
    stopped = mark.rsplit(".", 1)[0] == key and _marks()[0].get(mark) is False and not ours
    if stopped:
        del st.query_params[WORKING]
    if (in_session or stopped) and not pressed:
        why = (
            "the page was left, or changed, while it worked, which stops it"
            if in_session  # the address alone: a new session, whose tab may be a copy of the address
            else "its tab was reloaded while it worked (or this address was copied from a tab where it worked)"
        )
        st.warning(
            f"The last run did not finish: {why}, and nothing of it was kept. Press **{label}** again and stay "
            "on this page until it ends.",
            icon=":material/stop_circle:",
        )
    return pressed


def checked_prompt_ids(engine, prompts: list[str], max_new: int) -> tuple[list[list[int]], str | None]:
    """The prompts' token ids, and why a run would be refused for their length (None where it would not), said
    before a run is pressed: the token slider reaches the model's whole position range, which no prompt leaves
    room for."""
    from skipcore.decode.checks import check_prompt_tokens

    try:
        return check_prompt_tokens(engine.tokenizer, engine.max_positions, None, prompts, max_new), None
    except UserError as e:
        return [], str(e)


def prompt_refusal(engine, prompts: list[str], max_new: int, what: str) -> tuple[list[list[int]], str | None]:
    """`checked_prompt_ids`, and its refusal said once on the page ('`what` would be refused: …') before the run
    is pressed, so a page disables its button instead of running and failing on every prompt, policy or pass.
    No prompts: nothing to check."""
    if not prompts:
        return [], None
    ids, refused = checked_prompt_ids(engine, prompts, max_new)
    if refused:
        st.warning(f"{what} would be refused: {refused}", icon=":material/straighten:")
    return ids, refused


def batch_filled(batch: int, rows: int, rows_said: str) -> int:
    """The batch a page's run takes: `batch`, or the one batch of all `rows` where they cannot fill it, said in a
    caption ('Batch size 8 is more than the 2 examples: ...'), as the library's `batch_that_fills` warns: a larger
    batch would run those rows under its name."""
    if batch <= rows:
        return batch
    st.caption(f"Batch size {batch} is more than the {rows} {rows_said}: they run as one batch of {rows}.")
    return rows


def warn_small_sample(n: int, compared: str, remedy: str) -> None:
    """Under scores from `n` examples: the project's one small-sample warning (`skipcore.metrics.sample_size`),
    where they are too few to rank `compared` (policies, trials, settings); `remedy` says how to score more here."""
    from skipcore.metrics.sample_size import small_sample_warning

    warning = small_sample_warning(n, compared, remedy)
    if warning:
        st.warning(warning)


def batch_size_input(container, key: str, prompts: list[str]) -> int:
    """Batch size, following the number of prompts when that changes (so 16 prompts never keep the 2 that two
    prompts set); a batch size the address gives is kept on load. Returns the batch a run makes of it: no more
    rows than prompts (a run records the batch it ran, not 8 for two prompts)."""
    wanted = max(1, min(64, len(prompts)))
    seen = st.session_state.get(f"{key}_for")
    st.session_state[f"{key}_for"] = len(prompts)
    if seen is not None and seen != len(prompts):
        st.session_state[key] = wanted
    typed = address.whole_number_input(container, "Batch size", 1, 64, wanted, key)
    return min(typed, len(prompts)) if prompts else typed


# the fewest seconds between two redraws of a run's progress bar: redrawn at every decode step, a small model's
# steps ran about 4x slower in the browser than timed alone (each redraw a message to the page, drawn there)
PROGRESS_EVERY_S = 0.2


def throttled(update: Callable[[int, int], None]) -> Callable[[int, int], None]:
    """`update(done, total)` at most once every `PROGRESS_EVERY_S`, and always for the last step."""
    last = -math.inf

    def call(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done >= total or now - last >= PROGRESS_EVERY_S:
            last = now
            update(done, total)

    return call


def progress_text(done: int, total: int, max_new_tokens: int) -> str:
    """Where a run is: its batch and the step within it (a batch whose rows all stopped ends early)."""
    batches = max(1, total // max_new_tokens)
    batch = min(batches, done // max_new_tokens + (done % max_new_tokens > 0)) or 1
    step = done - (batch - 1) * max_new_tokens
    return f"batch {batch} of {batches}, step {step} (at most {max_new_tokens}; rows stop at EOS)"


def generated_text(trace: pd.DataFrame, prompts: int, max_new_tokens: int) -> str:
    """What a run produced, counted from its trace: tokens of rows still running, not the cap."""
    per_row = (~trace["finished"].astype(bool)).groupby(trace["sample"]).sum()
    low, high = int(per_row.min()), int(per_row.max())
    each = f"{low}-{high} per prompt, at most {max_new_tokens}" if low != high else f"{low} per prompt"
    if low == high < max_new_tokens:
        each += f" of at most {max_new_tokens}"
    return f"Generated {int(per_row.sum())} tokens for {prompts} prompt{'s' if prompts != 1 else ''} ({each})"


def sampling_settings(key: str) -> Sampling | None:
    """Greedy by default; sampling with temperature, top-k, top-p and a seed when switched on. A greedy run is
    greedy whatever the boxes hold (they wait, off, for sampling): its trace records no sampling setting, so the
    same greedy setup has one configuration hash, as the command line's refusal of them without --do-sample
    keeps it."""
    with st.expander("Sampling"):
        do_sample = st.checkbox("Sample (off: greedy)", False, key=f"{key}_do_sample", **KEEP)
        c1, c2, c3, c4 = st.columns(4)
        temperature = c1.slider(
            "Temperature", 0.05, 2.0, 1.0, 0.05, key=f"{key}_temp", disabled=not do_sample, **KEEP
        )
        top_k = address.whole_number_input(
            c2, "Top-k (0 = off)", 0, 1000, 0, f"{key}_topk", disabled=not do_sample
        )
        top_p = c3.slider("Top-p", 0.05, 1.0, 1.0, 0.05, key=f"{key}_topp", disabled=not do_sample, **KEEP)
        seed = address.whole_number_input(c4, "Seed", 0, 2**31 - 1, 0, f"{key}_seed", disabled=not do_sample)
    if not do_sample:
        return Sampling()
    try:
        return Sampling(do_sample, float(temperature), top_k, float(top_p), seed)
    except UserError as e:
        st.error(str(e))
        return None


def summary_metrics(trace: pd.DataFrame) -> dict:
    """The run summary recomputed from the trace itself (so an uploaded trace gets one too).

    Speedups use the project's shared per-token / per-batch accounting, so a CALM trace (depth per token)
    and a static one are read the same way as in the sweeps.
    """
    L = len(str(trace["layer_mask"].iloc[0]))
    return summarize(trace, L)


def ceiling(shapes, schedule, context: int) -> float:
    """The FLOPs speedup the model's LM head leaves to layer skipping under the schedule's mode and warmup, for
    tokens attending to at most `context` positions (`skipcore.measure.theory.flops_ceiling`): the bound of the
    numbers beside it, costed at the longest context they reach."""
    from skipcore.measure.theory import flops_ceiling

    mode, warmup = getattr(schedule, "mode", "skip"), getattr(schedule, "warmup_layers", 1)
    return flops_ceiling(shapes, mode, warmup, context)


def flops_metric(container, speedup: float, at_most: float | None, width: str = "stretch") -> None:
    """The decode FLOPs speedup, beside the most the model's head allows ('of at most 4.31x'); `width` as
    `st.metric`'s ("content" in a row that wraps)."""
    container.metric(
        "FLOPs speedup",
        speedup_text(speedup),
        None if at_most is None else f"of at most {at_most:.2f}x",
        delta_color="off",
        delta_arrow="off",
        width=width,
        help="decode steps (s ≥ 1) only. 'At most': the FLOPs speedup if every layer this mode can skip were "
        "skipped; the LM head runs for every token whatever the schedule, so a model whose head is a large part "
        "of a token (a big vocabulary) allows little.",
    )


def show_metrics(summary: dict, at_most: float | None = None) -> None:
    """A run's speedups, KV cache and tokens/s; `at_most`: the model's head ceiling on its FLOPs speedup. One row
    that wraps, each metric as wide as its words (as the designer's), so no label or value is cut on a narrow
    screen."""
    row = st.container(horizontal=True, gap="medium")
    tpp = summary.get("tokens_per_full_pass")
    speculative = tpp is not None and tpp == tpp  # its per-batch speedup has a metric of its own below
    per_batch = summary.get("batch_layer_speedup", summary["layer_speedup"])
    layer, batch = speedup_text(summary["layer_speedup"]), speedup_text(per_batch)
    row.metric(
        "Layer speedup",
        layer,
        None if batch == layer or speculative else f"{batch} per batch",
        delta_color="off",
        delta_arrow="off",  # a ratio, not a change: an arrow read 0.99x as a gain
        help="L x tokens / layers run, over the decode steps of rows still running",
        width="content",
    )
    flops_metric(row, summary["flops_speedup_decode"], at_most, width="content")
    row.metric(
        "… with the prompt",
        speedup_text(summary["flops_speedup_with_prompt"]),
        help="the prefill (step 0) included",
        width="content",
    )
    saved = summary["kv_saved_fraction"]
    row.metric(
        "KV cache",
        plots.human_bytes(summary["kv_cache_bytes"]),
        f"-{saved:.0%} vs full" if saved >= 0.005 else None,  # a full-depth run saves nothing: no arrow
        delta_color="inverse",
        help=f"full depth: {plots.human_bytes(summary['kv_cache_bytes_full'])}"
        + ("" if saved >= 0.005 else " (this run wrote all of it)"),
        width="content",
    )
    tps = summary.get("tokens_per_s")
    row.metric(
        "Tokens / s (one run)",
        "n/a" if tps is None or tps != tps else f"{tps:.1f}",
        help="One run on a shared machine. For a measured speedup, use the sweep (paired, repeated runs "
        "against full depth) or `skipcore generate --timing-repeats N`.",
        width="content",
    )
    if speculative:  # its own numbers, and what its speedups mean
        own = st.container(horizontal=True, gap="medium")
        for label, (value, why) in speculation.metrics(summary).items():
            own.metric(label, value, help=why, width="content")
        st.caption(speculation.NOTE)


def show_step_times(trace: pd.DataFrame) -> None:
    """The run's step times as a median and spread, and a warning when one run was too noisy to read."""
    spread = step_time_spread(trace)
    if not spread["steps"]:
        return
    st.caption(
        f"Decode steps: median {_ms(spread['median_ms'])} ms (10th-90th percentile "
        f"{_ms(spread['p10_ms'])}-{_ms(spread['p90_ms'])} ms) over {spread['steps']} batch steps of this one run."
    )
    if spread["spikes"]:
        st.warning(
            f"This run was noisy: {spread['spikes']} of {spread['steps']} decode steps took more than "
            f"{spread['spike_ratio']:g}x the median step with the same layers (up to {_ms(spread['max_ms'])} ms). "
            "That is the machine, not the schedule: one run is not a measurement. Measured speedups come from "
            "paired, repeated runs (the sweep, or `skipcore generate --timing-repeats N`)."
        )


def _ms(milliseconds: float) -> str:
    """A step time in milliseconds: two decimals, or four significant digits where fixed point would run long (an
    uploaded trace's times are whatever its file holds)."""
    return f"{milliseconds:.2f}" if abs(milliseconds) < 1e5 else f"{milliseconds:.4g}"


def sample_labels(trace: pd.DataFrame) -> dict[int, str]:
    """A label per sample the trace holds, when no prompts came with it: the start of what it generated. Only the
    samples there are: an uploaded trace may number its samples from anywhere (one numbered 10^9 is one label).
    All of them from one grouping of the trace, as the explorer redraws them on every rerun."""
    texts = rows_by_sample(trace)["token"].agg(lambda tokens: "".join(tokens.astype(str)))
    return {
        s: "… " + texts[s][:60].strip() if s in texts.index else ""  # every row ended at once: no text
        for s in sorted(int(s) for s in trace["sample"].unique())
    }


def sample_picker(trace: pd.DataFrame, key: str, labels: list[str] | None = None) -> int:
    """Which row to draw, labelled by its prompt (or its output). The widget is keyed by the run and its labels,
    so a new run, or another file of the same run (a trimmed copy, whose rows' outputs differ), never keeps the last
    one's label: the browser keeps a choice by its label, and a label the options no longer hold came back as the
    text itself, not a row."""
    samples = sorted(int(s) for s in trace["sample"].unique())
    named = dict(enumerate(labels)) if labels else sample_labels(trace)

    def fmt(s: int) -> str:
        if s in named:
            text = named[s].replace("\n", " ")
            return f"{s}: {text[:70]}{'…' if len(text) > 70 else ''}"
        return str(s)

    run = str(trace["run_id"].iloc[0])
    labelled = zlib.crc32("\0".join(map(fmt, samples)).encode())
    return st.selectbox("Sample (batch row)", samples, format_func=fmt, key=f"{key}_{run}_{labelled:08x}")


def run_name(metadata: dict | None) -> str | None:
    """The run a trace's metadata describes, named by everything that made it (`skipcore.labels.metadata_label`);
    None for a trace that came without its metadata."""
    return metadata_label(metadata) if metadata and metadata.get("model") is not None else None


def run_color(metadata: dict | None) -> str:
    """The colour the session draws this run in everywhere (its family's: `figures.run_styles`)."""
    name = run_name(metadata)
    if name is None:
        return plots.ACTUAL_COLOR
    meta = metadata or {}
    family = run_family(meta.get("policy"), meta.get("mode"), meta.get("schedule"))
    return figures.run_styles({name: family})[name].color


def download_buttons(trace: pd.DataFrame, metadata: dict, key: str) -> None:
    """Parquet (metadata inside) or a zipped CSV/JSONL (one member, the metadata in the zip's comment, as
    `write_trace` writes `.csv.zip`), named by the run."""
    run_id = str(trace["run_id"].iloc[0])
    name = run_name(metadata)
    stem = f"trace_{file_stem(name)}_{run_id}" if name else f"trace-{run_id}"
    cols = st.columns(len(DOWNLOAD_FORMATS))
    for col, (fmt, label) in zip(cols, DOWNLOAD_FORMATS.items(), strict=True):
        try:
            make = partial(trace_download, trace, metadata, fmt, stem)
            data, name, mime = results.download(key, run_id, fmt, make)
        except UserError as e:
            col.error(f"Cannot export {fmt}: {e}")
            continue
        col.download_button(
            f"Download {label}", data, name, mime, key=f"{key}_dl_{fmt}", on_click="ignore", width="stretch",
            help=DOWNLOAD_HELP.get(fmt),
        )  # fmt: skip


def token_heatmap(
    trace: pd.DataFrame, sample: int, shown: tuple[int, int] | None = None, title: str | None = None
) -> go.Figure:
    """`plots.exit_heatmap` (a speculative trace's kept drafts marked) with a colour key, over the steps `shown`
    (`figures.token_range`; None: every token)."""
    fig = plots.exit_heatmap(trace, sample, title=title)
    return figures.with_token_range(figures.with_mask_key(fig), shown)


def show_outputs(table: dict[str, list]) -> None:
    """Prompts and outputs in full, as typed: a table whose cells wrap (a data grid would cut long outputs off)
    and show their text, never Markdown (`markdown.texts_table`)."""
    st.html(texts_table(table))


def show_trace(
    trace: pd.DataFrame,
    metadata: dict,
    key: str,
    labels: list[str] | None = None,
    downloads: bool = True,
    at_most: float | None = None,
) -> None:
    """Summary (the FLOPs speedup beside the model's head ceiling `at_most`, where known), per-token exit heatmap,
    FLOPs and KV per step, step latency, raw rows and downloads: each figure named by the run (its title and its
    file) and drawn in the run's colour, as every page draws it."""
    name, color = run_name(metadata), run_color(metadata)
    if name:
        st.caption(f"Run: **{plain(name)}**")  # an uploaded trace's metadata names it: shown as written
    show_metrics(summary_metrics(trace), at_most)
    sample = sample_picker(trace, f"{key}_sample", labels)
    rows = plots.sample_rows(trace, sample)
    shown = figures.token_range(rows["step"], f"{key}_tokens_{trace['run_id'].iloc[0]}_{sample}")
    figures.show(token_heatmap(trace, sample, shown), f"{key}_heatmap", f"layers-sample-{sample}", run=name)
    cost = plots.cost_figure(rows, title=f"Compute and KV cache, sample {sample}", color=color)
    figures.show(figures.with_visible_points(cost) if len(rows) <= 3 else cost, f"{key}_costs", run=name)
    stem = file_stem(name or f"trace-{trace['run_id'].iloc[0]}")
    numbers.figure_numbers(
        f"Sample {sample}'s numbers, token by token",
        rows[[c for c in TOKEN_NUMBERS if c in rows]],
        f"{key}_token_numbers",
        f"{stem}_sample-{sample}",
        "The heatmap's and the cost figure's numbers: each generated token's layers (layer_mask: 1 ran, layer 0 "
        "first), its FLOPs and the KV cache's bytes after it, beside full depth's; step 0 is the prompt's pass.",
    )
    show_step_times(trace)
    title = "Round latency (draft and verify)" if speculation.is_speculative(trace) else "Step latency"
    latency = figures.latency_figure(trace, title, color)
    figures.show(latency, f"{key}_latency", "step-latency", run=name)
    per_step = plots.batch_steps(trace)
    numbers.figure_numbers(
        "Step times, batch by batch",
        per_step[[c for c in STEP_TIME_NUMBERS if c in per_step]],
        f"{key}_step_numbers",
        f"{stem}_step-times",
        "The latency figure's numbers: each batch step's wall-clock time (every row of the batch shares it) and "
        "its layers" + (" (a step is a draft-and-verify round)." if "round" in trace else "."),
    )
    with st.expander("Trace rows"):
        st.dataframe(trace, hide_index=True)
    if metadata:
        with st.expander("Run metadata"):
            st.json(metadata, expanded=False)
    if downloads:
        download_buttons(trace, metadata, key)
