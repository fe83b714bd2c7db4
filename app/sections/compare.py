"""Compare policies: the same prompts under skip, exit and middle (the designed budgets, three ways of
choosing layers) and CALM-DEC (per-token confidence exit), side by side with the heatmaps aligned."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from app.dashboard import state, views
from skipcore import plots
from skipcore.errors import UserError
from skipcore.schedule import MODES, Schedule

RESULT_KEY = "compare_result"


def calm_available() -> bool:
    try:
        from skipcore.policies import CalmPolicy  # noqa: F401
    except ImportError:
        return False
    return True


def run_policy(engine, name: str, schedule: Schedule, prompts, max_new: int, sampling, calm: dict):
    """One policy's GenerationResult: a static mode applied to the designed budgets, or CALM-DEC."""
    if name == "calm":
        from skipcore.policies import CalmPolicy

        return engine.generate(prompts, CalmPolicy(**calm), max_new, sampling, len(prompts))
    return engine.generate(prompts, dataclasses.replace(schedule, mode=name), max_new, sampling, len(prompts))


def summary_table(results: dict) -> pd.DataFrame:
    rows = []
    for name, res in results.items():
        s = views.summary_metrics(res.trace)
        rows.append(
            {
                "policy": name,
                "layer speedup (per token)": s["layer_speedup"],
                "layer speedup (per batch)": s["batch_layer_speedup"],
                "FLOPs speedup (decode)": s["flops_speedup_decode"],
                "FLOPs speedup (with prompt)": s["flops_speedup_with_prompt"],
                "KV saved": s["kv_saved_fraction"],
                "ms per decode step": s["decode_ms_per_step"],
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    st.title("Compare policies")
    engine, schedule = state.engine_and_schedule()
    L = engine.num_layers
    st.caption(
        f"Static policies reuse the designed budgets **{schedule.describe()}** with each mode; "
        "CALM-DEC picks each token's depth from its confidence and ignores the schedule."
    )
    options = [*MODES, *(["calm"] if calm_available() else [])]
    chosen = st.multiselect("Policies", options, default=options, key="cmp_policies")
    calm: dict = {}
    if "calm" in chosen:
        c1, c2, c3 = st.columns(3)
        calm["threshold"] = c1.slider("CALM threshold", 0.0, 1.0, 0.9, 0.01, key="cmp_calm_threshold")
        calm["measure"] = c2.selectbox("Confidence", ["softmax", "top2"], key="cmp_calm_measure")
        calm["min_layers"] = int(c3.number_input("CALM min layers", 1, L, 1, key="cmp_calm_min"))
    prompts = views.prompt_picker("cmp")
    max_new = st.slider("Tokens to generate", 1, 256, state.max_new_tokens(L), key="cmp_max_new")
    sampling = views.sampling_settings("cmp")
    if st.button(
        "Run all", type="primary", key="cmp_run", disabled=not (prompts and chosen) or sampling is None
    ):
        results, errors = {}, {}
        bar = st.progress(0.0, text="Starting…")
        for i, name in enumerate(chosen):
            bar.progress(i / len(chosen), text=f"Running {name} ({i + 1}/{len(chosen)})…")
            try:
                results[name] = run_policy(engine, name, schedule, prompts, int(max_new), sampling, calm)
            except UserError as e:
                errors[name] = str(e)
        bar.progress(1.0, text="Done")
        st.session_state[RESULT_KEY] = {"prompts": prompts, "results": results, "errors": errors}
    stored = st.session_state.get(RESULT_KEY)
    if not stored:
        st.info("Choose policies and prompts, then press **Run all**.")
        return
    for name, msg in stored["errors"].items():
        st.error(f"{name}: {msg}")
    results = stored["results"]
    if not results:
        return
    st.subheader("Costs")
    table = summary_table(results)
    speedup = st.column_config.NumberColumn(format="%.2fx")
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            **{c: speedup for c in table.columns if "speedup" in c},
            "KV saved": st.column_config.NumberColumn(format="percent"),
            "ms per decode step": st.column_config.NumberColumn(format="%.1f"),
        },
    )
    st.subheader("Outputs")
    st.dataframe(
        {"prompt": stored["prompts"], **{name: res.texts for name, res in results.items()}}, hide_index=True
    )
    st.subheader("Layers per token")
    first = next(iter(results.values()))
    sample = views.sample_picker(first.trace, "cmp_sample", stored["prompts"])
    width = max(len(plots.sample_rows(res.trace, sample)) for res in results.values())
    cols = st.columns(min(2, len(results)))
    for i, (name, res) in enumerate(results.items()):
        with cols[i % len(cols)]:
            fig = plots.exit_heatmap(res.trace, sample, title=name)
            fig.update_xaxes(range=[-0.5, width - 0.5])  # same token columns in every panel
            st.plotly_chart(fig, key=f"cmp_heat_{name}")


main()
