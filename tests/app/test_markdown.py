"""Text from outside the dashboard (a typed or linked model path, a prompt) shows as typed inside Streamlit's
Markdown: a link handed to someone put its own link and an outside image into the page they opened."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from app.dashboard.markdown import chart_text, demoted, plain, texts_table
from app.dashboard.provenance import line, prompts_setting
from tests.helpers import by_key, open_app, texts_shown

ATTACK = "/nonexistent` **[Click to update](https://evil.example/x)** ![t](https://evil.example/p.png) `$x$ :red[a]"


def rendered(markdown: str) -> str:
    """HTML of `markdown` by a CommonMark renderer (Streamlit's is one too)."""
    return MarkdownIt("commonmark").render(markdown)


def read(markdown: str) -> str:
    """The text `markdown` shows, as HTML, its code spans read as text (an address is one)."""
    return re.sub("</?code>", "", rendered(markdown))


@pytest.mark.parametrize(
    "text",
    [
        "a\\[b](c)",
        "plain text, (with) punctuation.",
        "<https://x.y>",
        "$x$ :red[a] :smile: :+1: :red-background[b] 12:30 C:\\x",
        "see http://evil.example/x_y*z*, WWW.evil.example and me@evil.example.",
        "x`y https://a``b` `",
        "speculative: 2 drafts, created 2026-11-30T13:38:58+00:00",
        ":100: at 13:38",
        "**x** <b>y</b> _z_ ~~s~~ a*b*c step_ms __init__ x_ _y",  # a prompt's stars showed as a bold x
        "&#104;ttps://evil.example/x me&#64;evil.example &amp; &lt;b&gt;",
        "",
    ],
)
def test_plain_text_renders_as_itself(text):
    """As typed, an address in it as code (`<code>`, the only tag); in a text holding one of Streamlit's badges,
    icons or emoji (`:red[a]`, `:smile:`, `:+1:`), which an escaped bracket did not stop, no colon or slash is left
    unescaped; other texts keep their colons ("12:30") as typed in the page's source."""
    assert read(plain(text)) == (f"<p>{html.escape(text, quote=False)}</p>\n" if text else "")
    outside_code = re.sub(r"(?<!\\)(`+).*?(?<!`)\1(?!`)", "", plain(text))
    holds_shortcode = re.search(r":(?:[+-]1|100|1234|[\w/-]*[A-Za-z][\w/-]*)[:\[]", text)
    assert not (holds_shortcode and re.search(r"(?<!\\)[:/]", outside_code))
    assert holds_shortcode or plain(text).count(":") == text.count(":")  # other colons read as typed


def test_an_address_markdown_would_link_by_itself_shows_as_code():
    """Streamlit's Markdown links a bare `https://…`, `www.…` or email address (GitHub's autolinks), which no
    escape stops: each is a code span, where nothing is a link (the Chromium check: tests/browser)."""
    text = "go to http://evil.example/a?b=c or www.evil.example, mail me@evil.example; HTTPS://EVIL.EXAMPLE"
    said = rendered(plain(text))
    outside_code = re.sub("<code>.*?</code>", "", said)
    assert not re.search(r"https?://|www\.|@", outside_code, re.IGNORECASE)
    assert re.findall("<code>(.*?)</code>", said) == [
        "http://evil.example/a?b=c", "www.evil.example,", "me@evil.example", "HTTPS://EVIL.EXAMPLE"
    ]  # fmt: skip


def test_a_chart_text_holds_no_plotly_markup_and_reads_back_as_written():
    """Plotly renders `<a href>`, `<b>`, `<br>` and entities in a title: text from outside has none left, and an
    entity-aware reader (Plotly's) gets the text back, its direction controls shown as code points."""
    text = 'static <a href="https://x.example/">here</a> &amp; <b>B</b> 12->2 calm softmax>=0.9 \u202eevil'
    said = chart_text(text)
    assert "<" not in said and ">" not in said and "\u202e" not in said
    assert html.unescape(said) == text.replace("\u202e", "⟨U+202E⟩")


def test_a_link_an_image_or_a_badge_is_shown_as_its_text():
    html_out = rendered(plain(ATTACK))
    assert (
        "<a " not in html_out
        and "<img" not in html_out
        and "[Click to update](https://evil.example/x)" in read(plain(ATTACK))
    )


def test_a_linked_model_path_and_a_prompt_show_as_typed(model_dir):
    at = open_app("generate")
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    by_key(at.sidebar.text_input, "model_path").set_value(ATTACK).run()
    (said,) = [e.value for e in at.sidebar.error]
    assert "Not a folder or a .gguf file" in said
    assert "<a " not in rendered(said) and "<img" not in rendered(said) and "evil.example" in rendered(said)
    # a result's settings keep the prompt as typed, and show it so (`provenance.line`, every settings caption)
    words, _ = prompts_setting(["![t](https://evil.example/p.png) hello"])
    assert "![t](https://evil.example/p.png) hello" in words
    shown = line({"prompts": (words, None)})
    assert "<img" not in rendered(shown) and "![t](https://evil.example/p.png) hello" in read(shown)


def test_an_uploaded_traces_name_and_metadata_show_as_written(model_dir, sample_trace):
    """A trace shared by someone else names its model and file as it likes: an image there was drawn."""
    from app.dashboard import tracefiles
    from tests.app.test_explorer_page import upload

    trace, meta = sample_trace
    image = "![t](https://evil.example/p.png)"
    data, _, _ = tracefiles.trace_download(trace, {**meta, "model": image, "policy": image}, "parquet")
    at = upload(open_app("explorer"), f"{image}.parquet", data)
    shown = [e.value for e in [*at.success, *at.caption]]
    assert any(image in read(text) for text in shown)
    assert not any("<img" in rendered(text) for text in shown), shown


def test_a_document_shown_in_a_page_has_its_headings_under_the_pages_own():
    """A tune's report.md opens with an h1: shown under the page's h1 title, its headings move a level down (a
    page has one h1, and no level is skipped); a code block's '#' lines are code, not headings."""
    report = "# skipcore tune: m\n\ntext #1\n\n## Pareto front\n\n```bash\n# a comment\n```\n"
    out = rendered(demoted(report, 1))
    assert "<h2>skipcore tune: m</h2>" in out and "<h3>Pareto front</h3>" in out
    assert "<h1>" not in out and "# a comment" in out and "text #1" in out
    assert demoted("###### six", 1) == "###### six"  # h6 is the deepest there is


HOSTILE = [ATTACK, "2*3*4 a_b_c $x^2$", "<script>alert(1)</script> &amp; <b>b</b>", "line one\n  line two",
           "http://example.com www.example.com a@b.example", "1. one\n# two", ""]  # fmt: skip


def test_a_table_of_texts_shows_each_text_as_typed():
    """`st.table` rendered its cells as Markdown: a prompt's link was a link, its image fetched, `$x$` maths,
    `2*3*4` lost its stars (and Streamlit makes a link of any address, which no Markdown escape stops)."""

    class Page:  # what `texts_shown` reads: a page's HTML elements
        def __init__(self, html_text: str) -> None:
            self.html = [type("Html", (), {"value": html_text})()]

        def get(self, kind: str) -> list:
            return self.html

    table = {"prompt": HOSTILE, "output <b>": [t[::-1] for t in HOSTILE]}
    shown = texts_shown(Page(texts_table(table)))
    assert list(shown.columns) == list(table) and shown.to_dict("list") == table


def test_the_outputs_table_shows_a_prompt_as_typed(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(3)
    by_key(at.text_area, "gen_text").set_value(
        "2*3*4 ![t](https://evil.example/p.png) [Click](https://evil.example/x)"
    )
    by_key(at.button, "gen_run").click().run()
    outputs = texts_shown(at)
    assert list(outputs["prompt"]) == [
        "2*3*4 ![t](https://evil.example/p.png) [Click](https://evil.example/x)"
    ]
    assert not at.table  # no table of Streamlit's renders a text as Markdown


def test_a_direction_control_in_a_prompt_turns_no_page_text_backwards(model_dir):
    """A prompt with a right-to-left override (U+202E), typed or brought by a link, reversed the 'Made with' line
    after it and the stale-settings warning ('...etareneG sserp uoy litnu tpek era yehT'): every text the page
    quotes shows such a control as its code point, and right-to-left writing is isolated from the page's words."""
    assert plain("name[\u202eThe Eagle]") == "name\\[⟨U+202E⟩The Eagle\\]"
    assert plain("\u2069\u202eabc") == "⟨U+2069⟩⟨U+202E⟩abc"  # a closing isolate cannot end ours early
    assert plain("שלום, world") == "\u2068שלום, world\u2069"  # Hebrew kept, in its own direction
    assert plain("plain (ascii) text") == "plain (ascii) text"
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(2)
    by_key(at.text_area, "gen_text").set_value("MR: name[\u202eThe Eagle]")
    by_key(at.button, "gen_run").click().run()
    by_key(at.slider, "gen_max_new").set_value(3).run()  # the result's settings differ now: warned
    said = [e.value for e in [*at.caption, *at.warning, *at.markdown, *at.info]]
    assert any("Made with" in s and "⟨U+202E⟩The Eagle" in s for s in said)
    assert any("kept until you press" in s for s in said)
    assert not [s for s in said if re.search("[\u202a-\u202e\u2066-\u2069]", s)]


def test_a_direction_control_in_a_model_path_shows_as_its_code_point(tmp_path):
    """A model folder named 'm\u202eodel' put the raw control in the sidebar's caption, the 'Made with' line and the
    run's name (paths are shown in code spans, where no Markdown escape applies)."""
    from app.dashboard.paths import display_path

    assert display_path(tmp_path / "m\u202eodel") == str(tmp_path / "m⟨U+202E⟩odel")


def _markdown_shown(at) -> list[str]:
    """Every text the page hands Streamlit's Markdown: captions, Markdown blocks, messages and toasts."""
    kinds = ("caption", "markdown", "warning", "info", "success", "error", "toast")
    return [e.value for kind in kinds for e in at.get(kind) if isinstance(e.value, str)]


def _no_markup_of_its_own(texts: list[str]) -> None:
    for text in texts:
        html_out = rendered(text)
        assert "<a " not in html_out and "<img" not in html_out, text
        outside_code = re.sub(r"(`+).*?\1", "", text)  # what a code span holds shows as typed
        assert not re.search(r"(?<!\\)\$|(?<!\\):red(?<!\\)\[", outside_code), text


def test_values_a_link_gives_show_as_typed_in_the_toast_that_refuses_them(model_dir):
    """The toast naming a link's refused values rendered them: a live link, an outside image the browser fetched,
    a red badge, KaTeX."""
    from tests.helpers import opened_with

    at = opened_with(
        {
            "gen_seed": "[Click to fix](https://evil.example/x)",
            "gen_batch": ":red[**WARNING**] $\\int_0^1$",
            "gen_max_new": "![img](https://evil.example/p.png)",
        },
        "generate",
    )
    (said,) = [t.value for t in at.toast]
    assert "gen_seed=" in said and "evil.example/x" in read(said)
    _no_markup_of_its_own([said])


def test_a_model_folder_named_in_markup_shows_as_typed_on_every_page(model_dirs, tmp_path, monkeypatch):
    """A folder's name ended the caption's code span at its backtick, and the rest drew a link, a badge and math;
    the run's settings line and the lens's run names did the same."""
    import shutil

    from app.dashboard import paths

    folder = tmp_path / "m` [Click](evil.example) $x^2$ :red[R] `"
    shutil.copytree(model_dirs["opt"], folder)
    monkeypatch.setenv(paths.MODEL_ENV, str(folder))
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(3)
    by_key(at.button, "gen_run").click().run()
    generate_page = _markdown_shown(at)
    assert any("evil.example" in t for t in generate_page)  # the model is named on the page, as typed
    at.switch_page("sections/lens.py").run()
    by_key(at.slider, "lens_max_new").set_value(3)
    by_key(at.button, "lens_run").click().run()
    lens_page = _markdown_shown(at)
    at.switch_page("sections/designer.py").run()
    _no_markup_of_its_own([*generate_page, *lens_page, *_markdown_shown(at)])
