"""What a generate call is checked for: arguments of the wrong kind at the door, logits that are not finite
before anything is written."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file, save_file

from skipcore import SkipEngine, load_model
from skipcore.errors import ArgumentTypeError, UserError
from skipcore.policies import StaticPolicy
from tests.helpers import refused


# -- the public API's argument kinds -------------------------------------------------------------------------
def test_the_engine_refuses_arguments_of_the_wrong_kind_at_the_door(model_dirs):
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    cases = [
        (("MR: x",), {}, "wrap one prompt in a list"),
        ((["MR: x"], "linear"), {}, "got str 'linear'"),
        ((["MR: x"], 3), {}, "got int 3"),
        ((["MR: x"], [[0, 1], "ab"]), {}, "per-step layer sets"),
        ((["MR: x"], None, 4.0), {}, "max_new_tokens must be a whole number"),
        ((["MR: x"], None, 2), {"batch_size": "2"}, "batch_size must be a whole number"),
        ((["MR: x"], None, 2), {"sampling": {"do_sample": True}}, "Sampling"),
    ]
    for args, kw, words in cases:
        with pytest.raises(ArgumentTypeError, match=words) as e:
            engine.generate(*args, **kw)
        assert isinstance(e.value, TypeError) and "\n" not in str(e.value)
    assert len(engine.generate(["MR: x"], StaticPolicy(), 2).texts) == 1  # the right kinds still work
    assert len(engine.generate(("MR: x", "MR: y"), [[0, 1, 2, 3, 4, 5], [0, 5]], 2).texts) == 2


# -- NaN weights ---------------------------------------------------------------------------------------------
def test_non_finite_logits_are_said_before_anything_is_written(model_dirs, tmp_path, capsys):
    broken = shutil.copytree(model_dirs["opt"], tmp_path / "nan")
    weights = load_file(str(broken / "model.safetensors"))
    key = next(k for k in weights if "layers.2.fc1.weight" in k)
    weights[key][:] = float("nan")
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    trace = tmp_path / "t.jsonl"
    for extra in ([], ["--trace", str(trace)]):
        argv = ["generate", "--model", str(broken), "--prompt", "MR: x", "--max-new-tokens", "3", *extra]
        err = refused(capsys, argv)
        assert "logits are not finite" in err and "step 0 of prompt 0" in err
    assert not trace.exists() and not (tmp_path / "t.jsonl.meta.json").exists()
    with pytest.raises(UserError, match="not finite"):
        SkipEngine(*load_model(str(broken), device="cpu")).generate(["MR: x"], None, 2)
