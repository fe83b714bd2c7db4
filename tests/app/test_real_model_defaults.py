"""A page's first run on an instruct model (Streamlit's AppTest): it starts from questions, sent in the model's chat
template, with room for a finished answer, and says so; the shipped kind of model keeps its E2E prompts and length."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.dashboard.trained import CHAT_NEW_TOKENS
from app.dashboard.views import CHAT_EXAMPLE_PROMPTS, EXAMPLE_PROMPTS
from tests.helpers import assert_clean, by_key, open_app

PAGES = [("generate", "gen"), ("lens", "lens"), ("compare", "cmp")]


@pytest.fixture(scope="module")
def instruct_dir(model_dirs, tmp_path_factory) -> Path:
    """The tiny OPT model with a chat template and no training record: an instruct model skipcore did not tune."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("instruct") / "instruct"
    shutil.copytree(model_dirs["opt"], folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}<|bot|>"
    tok.save_pretrained(folder)
    return folder


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.parametrize(("page", "prefix"), PAGES)
def test_an_instruct_model_picked_in_the_sidebar_starts_from_questions_with_room_to_answer(
    model_dir, instruct_dir, page, prefix
):
    at = open_app(page)
    assert by_key(at.text_area, f"{prefix}_text").value == EXAMPLE_PROMPTS
    shipped_length = by_key(at.slider, f"{prefix}_max_new").value
    at.sidebar.selectbox[0].select("Local folder or .gguf file").run()
    at.sidebar.text_input[0].set_value(str(instruct_dir)).run()
    assert_clean(at)
    assert by_key(at.text_area, f"{prefix}_chat_text").value == CHAT_EXAMPLE_PROMPTS
    assert by_key(at.slider, f"{prefix}_chat_max_new").value == max(CHAT_NEW_TOKENS, shipped_length)
    said = _captions(at)
    assert (
        f"is an instruct model: the example prompts are questions, answered in up to {CHAT_NEW_TOKENS}"
        in said
    )
    assert "goes in its chat template as a user turn" in said


def test_the_shipped_kind_of_model_keeps_its_e2e_prompts_and_the_designed_length(model_dir):
    from app.dashboard import state

    at = open_app("generate")
    assert_clean(at)
    assert by_key(at.text_area, "gen_text").value == EXAMPLE_PROMPTS
    L = 6  # the tiny model's layers
    assert by_key(at.slider, "gen_max_new").value == state.default_params(L, {})["max_new_tokens"]
    assert "is an instruct model" not in _captions(at)
    assert not [w for w in at.text_area if w.key.endswith("_chat_text")]


def test_the_page_names_the_shipped_skip_aware_e2e_fine_tune_of_a_real_model():
    from app.dashboard.trained import _e2e_fine_tune

    assert _e2e_fine_tune("smollm2-135m") == "skipdecode-smollm2-e2e"  # elastic: one model for every speedup
    assert _e2e_fine_tune("no-such-model") is None
