"""A button that opens another page (Run history's Reopen, Tune's Open in the designer): `go` switches to it
from whatever address the jump starts at, and the page opened has the address a reload needs.

`st.switch_page(page)` alone clears the old address, which Streamlit refuses (a traceback on the page) while a
widget is bound to it: the sidebar's model and precision on every page, a page's own settings once moved. Given
an address (`query_params`), it replaces the old one whatever is bound, so `go` gives it the settings the jump set
for the page opened (none of that page's widgets is bound yet; each reads its value from there, as from a link).
A bound value cannot be given that way, so the sidebar's (the model and the precision, which the sidebar's
navigation keeps on every page) are written back at the start of the page's first run (`rewrite`), as Streamlit
writes a bound widget's corrected value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import streamlit as st

from app.dashboard import address
from app.dashboard.models import DTYPE_KEY, LOCAL_KEY, MODEL_KEY

SIDEBAR = (MODEL_KEY, LOCAL_KEY, DTYPE_KEY)  # bound on every page, all text: the model and its precision
REWRITE = "_jump_rewrite"  # in the session: the sidebar's keys the page opened writes back to its address


def go(page: str, settings: Mapping[str, Any] | None = None) -> NoReturn:
    """Open `page` (a file under app/, as `st.navigation` lists it) with `settings` (widget key -> value, set for
    it in the session) in its address, and the sidebar's choices where the old address named them or the jump
    set them."""
    settings = settings or {}
    st.session_state[REWRITE] = [k for k in SIDEBAR if k in st.query_params or k in settings]
    too_long = {k: v for k, v in settings.items() if isinstance(v, str) and not address.fits(v)}
    st.session_state.update(
        too_long
    )  # a text no address can hold (the prompts): the page reads the session's
    kept = {
        k: _text(v) for k, v in settings.items() if k not in (*SIDEBAR, *too_long) and not k.startswith("_")
    }
    st.switch_page(page, query_params=kept)


def rewrite() -> None:
    """On the page's first run after `go`, before the sidebar is drawn: its choices back in the address."""
    keys = st.session_state.pop(REWRITE, [])
    values = {k: str(st.session_state[k]) for k in keys if st.session_state.get(k) not in (None, "")}
    if not values:
        return
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    # Streamlit's own way to write a bound widget's value (it corrects a clamped one so); there is no public one
    with ctx.session_state.query_params() as address:
        for key, value in values.items():
            address.set_corrected_value(key, value, "string_value")


def _text(value: Any) -> str | list[str]:
    """A setting as a bound widget writes it in the address: 'true' or 'false' for a bool, one entry per item
    of a list."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    return str(value)
