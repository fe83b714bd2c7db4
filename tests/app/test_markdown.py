"""Text from outside the dashboard (a typed or linked model path, a prompt) shows as typed inside Streamlit's
Markdown: a link handed to someone put its own link and an outside image into the page they opened."""

from __future__ import annotations

import html

import pytest
from markdown_it import MarkdownIt

from app.dashboard.markdown import demoted, plain
from app.dashboard.provenance import prompts_setting
from tests.helpers import by_key, open_app

ATTACK = "/nonexistent` **[Click to update](https://evil.example/x)** ![t](https://evil.example/p.png) `$x$ :red[a]"


def rendered(markdown: str) -> str:
    """HTML of `markdown` by a CommonMark renderer (Streamlit's is one too)."""
    return MarkdownIt("commonmark").render(markdown)


@pytest.mark.parametrize(
    "text", ["a\\[b](c)", "plain text, (with) punctuation.", "<https://x.y>", "$x$ :red[a]", ""]
)
def test_plain_text_renders_as_itself(text):
    assert rendered(plain(text)) == (f"<p>{html.escape(text, quote=False)}</p>\n" if text else "")


def test_a_link_an_image_or_a_badge_is_shown_as_its_text():
    html_out = rendered(plain(ATTACK))
    assert (
        "<a " not in html_out
        and "<img" not in html_out
        and "[Click to update](https://evil.example/x)" in html_out
    )


def test_a_linked_model_path_and_a_prompt_show_as_typed(model_dir):
    at = open_app("generate")
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    by_key(at.sidebar.text_input, "model_path").set_value(ATTACK).run()
    (said,) = [e.value for e in at.sidebar.error]
    assert "Not a folder or a .gguf file" in said
    assert "<a " not in rendered(said) and "<img" not in rendered(said) and "evil.example" in rendered(said)
    words, _ = prompts_setting(["![t](https://evil.example/p.png) hello"])
    assert "<img" not in rendered(words) and "![t](https://evil.example/p.png) hello" in rendered(words)


def test_an_uploaded_traces_name_and_metadata_show_as_written(model_dir, sample_trace):
    """A trace shared by someone else names its model and file as it likes: an image there was drawn."""
    from app.dashboard import tracefiles
    from tests.app.test_explorer_page import upload

    trace, meta = sample_trace
    image = "![t](https://evil.example/p.png)"
    data, _, _ = tracefiles.trace_download(trace, {**meta, "model": image, "policy": image}, "parquet")
    at = upload(open_app("explorer"), f"{image}.parquet", data)
    shown = [e.value for e in [*at.success, *at.caption]]
    assert any(image in rendered(text) for text in shown)
    assert not any("<img" in rendered(text) for text in shown), shown


def test_a_document_shown_in_a_page_has_its_headings_under_the_pages_own():
    """A tune's report.md opens with an h1: shown under the page's h1 title, its headings move a level down (a
    page has one h1, and no level is skipped); a code block's '#' lines are code, not headings."""
    report = "# skipcore tune: m\n\ntext #1\n\n## Pareto front\n\n```bash\n# a comment\n```\n"
    out = rendered(demoted(report, 1))
    assert "<h2>skipcore tune: m</h2>" in out and "<h3>Pareto front</h3>" in out
    assert "<h1>" not in out and "# a comment" in out and "text #1" in out
    assert demoted("###### six", 1) == "###### six"  # h6 is the deepest there is
