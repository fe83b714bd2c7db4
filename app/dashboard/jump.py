"""A button that opens another page (Run history's Reopen, Tune's Open in the designer): `go` switches to it
from whatever address the jump starts at, and the page opened has the address a reload needs, in one browser
history entry more than the page left (two where the jump starts on a page whose own address it replaces).

`st.switch_page(page)` alone clears the old address, which Streamlit refuses (a traceback on the page) while a
widget is bound to it: the sidebar's model and precision on every page, a page's own settings once moved. Given
an address (`query_params`), it replaces the old one, so `go` gives it the settings the jump set for the page
opened (none of that page's widgets is bound yet; each reads its value from there, as from a link). The sidebar's
choices are bound on the page left, which Streamlit refuses to name in a new address: `go` unbinds them first (the
page opened binds them again as it draws its sidebar), so the one address the jump sends holds them too. Each
setting written after it would be a history entry of its own, as would each one named at its widget's default,
which Streamlit takes out again: those (`at_default`) are left out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NoReturn

import streamlit as st

from app.dashboard import address
from app.dashboard.models import DTYPE_KEY, LOCAL_KEY, MODEL_KEY

SIDEBAR = (MODEL_KEY, LOCAL_KEY, DTYPE_KEY)  # bound on every page, all text: the model and its precision


def go(page: str, settings: Mapping[str, Any] | None = None, at_default: Collection[str] = ()) -> NoReturn:
    """Open `page` (a file under app/, as `st.navigation` lists it) with `settings` (widget key -> value, set for
    it in the session) in its address, and the sidebar's choices where the old address named them or the jump
    set them. Those `at_default` (their widget's default, set in the session) are left out of the address, as
    the page leaves them out."""
    given = settings or {}
    settings = {k: v for k, v in given.items() if k not in at_default}
    too_long = {k: v for k, v in settings.items() if isinstance(v, str) and not address.fits(v)}
    # a text no address can hold (the prompts): the page reads the session's
    st.session_state.update(too_long)
    kept = {
        k: _text(v) for k, v in settings.items() if k not in (*SIDEBAR, *too_long) and not k.startswith("_")
    }  # the sidebar's: below, by the session's values
    sidebar = {}
    for key in SIDEBAR:
        value = st.session_state.get(key)
        if value in (None, "") or (key not in st.query_params and key not in given):
            continue
        if key in at_default and value == given[key]:
            continue  # its default, which no address names
        sidebar[key] = str(value)
    _unbind(sidebar)
    st.switch_page(page, query_params={**kept, **sidebar})


def _unbind(keys: Collection[str]) -> None:
    """Take Streamlit's binding of `keys` to the address (their widgets bind them again when next drawn), so a
    new address may name them. Streamlit has no public call for it (streamlit is pinned in requirements.txt)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    with ctx.session_state.query_params() as params:
        for key in keys:
            binding = params.get_binding_for_param(key)
            if binding is not None:
                params.unbind_widget(binding.widget_id)


def _text(value: Any) -> str | list[str]:
    """A setting as a bound widget writes it in the address: 'true' or 'false' for a bool, one entry per item
    of a list."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    return str(value)
