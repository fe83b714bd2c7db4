"""Text from outside the dashboard (a page address, a typed path, a prompt) shown inside Streamlit's Markdown as the
text it is: a link handed to someone could otherwise put a link of its own, an outside image or a coloured badge
on the page they open (Streamlit renders Markdown, images and `:color[...]` badges in every caption and message;
raw HTML it never renders). And a Markdown document shown inside a page, its headings moved under the page's own
(`demoted`)."""

from __future__ import annotations

import re

# what starts a link, an image, a badge, an address in brackets, math or code (inside which an escape shows as
# typed), and the escape itself; emphasis marks are left (they only change how the text looks), so ordinary text
# ("step_ms") reads the same in the page's source
_MARKUP = re.compile(r"([\\`\[\]<$])")


def plain(text: str) -> str:
    """`text` with every character that would start a link, an image, a badge or math escaped: it shows as
    typed, no more than emphasised."""
    return _MARKUP.sub(r"\\\1", text)


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
