"""Compare policies: the same prompts at full depth, under skip, exit and middle (the designed budgets, three
ways of choosing layers), CALM-DEC (per-token confidence exit), adaptive SkipDecode (one batch budget that
drops when the batch is confident) and speculative SkipDecode (the designed schedule drafts, full depth verifies:
lossless), all through `engine.generate`, side by side with the heatmaps aligned; scored with BLEU and ROUGE
when the prompts come from a data split."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from app.dashboard import figures, history, numbers, provenance, speculation, state, views
from app.dashboard.address import KEEP
from app.dashboard.estimates import TimeLeft, prompt_tokens, show_estimate
from app.dashboard.models import current_choice
from app.dashboard.policy_inputs import policy_inputs
from app.dashboard.precision import model_setting
from app.dashboard.provenance import prompts_setting, sampling_setting, setting
from app.dashboard.results import CompareResult
from app.dashboard.trained import (
    chat_prompts,
    chat_start_note,
    flag_empty,
    prompt_format,
    reads_chat,
    skip_warning,
    tokens_slider,
)
from skipcore import Schedule, StaticPolicy, UserError, plots
from skipcore.labels import column_title, design_label, file_stem, metadata_label
from skipcore.measure.estimate import learn_from_run
from skipcore.measure.summary import SPIKE_RATIO, step_time_spread
from skipcore.policies import POLICY_CLASSES
from skipcore.schedule import MODES

FULL, CALM, ADAPTIVE, SPECULATIVE = "full depth", "calm", "adaptive", "speculative"
DYNAMIC = (CALM, ADAPTIVE, SPECULATIVE)  # the policies made from the design and their own parameters
STEP_MS = "median ms per decode step"  # of one run: its steps' median, not their mean


def policies(schedule: Schedule, params: dict[str, dict]) -> dict:
    """Each option's policy (None: full depth): the designed budgets under each mode, and each other policy made
    from the design (CALM-DEC ignores it; adaptive SkipDecode takes its mode and warmup and starts at full depth;
    speculative SkipDecode drafts with it) and its parameters as the page set them."""
    out = {FULL: lambda: None}
    for mode in MODES:
        # the design's warmup layers run in skip mode alone (a Schedule in another mode refuses them)
        warmup = schedule.warmup_layers if mode == "skip" else 1
        out[mode] = lambda mode=mode, warmup=warmup: StaticPolicy(
            dataclasses.replace(schedule, mode=mode, warmup_layers=warmup)
        )
    for name in DYNAMIC:
        out[name] = lambda name=name: POLICY_CLASSES[name].from_schedule(schedule, **params.get(name, {}))
    return out


def refusals(chosen: list[str], schedule: Schedule, params: dict, num_layers: int, max_new: int) -> dict:
    """policy -> why it cannot run with the page's settings (draft tokens past the tokens to generate, a floor
    above the model), said before Run all rather than after the other policies ran."""
    made, out = policies(schedule, params), {}
    for name in chosen:
        try:
            policy = made[name]()
            if policy is not None:
                policy.check(num_layers, max_new)
        except UserError as e:
            out[name] = str(e)
    return out


def run_policy(
    engine, name: str, schedule: Schedule, prompts, max_new: int, sampling, batch: int, params: dict
):
    """One policy's GenerationResult through the one decode loop."""
    return engine.generate(prompts, policies(schedule, params)[name](), max_new, sampling, batch)


def scores(results: dict, refs: list[list[str]]) -> dict[str, dict]:
    """BLEU, ROUGE and chrF of each policy's first output lines against the split's references."""
    from skipcore.evaluate.sweep.quality import first_line
    from skipcore.metrics import score_texts

    return {name: score_texts([first_line(t) for t in res.texts], refs) for name, res in results.items()}


def summary_table(results: dict, quality: dict | None = None) -> pd.DataFrame:
    rows = []
    for name, res in results.items():
        s = views.summary_metrics(res.trace)
        rows.append(
            {
                "policy": name,
                **{k: v for k, v in (quality or {}).get(name, {}).items() if k in ("bleu", "rougeL", "chrf")},
                "layer speedup (per token)": s["layer_speedup"],
                "layer speedup (per batch)": s["batch_layer_speedup"],
                "FLOPs speedup (decode)": s["flops_speedup_decode"],
                "FLOPs speedup (with prompt)": s["flops_speedup_with_prompt"],
                "tokens per full-depth pass": s["tokens_per_full_pass"],
                "drafts accepted": s["draft_acceptance"],
                "KV saved": s["kv_saved_fraction"],
                # the median: one slow step (the machine, not the policy) moved a mean 90x in one run
                STEP_MS: step_time_spread(res.trace)["median_ms"],
            }
        )
    return pd.DataFrame(rows)


def same_as_full(results: dict) -> tuple[int, int] | None:
    """(prompts whose speculative output equals full depth's, prompts), when both ran."""
    if FULL not in results or SPECULATIVE not in results:
        return None
    pairs = list(zip(results[FULL].texts, results[SPECULATIVE].texts, strict=True))
    return sum(a == b for a, b in pairs), len(pairs)


def precision_caveat(result) -> str | None:
    """Where speculative's run cannot keep full depth's tokens bit for bit (half precision on a GPU; float16 in a
    one-row batch on a CPU), what the command line says about it (`skipcore.models.dtype_choice.lossless_caveat`),
    naming the sidebar's picker as the way to float32."""
    import torch

    from skipcore.kernels.precision import DtypeChoice
    from skipcore.models.dtype_choice import lossless_caveat
    from skipcore.models.loading import DTYPES

    meta = result.metadata
    ran = DtypeChoice(DTYPES[meta["dtype"]], torch.device(meta["device"]).type, meta["dtype_reason"])
    count, size = len(result.texts), int(meta["batch_size"])
    return lossless_caveat(ran, count, size, exact_mode="float32 (Precision)")


def show_lossless(stored: CompareResult) -> None:
    """Say plainly what speculative's output is, and check it against full depth's when both ran."""
    if SPECULATIVE not in stored.results:
        return
    same = same_as_full(stored.results)
    caveat = precision_caveat(stored.results[SPECULATIVE])
    if stored.sampled:
        st.info(
            "Speculative (sampling): each token is distributed as full depth would sample it, so the texts "
            "need not match full depth's word for word; under greedy decoding they do."
        )
    elif same is None:
        st.info(
            f"Speculative (greedy): {caveat}."
            if caveat
            else "Speculative (greedy): its output is full depth's, token for token (add full depth to see it)."
        )
    elif same[0] == same[1]:
        st.success(
            f"Speculative output equals full depth's for {'the one prompt' if same[1] == 1 else f'all {same[1]} prompts'} "
            "(greedy decoding: lossless)."
        )
    else:
        st.warning(
            f"Speculative output equals full depth's for {same[0]} of {same[1]} prompts. A verification pass "
            "over several tokens adds in another order than one-token steps, so a token can differ only where "
            "full depth's top two logits (nearly) tie" + (f": {caveat}." if caveat else ".")
        )


def settings_now(schedule: Schedule, chosen: list[str], params: dict, prompts, max_new: int, sampling, batch):
    """What `Run all` would use now, as its result will say it."""
    choice = current_choice()
    return {
        "model": model_setting(choice),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "policies": setting(", ".join(chosen), {"policies": chosen, **params}),
        "prompts": prompts_setting(prompts),
        "max new tokens": setting(str(max_new)),
        "batch size": setting(str(batch)),
        "decoding": sampling_setting(sampling),
    }


def run_names(results: dict) -> dict[str, str]:
    """policy -> the name of its run: everything that made it (model, schedule or policy with every parameter,
    decoding; `skipcore.labels.metadata_label`), as Run history and every other page name the same run."""
    return {name: metadata_label(res.metadata) for name, res in results.items()}


def show_layers(results: dict) -> None:
    """Each policy's mean layers per decode step, each run in the style the session draws it in everywhere (the
    same colour and dash as on Run history), against full depth."""
    entries = [history.entry_of(res.trace, res.metadata, res.summary) for res in results.values()]
    styles = figures.run_styles(history.families(entries))
    fig = history.figure(entries, styles)
    figures.show(fig, "cmp_layers", "layers-per-step-by-policy")
    numbers.figure_numbers(
        "The figure's numbers, step by step",
        history.steps_table(entries),
        "cmp_steps",
        "layers-per-step-by-policy",
        history.STEPS_NOTE,
    )
    st.caption(
        "Each line is one policy's run, named by everything that made it (the costs table's short headers say "
        "the same name on hover); a run keeps its colour (its policy's or mode's) and its dash on every page, "
        "Run history included."
    )


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The costs table turned so that it fits the page: one column per policy, one row per measure, each value
    written as its measure reads ('2.05x', '45%'); the download keeps the numbers."""
    formats = {
        "tokens per full-depth pass": "{:.2f}",
        "drafts accepted": "{:.0%}",
        "KV saved": "{:.0%}",
        STEP_MS: "{:.1f}",
        **{c: "{:.1f}" for c in ("bleu", "rougeL", "chrf")},
    }
    out = table.set_index("policy").T.astype(object)
    for measure in out.index:
        fmt = formats.get(measure, "{:.2f}x" if "speedup" in measure else "{}")
        out.loc[measure] = [("-" if pd.isna(v) else fmt.format(v)) for v in table[measure]]
    out.index = [column_title(m) for m in out.index]
    return out.rename_axis("measure").reset_index()


def show_downloads(stored: CompareResult, table: pd.DataFrame) -> None:
    """The costs table (CSV) and each policy's trace (Parquet, or CSV/JSONL zips pandas reads)."""
    first = next(iter(stored.results.values())).metadata
    design = design_label(first.get("model"), (stored.settings.get("schedule") or (None, None))[1])
    numbers.csv_button(
        st,
        "Download the costs table (CSV)",
        table,
        f"compare-policies_{file_stem(design)}.csv",
        "cmp_dl_table",
    )
    results = stored.results
    name = st.selectbox("Trace of", list(results), key="cmp_dl_policy")
    res = results[name]
    views.download_buttons(res.trace, res.metadata, f"cmp_{name.replace(' ', '_')}")


def heatmap_numbers(traces: dict[str, pd.DataFrame], sample: int) -> pd.DataFrame:
    """What the heatmaps draw for `sample`, policy by policy: each generated token and the layers that made it."""
    columns = ["step", "token", "num_layers_run", "layer_mask"]
    return pd.concat(
        [plots.sample_rows(t, sample)[columns].assign(policy=name) for name, t in traces.items()],
        ignore_index=True,
    )[["policy", *columns]]


def show_heatmaps(stored: CompareResult) -> None:
    results = stored.results
    first = next(iter(results.values()))
    sample = views.sample_picker(first.trace, "cmp_sample", stored.prompts)
    traces = {name: res.trace for name, res in results.items()}
    fig = plots.stacked_exit_heatmap(traces, sample)
    names = run_names(results)
    colors = {name: views.run_color(res.metadata) for name, res in results.items()}
    for panel in fig.layout.annotations:  # each panel's title in its run's colour, its full name on hover
        if panel.text in names:
            panel.update(font_color=colors[panel.text], hovertext=names[panel.text])
    steps = {int(s) for t in traces.values() for s in plots.sample_rows(t, sample)["step"]}
    run = first.trace["run_id"].iloc[0]
    shown = figures.token_range(steps, f"cmp_tokens_{run}_{sample}")  # every panel: their axes are linked
    figures.show(figures.with_token_range(fig, shown), "cmp_heatmaps", f"layers-by-policy-sample-{sample}")
    numbers.figure_numbers(
        f"Sample {sample}'s numbers, token by token",
        heatmap_numbers(traces, sample),
        "cmp_token_numbers",
        f"layers-by-policy-sample-{sample}",
        "The heatmaps' numbers: each policy's generated tokens and the layers that made each (layer_mask: 1 ran, "
        "layer 0 first).",
    )
    st.caption(
        "One panel per policy, their token axes linked: zoom or pan one and every panel follows. Hover a cell for "
        "the token, its layers, its cost and its log-probability."
    )
    if SPECULATIVE in results:
        st.caption(
            "Speculative: every token ran all layers (the verification pass made it); ▼ marks a kept draft, "
            "and hovering a column gives its round, the draft pass that proposed it and its share of the "
            "round's cost."
        )


def work(chosen: list[str], schedule: Schedule, prompts: list[str], max_new: int, batch: int, engine) -> list:
    """What `Run all` decodes, for its time estimate: each policy over the prompts, a static mode's steps at the
    designed budgets' share of the layers, the dynamic policies at full depth (at most)."""
    from skipcore.measure.estimate import Decodes

    share = 1 / schedule.layer_speedup(max(2, max_new))
    tokens = prompt_tokens(engine, prompts)
    return (
        [Decodes(len(prompts), max_new, batch, tokens, share if n in MODES else 1.0) for n in chosen]
        if prompts
        else []
    )


def main() -> None:
    st.title("Compare policies")
    engine, schedule = state.engine_and_schedule(CompareResult)
    if engine is None:  # no model to run: the page's last result as kept
        show_result(CompareResult.last(), None)
        return
    L = engine.num_layers
    state.publish(L)
    st.caption(
        f"Static policies reuse the designed budgets **{schedule.describe()}** with each mode; "
        "CALM-DEC picks each token's depth from its confidence and ignores the schedule; adaptive SkipDecode "
        "starts at full depth and drops the whole batch's budget after each confident step (the design's mode); "
        "speculative SkipDecode drafts tokens with the designed schedule and keeps those a full-depth pass agrees "
        "with, so its greedy output is full depth's."
    )
    skip_warning(current_choice(), True)
    options = [FULL, *MODES, CALM, ADAPTIVE, SPECULATIVE]
    chosen = st.multiselect("Policies", options, default=options, key="cmp_policies", **KEEP)
    params = {
        name: policy_inputs(st, POLICY_CLASSES[name], L, "cmp", engine.runs_on)
        for name in DYNAMIC
        if name in chosen
    }
    if SPECULATIVE in chosen:
        st.caption(
            f"Speculative drafts with **{schedule.describe()}** and verifies at full depth. "
            + speculation.NOTE
        )
    chat = reads_chat(engine)
    prompts = views.prompt_picker("cmp", chat, current_choice().ref)
    chat_start_note(chat)
    sent = chat_prompts("cmp", engine, prompts)
    refs = views.references("cmp")
    c1, c2 = st.columns(2)
    max_new = tokens_slider(c1, "cmp", chat, state.max_new_tokens(L))
    batch = views.batch_size_input(c2, "cmp_batch", prompts)
    sampling = views.sampling_settings("cmp")
    now = (
        {
            **settings_now(schedule, chosen, params, prompts, int(max_new), sampling, int(batch)),
            **prompt_format(sent),
        }
        if sampling
        else None
    )
    _, too_long = views.prompt_refusal(engine, sent.prompts, int(max_new), "The comparison")
    refused = refusals(chosen, schedule, params, L, int(max_new))
    for name, why in refused.items():
        st.error(f"{name} would be refused: {why}. Change that setting, or take {name} out of **Policies**.")
    todo = [] if too_long else work(chosen, schedule, sent.prompts, int(max_new), int(batch), engine)
    estimate = show_estimate(engine, todo, "Run all", learns=True)
    ready = prompts and chosen and sampling is not None and not refused and not too_long
    if views.run_button("Run all", "cmp", disabled=not ready):
        with views.run_marked("cmp"):
            results, errors = {}, {}
            bar, left = st.progress(0.0, text="Starting…"), TimeLeft(estimate)
            for i, name in enumerate(chosen):
                bar.progress(
                    i / len(chosen),
                    text=left.bar_text(i / len(chosen), f"Running {name} ({i + 1} of {len(chosen)})"),
                )
                try:
                    results[name] = run_policy(
                        engine, name, schedule, sent.prompts, int(max_new), sampling, batch, params
                    )
                    results[name].metadata.update(sent.run_metadata)
                except UserError as e:
                    errors[name] = str(e)
            for name in (FULL, *MODES):  # a schedule's own steps time the next comparison
                if name in results:
                    learn_from_run(engine, results[name].trace)
            bar.progress(1.0, text="Done")
            quality = scores(results, refs) if refs and results else None
            CompareResult(prompts, results, errors, quality, sampling.do_sample, now).kept()
    stored = CompareResult.shown(now)
    if stored is None:
        # a refusal is said above, its button off: "Press Run all" would contradict it
        if not refused and not too_long:
            views.what_to_do("Run all", prompts, None if chosen else "policies")
        return
    show_result(stored, now)


def show_result(stored: CompareResult, now: dict | None) -> None:
    """A comparison: its costs, layers, texts, heatmaps and downloads, none of which needs the model again."""
    provenance.show(stored.settings, now, "Run all")
    for name, msg in stored.errors.items():
        st.error(f"{name}: {msg}")
    results = stored.results
    if not results:
        return
    st.header("Costs")
    table = summary_table(results, stored.quality)
    if stored.quality:
        n = len(stored.prompts)
        st.caption("BLEU, ROUGE-L and chrF: each output's first line against the split's references.")
        views.warn_small_sample(
            n, "policies", "raise **How many**, or use the Trade-offs page's sweeps (100 examples),"
        )
    if SPECULATIVE in results:
        st.caption(
            "Speculative: layer and FLOPs speedups below 1x are by construction (every kept token is verified "
            "at full depth; drafts cost extra). Per batch, the layer speedup counts sequential layer passes; "
            "its gain is the tokens per full-depth pass. The last two rows apply to speculative only (-)."
        )
    names = run_names(results)
    costs = shown_table(table)
    headers = {p: st.column_config.TextColumn(p, help=names.get(p)) for p in costs.columns if p in names}
    st.dataframe(
        costs, hide_index=True, key="cmp_costs", column_config=headers, height="content"
    )  # every row
    noisy = {name: n for name, res in results.items() if (n := step_time_spread(res.trace)["spikes"])}
    once = (
        "Each policy ran once: its step time is the machine's as much as the policy's, and two of them make no "
        "measured speedup. Measured speedups come from paired, repeated runs (the sweep, or `skipcore generate "
        "--timing-repeats N`)."
    )
    if noisy:
        which = ", ".join(f"{name} ({n})" for name, n in noisy.items())
        st.warning(
            f"Noisy step times: {which} had decode steps over {SPIKE_RATIO:g}x their run's median step with the "
            f"same layers. {once}"
        )
    else:
        st.caption(f"The {STEP_MS}: {once[0].lower()}{once[1:]}")
    show_layers(results)
    st.header("Outputs")
    views.show_outputs({"prompt": stored.prompts, **{name: res.texts for name, res in results.items()}})
    for name, res in results.items():
        flag_empty(res.texts, stored.settings, name)
    show_lossless(stored)
    st.header("Layers per token")
    show_heatmaps(stored)
    st.header("Downloads")
    show_downloads(stored, table)


main()
