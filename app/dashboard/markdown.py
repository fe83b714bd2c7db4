"""Text from outside the dashboard (a page address, a typed path, a prompt) shown inside Streamlit's Markdown as the
text it is: a link handed to someone could otherwise put a link of its own, an outside image or a coloured badge
on the page they open (Streamlit renders Markdown, images and `:color[...]` badges in every caption and message;
raw HTML it never renders); texts side by side as a table of their own (`texts_table`). And a Markdown document
shown inside a page, its headings moved under the page's own (`demoted`)."""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Mapping, Sequence

from skipcore.errors import visible_controls

# what starts a link, an image, a badge, an address in brackets, math or code (inside which an escape shows as
# typed), emphasis and strike-through (a prompt's '**x**' showed as a bold x, its stars gone), and the escape
# itself
_MARKUP = "\\`[]<$&*~"  # & too: an entity ('&#104;ttps://') becomes the text Markdown links
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # '_x_' is emphasis; 'a_b' is not
# Streamlit's own shortcodes, read in the source whatever escapes a bracket: a badge or icon (`:red[a]`,
# `:material/star:`) and an emoji (`:smile:`, `:+1:`). A text that holds one has every colon and slash escaped
# (an escaped shortcode still showed as its emoji where other colons followed it: '\:+1\: 13:38'); a text
# without one keeps its colons ("speculative: 2", "13:38:58"), as a name without a letter is no shortcode but the
# emoji's own (':100:', ':1234:')
_SHORTCODE = re.compile(r":(?:[+-]1|100|1234|[\w+/-]*[A-Za-z][\w+/-]*)[:\[]")


_FIRST_STRONG_ISOLATE, _POP_ISOLATE = "\u2068", "\u2069"


# what Streamlit's Markdown turns into a link by itself (GitHub's autolinks: an address after http:// or https://,
# one after www., an email address), which no escape stops: shown as code, where nothing is a link
_AUTOLINKED = re.compile(
    r"(?:https?://|www\.)[^\s<]*|(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE
)  # an email address from the start of its word (a search from every letter of a long word took seconds)


def _code(text: str) -> str:
    """`text` as an inline code span, exactly: fenced by one more backtick than the longest run in it."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code(text: str) -> str:
    """`text` from outside (a model's name or path) as an inline code span that shows it whole, whatever
    backticks it holds; a direction control in it shown as its code point."""
    return _code(visible_controls(text))


def _escaped(text: str) -> str:
    """`text` with each character that starts markup escaped, an underscore where it can start or end
    emphasis (not inside a word: 'step_ms' stays as typed, in the page's source too), and every colon and slash
    where it holds a shortcode (`_SHORTCODE`)."""
    marked = _MARKUP + (":/" if _SHORTCODE.search(text) else "")
    text = "".join(f"\\{c}" if c in marked else c for c in text)
    return _EMPHASIS_UNDERSCORE.sub(r"\\_", text)


def plain(text: str) -> str:
    """`text` with every character that would start a link, an image, a badge, math or emphasis escaped: it
    shows as typed; an address Markdown would link by itself (`https://…`, `www.…`, an email
    address) shows as code. A direction control in it shows as its code point ('⟨U+202E⟩'), and a text with
    right-to-left letters is isolated (Unicode's first-strong isolate), so it reads in its own direction and the
    page's words around it in theirs."""
    pieces = _AUTOLINKED.split(text)  # the text between addresses, each address left in its place below
    addresses = [_code(address) for address in _AUTOLINKED.findall(text)]
    escaped = [_escaped(piece) for piece in pieces]
    text = visible_controls("".join(x for pair in zip(escaped, [*addresses, ""]) for x in pair))
    if any(unicodedata.bidirectional(c) in ("R", "AL") for c in text):
        return f"{_FIRST_STRONG_ISOLATE}{text}{_POP_ISOLATE}"
    return text


def chart_text(text: str) -> str:
    """`text` from outside (a run's name out of an uploaded file's metadata) as a Plotly title or label shows it
    as typed: Plotly renders its own tags (a live `<a href>`, `<b>`) and entities, so `&`, `<` and `>` become
    entities; a direction control shows as its code point, where it turned the title after it backwards."""
    return visible_controls(html.escape(text, quote=False))


# a table of texts: cells wrap and keep their line breaks, as Streamlit's own tables look, in either theme. Each
# column is at least `TEXT_COLUMN_MIN` wide, the table scrolling sideways in its own box where they do not fit, so
# a phone's narrow column still holds whole words
TEXT_COLUMN_MIN = "7rem"  # about 14 characters a line
_TEXTS_STYLE = (
    ".skipcore-texts-box{overflow-x:auto;max-width:100%}"
    ".skipcore-texts{width:100%;border-collapse:collapse;font-size:.875rem}"
    ".skipcore-texts th{text-align:left;font-weight:600}"
    f".skipcore-texts th,.skipcore-texts td{{min-width:{TEXT_COLUMN_MIN};padding:.35rem .6rem;vertical-align:top;"
    "white-space:pre-wrap;overflow-wrap:anywhere;border-bottom:1px solid rgba(128,128,128,.3)}"
)


def texts_table(columns: Mapping[str, Sequence[str]]) -> str:
    """Texts side by side (prompts and outputs) as an HTML table, each cell exactly the text: Streamlit's
    `st.table` renders its cells as Markdown (a prompt's `[a](url)` became a link, `![](url)` an image, `$x$` maths,
    `2*3*4` lost its stars) and turns any address in them into a link, which no Markdown escape stops; here the
    text is HTML-escaped, so nothing in it is markup, and its line breaks stay. Too many texts for the width
    scroll sideways in the table's own box, each column kept readable (`TEXT_COLUMN_MIN`)."""
    names = list(columns)
    rows = zip(*(columns[n] for n in names), strict=True)
    head = "".join(f'<th scope="col">{html.escape(str(n))}</th>' for n in names)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    table = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
    return f'<style>{_TEXTS_STYLE}</style><div class="skipcore-texts-box"><table class="skipcore-texts">{table}</table></div>'


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")  # a code block's first or last line
_HEADING = re.compile(r"^( {0,3})(#{1,6})(?=[ \t]|$)")  # an ATX heading's marks


def demoted(markdown: str, levels: int) -> str:
    """`markdown` with every heading `levels` deeper (h6 at most), code blocks left as they are: a document whose
    title is an h1 (a tune's report.md), shown under a page's own h1, keeps the page's outline one title deep and
    never skipping a level (WCAG 1.3.1)."""
    out, fence = [], None
    for line in markdown.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0]
        elif fence is not None and opened and opened.group(1)[0] == fence:
            fence = None
        elif fence is None:
            line = _HEADING.sub(lambda m: m.group(1) + "#" * min(6, len(m.group(2)) + levels), line, count=1)
        out.append(line)
    return "".join(out)
