"""Text from outside the dashboard (a page address, a typed path, a prompt) shown inside Streamlit's Markdown as the
text it is: a link handed to someone could otherwise put a link of its own, an outside image or a coloured badge
on the page they open (Streamlit renders Markdown, images and `:color[...]` badges in every caption and message;
raw HTML it never renders)."""

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
