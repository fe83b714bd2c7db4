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
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)  # a machine's own proxy would skip the probe these tests ask
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


def test_no_hub_id_at_all_is_one_line_where_the_hub_cannot_answer(online, monkeypatch, tmp_path):
    """'bad..name' offline: huggingface_hub's check of the id raised past the command line (a traceback)."""
    monkeypatch.setattr(reference, "_hub_reachable", lambda endpoint: False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ModelError, match=r"^could not load model 'bad\.\.name': Cannot have -- or \.\. in repo_id"
    ):
        reference.resolve_model("bad..name").weights()


def test_behind_a_proxy_the_hub_is_left_to_the_download(online, monkeypatch):
    """Where only a proxy reaches out (HTTPS_PROXY), a connection to the hub's own address fails: it is not
    asked, and the download goes through the proxy as huggingface_hub takes it."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    def asked(*args, **kwargs):
        raise AssertionError("the hub's address was asked past the proxy")

    monkeypatch.setattr(reference.socket, "create_connection", asked)
    assert reference._hub_reachable("https://huggingface.co")
    assert reference.resolve_model("org/tiny").weights() == ("org/tiny", {})
