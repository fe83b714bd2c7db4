"""A hub id is read from the hub only where the hub answers: offline, or with no answer, it is read from the local
hub cache or refused in one line at once (huggingface_hub's retries held a run half a minute, saying each)."""

from __future__ import annotations

import time

import pytest

from skipcore.errors import ModelError
from skipcore.models import reference


@pytest.fixture
def online(monkeypatch):
    """HF_HUB_OFFLINE unset, as a user's shell may leave it; whether the hub answers is the test's to say."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    probe = reference._hub_reachable
    probe.cache_clear()
    yield
    probe.cache_clear()


def test_a_hub_id_with_no_hub_to_answer_is_refused_in_one_line_at_once(online, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    asked = []

    def no_answer(address, timeout):
        asked.append((address, timeout))
        raise OSError("Name or service not known")

    monkeypatch.setattr(reference.socket, "create_connection", no_answer)
    monkeypatch.chdir(tmp_path)  # no folder named models/ here: a mistyped local path reads as a hub id
    start = time.monotonic()
    for name in ("models/skipdecode-opt-e2e", "gpt2"):
        ref = reference.resolve_model(name)
        assert ref.kind == "hub"
        with pytest.raises(ModelError, match=rf"^'{name}' is no model folder, .* cannot be reached"):
            ref.weights()
    assert time.monotonic() - start < 5 and asked == [(("huggingface.co", 443), reference.HUB_PROBE_S)]


def test_a_hub_id_in_the_local_cache_is_read_from_it_alone_where_the_hub_cannot_answer(
    online, monkeypatch, tmp_path
):
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(reference, "_hub_reachable", lambda endpoint: False)
    assert reference.resolve_model("org/tiny").weights() == ("org/tiny", {"local_files_only": True})
    monkeypatch.setattr(
        reference, "_hub_reachable", lambda endpoint: True
    )  # online: the hub as transformers asks it
    assert reference.resolve_model("org/tiny").weights() == ("org/tiny", {})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert reference.resolve_model("org/tiny").weights() == ("org/tiny", {"local_files_only": True})
    with pytest.raises(ModelError, match="and HF_HUB_OFFLINE is set"):
        reference.resolve_model("org/other").weights()
