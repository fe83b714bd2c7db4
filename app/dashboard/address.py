"""What the page address holds: every setting a page is drawn from, so a reload or a shared link restores it.

Streamlit keeps a widget in the address itself: `bind="query-params"` writes its value under its key (and drops it
while it is the default) and reads it back on a new session, ignoring values the widget cannot take;
`persist_state="session"` keeps it while another page is shown, so the sidebar's navigation loses nothing and
writes it back on return. Every page's settings are widgets with `KEEP`; this module adds the one setting that is
no widget where it is used: the designed schedule, which Generate, Compare and the lens run and name in their
own address (`publish`), and which a link to one of them restores (`adopt`) before the designer is ever drawn.
A typed text (the prompts) is kept in the address only while it is short (`keep_text`): the server refuses a
request whose address is past about 64 KiB, so a pasted document made the page's own link fail to load.

Browser Back and Forward (`hold`, `note`): Streamlit restores a bound widget from the history entry's address, and
takes its default where that address lacks it. A page switch through the sidebar pushes such entries itself: the
old page's path with its settings taken out (the settings of the page left are filtered from the address before
the new path is pushed), then the new page's bare path before its kept settings are written back. Back onto one
of them reset the page's settings to their defaults, overwriting the session's. So a history entry that lacks a
setting the page's address held when the page was last drawn is read as "keep the session's": the run is started
again as an ordinary one, where the kept value wins and is written back into that entry's address (Streamlit
replaces the entry while it is restoring one). A setting the entry does name still wins, as Streamlit means it to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote_plus

import streamlit as st

from app.dashboard.markdown import plain

KEEP: dict[str, Any] = {"bind": "query-params", "persist_state": "session"}
ADOPTED = "_address_adopted"  # the address's own values were read once this session
LONGEST_TEXT = 8 * 1024  # bytes of a typed text as the address writes it: well inside the server's 64 KiB
PUBLISHED = "_address_text_"  # + a text's key, in the session: the text `keep_text` last wrote to the address
SEEN = "_address_seen"  # page -> the names its address held when the page was last drawn
HELD = "_address_held"  # a Back or Forward run was started again once (`hold`)
PAGE = "_address_page"  # the page this run draws, as `hold` was told it
REFUSED = "_address_refused"  # "name=value" the address gave that a setting could not take, not yet said
SAID = "_address_said"  # those said this session (`say_refused`), never said twice


def whole_number_input(
    where, label: str, low: int | None, high: int | None, value: int, key: str, **kw
) -> int:
    """A whole-number box kept in the address (`KEEP`) under `key`, as an int. A value the address gives that no
    whole number is (`inf`, `1e400`) is taken out first: Streamlit ignores `abc` or `-5` there, but its own parse
    fails on an infinite number with an OverflowError, which a shared link would show as the page's traceback."""
    text = st.query_params.get(key)
    if text is not None and _infinite(text):
        forget(key)
        _refused(f"{key}={text}")
    return int(where.number_input(label, low, high, value, key=key, **KEEP, **kw))


def _infinite(text: str) -> bool:
    try:
        return math.isinf(float(text))
    except ValueError:
        return False


def forget(key: str) -> None:
    """Take `key` out of the address, and out of the address the session opened with, which is what Streamlit seeds
    a bound widget from (no public call reaches it: its query parameters' own methods, as its binding clears a
    value it refuses; streamlit is pinned, and a test opens a page with such a link)."""
    from streamlit.runtime.state.session_state_proxy import get_session_state

    with get_session_state().query_params() as params:
        params.remove_param(key)
        getattr(params, "_initial_query_params", {}).pop(key, None)


def fits(text: str) -> bool:
    """Whether `text` is short enough to keep in a page's address, as the address writes it (quoted)."""
    return len(quote_plus(text)) <= LONGEST_TEXT


def text_from_address(key: str, default: str) -> None:
    """Before the text box `key` is drawn (with no value of its own): its text is the address's where the
    address says one this session did not write there (a link, a reload, a page jump, the browser's Back), else
    the session's, else `default`."""
    given = st.query_params.get(key)
    if given is not None and given != st.session_state.get(PUBLISHED + key):
        st.session_state[key] = given
    elif key not in st.session_state:
        st.session_state[key] = default


def kept_text(key: str) -> bool:
    """Whether `key` is a text box whose text `keep_text` keeps (a page's setting, as a bound widget is)."""
    return PUBLISHED + key in st.session_state


def in_address(key: str) -> bool:
    """Whether the text box `key`'s text is in the address (`keep_text` put it there: not its default, and it
    fits)."""
    return st.session_state.get(PUBLISHED + key) is not None


def keep_text(key: str, text: str, default: str) -> bool:
    """After the text box `key` is drawn: its text in the address where it is not `default` and `fits`, out of
    it otherwise; False where it was too long to keep there (a reload then starts from `default`)."""
    kept = text != default and fits(text)
    _write(key, text if kept else None)
    st.session_state[PUBLISHED + key] = text if kept else None
    return kept or text == default


def _write(name: str, text: str | None) -> None:
    """`name` in the address as `text`, or out of it for None; the address is touched only where it changes."""
    if text is None:
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != text:
        st.query_params[name] = text


def named_by_value(key: str, options: Sequence[Any], words: Callable[[Any], str]) -> None:
    """Before the picker `key` is drawn: where the address names one of its `options` by its value (a column's
    name from the data, `to_y=rougeL`) and not by the words the picker shows and the address writes (`ROUGE-L`),
    the address is put in those words and the page drawn again, where Streamlit drops a value the picker cannot
    take without a word (it seeds a bound picker from the address a run starts with, so the words must be there
    before the run that draws it)."""
    from streamlit.errors import StreamlitAPIException

    given = st.query_params.get(key)
    by_value = {str(o): words(o) for o in options}
    if given not in by_value or given in by_value.values():
        return
    try:
        st.query_params[key] = by_value[given]
    except StreamlitAPIException:  # bound already this session: the picker holds its own value
        return
    st.rerun()


def read(names: Mapping[str, Any], valid: Callable[[str, Any], bool]) -> dict[str, Any]:
    """The values the address gives for `names` (name -> its default, whose type they take), those `valid`
    accepts; a value that does not parse is left out (the default stands), and so is a name given twice, taken
    out of the address too: which of its values a widget bound to it would take depends on the widget (a slider
    refuses the list, a radio takes the last), and a page that only runs the design took the last."""
    out: dict[str, Any] = {}
    for name, default in names.items():
        given = st.query_params.get_all(name)
        if len(given) > 1:
            _refused(f"{name}={','.join(given)}")
            _forget(name)
            continue
        text = st.query_params.get(name)
        if text is None:
            continue
        try:
            value = text.lower() in ("1", "true") if isinstance(default, bool) else type(default)(text)
        except ValueError:
            value = None
        if value is not None and valid(name, value):
            out[name] = value
        else:
            _refused(f"{name}={text}")
    return out


def _forget(name: str) -> None:
    """`name` out of the address, and out of Streamlit's snapshot of the address as the session opened, which a
    widget bound to it reads when first drawn (a selectbox took the last of a repeated name's values): its default
    stands, as said."""
    from streamlit.runtime.state.session_state_proxy import get_session_state

    with get_session_state().query_params() as params:
        getattr(params, "_initial_query_params", {}).pop(name, None)
    del st.query_params[name]


def _refused(said: str) -> None:
    st.session_state[REFUSED] = [*st.session_state.get(REFUSED, []), said]


def adopt(names: Mapping[str, Any], valid: Callable[[str, Any], bool]) -> None:
    """Once a session: the address's values for `names` become the session's, where nothing set them yet (a link
    to a page that runs the design, opened before the designer)."""
    if st.session_state.get(ADOPTED):
        return
    st.session_state[ADOPTED] = True
    for name, value in read(names, valid).items():
        st.session_state.setdefault(name, value)


def publish(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Write `values` into this page's address where they differ from `defaults` (as a bound widget does), and take
    out the ones that are back at their default, all in one change of the address: the browser keeps a history
    entry for every change a run makes, and Back should step through pages, not through one page's settings. A
    name a widget still holds bound is left to the widget (the designer's, until the page switch unbinds it)."""
    from streamlit.runtime.state.session_state_proxy import get_session_state

    wanted = {name: None if value == defaults.get(name) else _text(value) for name, value in values.items()}
    # Streamlit's own address, whose public writes send one change each; its `update` sends one for them all
    with get_session_state().query_params() as params:
        free = {name: text for name, text in wanted.items() if not params.is_bound(name)}
        gone = [name for name, text in free.items() if text is None and params.has_param(name)]
        changed = {n: t for n, t in free.items() if t is not None and params.get(n) != t}
        if not gone and not changed:
            return
        for name in gone:
            params.discard_param_no_forward_msg(name)
        params.update(changed)  # one message to the browser, the names taken out included


def _text(value: Any) -> str:
    """A setting as the address writes it: a bool as 1 or 0."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def hold(page: str) -> None:
    """Before anything of `page` is drawn (the sidebar's widgets included): on a browser Back or Forward onto an
    entry whose address lacks a setting the page's address held when last drawn, start the run again as an
    ordinary one, so the session's values stand (Streamlit writes them back into the entry, replacing it)
    instead of the defaults the bare entry asks for."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    st.session_state[PAGE] = page  # the page this run draws (`stop` notes it)
    again = st.session_state.pop(HELD, False)  # this run is the one a hold started: never a loop of reruns
    # Streamlit marks the run a Back or Forward starts; there is no public way to ask
    if again or ctx is None or not getattr(ctx, "is_history_navigation", False):
        return
    held = st.session_state.get(SEEN, {}).get(page, ())
    if any(name not in st.query_params and name in st.session_state for name in held):
        st.session_state[HELD] = True
        st.rerun()


def stop() -> None:
    """`st.stop()` for a page that stops after drawing its settings (one refused under its inputs, a model that
    does not load): they are noted and said first (`note`, `say_refused`), as a page that runs to its end has
    them after it; once stopped, a run can no longer read or write the session."""
    say_refused()
    page = st.session_state.get(PAGE)
    if page is not None:
        note(page)
    st.stop()


def drawn_widgets() -> list[tuple[str, Any, bool]]:
    """The widgets drawn this run that have a key: the key, Streamlit's metadata of the widget (whether it is
    bound to the address, its default, how it reads an address's text) and whether this run drew it first (the
    run that seeded it from the address). Streamlit keeps these only in its session state's bookkeeping (streamlit
    is pinned in requirements.txt; a version without it gives none)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    try:
        state = ctx.session_state._state
        keys = state._key_id_mapper.id_key_mapping
        drawn = state._new_widget_state.widget_metadata
        before = state._old_state
    except AttributeError:
        return []
    return [(keys[w], meta, w not in before) for w, meta in drawn.items() if w in keys]


def say_refused() -> None:
    """After a page was drawn: the values its address gave that a setting could not take, said in one line, once
    a session: a bound widget's value it cannot hold (`abc` for a count, past its range, an option it lacks),
    which Streamlit drops for the default, or takes in part (the options it has of several), and a design value
    `read` left out.
    A shared link that silently showed other settings than it named would be read as those settings' result."""
    from streamlit.runtime.state.session_state_proxy import get_session_state

    refused, taken = list(st.session_state.pop(REFUSED, [])), []
    with get_session_state().query_params() as params:  # what the address said as the page opened
        given = dict(getattr(params, "_initial_query_params", {}))
    for key, meta, first in drawn_widgets():
        text = given.get(key)
        if not first or text is None or getattr(meta, "bind", None) != "query-params":
            continue
        now, shown = st.query_params.get_all(key), ",".join(_as_list(text))
        if not now:
            if not _asks_default(meta, text):
                refused.append(f"{key}={shown}")
        elif now != _as_list(text):
            taken.append(f"{key}={shown} as {','.join(now)}")
    said = st.session_state.setdefault(SAID, set())
    refused, taken = [r for r in dict.fromkeys(refused) if r not in said], [t for t in taken if t not in said]
    if not refused and not taken:
        return
    said.update(refused + taken)
    # the values as the address typed them: a link there could otherwise put its own link or image in the toast
    parts = [f"the default stands for {', '.join(map(plain, refused))}"] if refused else []
    parts += [f"taken in part: {', '.join(map(plain, taken))}"] if taken else []
    st.toast(
        f"The address named values this page's settings cannot take: {'; '.join(parts)}.",
        icon=":material/link_off:",
        duration="infinite",
    )


def _asks_default(meta: Any, text: str | list[str]) -> bool:
    """Whether an address's `text` for a bound widget names that widget's default (which Streamlit then leaves
    out of the address, as it does a value the widget refuses): the text read as the address's kind of value,
    against the default as the widget writes it (a value out of range is not its default, though the widget
    falls back to it)."""
    from streamlit.runtime.state.query_params import parse_url_param

    try:
        return bool(parse_url_param(text, meta.value_type) == meta.serializer(meta.deserializer(None)))
    except Exception:  # a text the widget cannot read: refused
        return False


def _as_list(text: str | list[str]) -> list[str]:
    return list(text) if isinstance(text, list) else [text]


def note(page: str) -> None:
    """After `page` was drawn: the names in its address that a widget holds bound (the page's and the sidebar's
    settings), added to those noted before (a run `hold` started may leave one out of the address while the
    session keeps it: noted anew, the next bare entry reset it), which `hold` keeps on Back and Forward. A name
    the page only publishes is left out: the page writes it again from the session itself, and Streamlit takes
    it out of the address on the way in while the designer's widget of that name is still bound."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    try:
        with ctx.session_state.query_params() as address:  # which names are bound: no public way to ask
            names = frozenset(name for name in address if address.is_bound(name))
    except AttributeError:  # a Streamlit without that bookkeeping (it is pinned): Back keeps Streamlit's way
        return
    seen = st.session_state.get(SEEN, {})
    held = seen.get(page, frozenset()) | names  # never fewer: a held run's address may lack one it kept
    if seen.get(page) != held:
        st.session_state[SEEN] = {**seen, page: held}
