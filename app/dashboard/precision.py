"""The dtype the pages run the model in: chosen in the sidebar under the model, kept in the address (`?dtype=`).

`auto` keeps float32 on a CPU, the mode of the shipped sweeps every page's results sit beside, and bfloat16 on CUDA
(`skipcore.models.dtype_choice`). Where
this CPU runs the model faster in bfloat16 (native bfloat16 and a model large enough, the rule `--dtype auto` of
`skipcore generate` follows), the sidebar says so, and what bfloat16 keeps: full depth gives bfloat16
`generate()`'s tokens, and speculative SkipDecode full depth's at every batch size. Every page's result names
the dtype it ran in with the model (`model_setting`), so a result made in float32 is marked stale once bfloat16
is picked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import streamlit as st

from app.dashboard.address import KEEP
from app.dashboard.loading import model_shapes
from app.dashboard.models import DTYPE_KEY, ModelChoice
from app.dashboard.provenance import setting
from skipcore.kernels.precision import DtypeChoice
from skipcore.models.dtype_choice import Promise, choose_dtype
from skipcore.models.loading import DTYPES, resolve_device, resolve_dtype

AUTO = "auto"
# float16, which the command line also takes, has no fast path on a CPU, and on CUDA bfloat16 is auto's choice
OPTIONS = (AUTO, "float32", "bfloat16")


def resolved(choice: ModelChoice) -> DtypeChoice:
    """The dtype the chosen precision runs in here, and why (the model is not read: a dashboard's `auto` keeps
    float32 on a CPU, bfloat16 on CUDA, whatever the model)."""
    return resolve_dtype(choice.dtype, resolve_device("auto"), None, Promise.PAGES)


def model_setting(choice: ModelChoice) -> tuple[str, Any]:
    """The model and the dtype it runs in, as a result's settings name them ('smollm2-135m in bfloat16')."""
    dtype = resolved(choice).name
    return setting(f"{choice.shown()} in {dtype}", [choice.source, dtype])


def _faster(choice: ModelChoice) -> DtypeChoice | None:
    """bfloat16, with the reason, where `--dtype auto` of a generation would pick it for this model here."""
    shapes = model_shapes(choice, say=False)  # a model that cannot be read is said by the page, once
    if shapes is None:
        return None
    fast = choose_dtype(resolve_device("auto"), shapes)
    return fast if fast.dtype != DTYPES["float32"] else None


def _words(choice: ModelChoice) -> str:
    """The line under the picker: the dtype that runs, why, and what it keeps."""
    runs = resolved(choice)
    device = resolve_device("auto")
    said = (
        f"Runs in {runs.name} ({runs.reason})." if choice.dtype == AUTO else f"Runs in {runs.name}, as asked."
    )
    if runs.name == "float32":
        faster = _faster(choice) if device.type == "cpu" else None
        if faster is not None:
            said += (
                f" bfloat16 is faster here ({faster.reason.removeprefix('auto: bfloat16, ')}): in it full depth "
                "gives bfloat16 `generate()`'s tokens, and speculative SkipDecode full depth's at every batch "
                "size."
            )
        return said
    if device.type == "cpu":
        return said + (
            " Full depth gives `generate()`'s tokens in this dtype, and speculative SkipDecode full depth's at "
            "every batch size."
        )
    return said + (
        " In half precision on a GPU speculative SkipDecode's passes are not bit-exact against full depth's "
        "steps (near-ties part); float32 is exact."
    )


def precision_sidebar(choice: ModelChoice) -> ModelChoice:
    """Render the precision picker under the model (a model with weights only); store and return the choice with
    the dtype it asks for."""
    if not choice.has_weights:
        return choice
    asked = st.sidebar.selectbox("Precision", OPTIONS, key=DTYPE_KEY, **KEEP)
    choice = replace(choice, dtype=asked)
    st.sidebar.caption(_words(choice))
    st.session_state["model_choice"] = choice
    return choice
