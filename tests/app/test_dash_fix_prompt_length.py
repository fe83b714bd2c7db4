"""Compare and the Layer lens (Streamlit's AppTest) say a prompt length past the model's positions before their
button is pressed, once, with the button off, as Generate does: they ran, and failed on every policy or pass."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.app.conftest import _open_on
from tests.helpers import MAX_NEW, assert_clean, by_key, open_app


@pytest.fixture
def short_model(model_dirs, tmp_path, monkeypatch):
    """The dashboard opens on a rotary model (no position table to resize) that takes 128 positions."""
    short = tmp_path / "llama-128"
    shutil.copytree(model_dirs["llama"], short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    return _open_on(short, monkeypatch)


@pytest.mark.parametrize(
    ("page", "key", "what", "button"),
    [("compare", "cmp", "The comparison", "Run all"), ("lens", "lens", "The lens", "Run the lens")],
)
def test_a_length_past_the_models_positions_is_said_before_the_run(short_model, page, key, what, button):
    at = open_app(page)
    slider = by_key(at.slider, f"{key}_max_new")
    slider.set_value(slider.max).run()
    assert_clean(at)
    said = [w.value for w in at.warning if "would be refused" in w.value]
    assert len(said) == 1, said  # once for the page, not once per policy or pass
    assert (
        said[0].startswith(f"{what} would be refused: the longest prompt")
        and "exceeds the model's" in said[0]
    )
    assert by_key(at.button, f"{key}_run").disabled
    assert not any(f"Press **{button}**" in i.value for i in at.info)  # not beside its button turned off
    by_key(at.slider, f"{key}_max_new").set_value(MAX_NEW).run()
    assert_clean(at)
    assert "would be refused" not in " ".join(w.value for w in at.warning)
    assert not by_key(at.button, f"{key}_run").disabled
    assert any(f"Press **{button}**" in i.value for i in at.info)
