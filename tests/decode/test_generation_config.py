"""A model's `generation_config.json` may ask `generate()` for rules on the logits (a repetition penalty, a minimum
length) and for sampling settings of its own. The decode picks from the head's logits as they are: full depth is
`generate()`'s tokens with those rules off, and a model that asks for them is told so in one warning, not left to
differ from `generate()` in silence."""

from __future__ import annotations

import warnings

import pytest

from skipcore.decode.engine import SkipEngine
from skipcore.errors import SkipcoreWarning
from skipcore.models.loading import load_model
from tests.helpers import PROMPTS, hf_generate


def test_rules_the_decode_does_not_apply_are_said_and_are_what_parts_it_from_generate(model_dirs):
    model, tok = load_model(
        str(model_dirs["llama"]), device="cpu", dtype="float32", attn_implementation="eager"
    )
    model.generation_config.repetition_penalty = 1.5
    model.generation_config.min_new_tokens = 3
    with pytest.warns(
        SkipcoreWarning, match=r"sets repetition_penalty 1\.5, min_new_tokens 3, which skipcore"
    ) as w:
        engine = SkipEngine(model, tok)
    assert len(w) == 1 and "its tokens are generate()'s with those off" in str(w[0].message)
    ours = engine.generate(PROMPTS, None, 10)
    plain = hf_generate(engine, PROMPTS, 10, do_sample=False, repetition_penalty=1.0, min_new_tokens=0)
    assert ours.token_ids == [
        row[: len(ids)] for row, ids in zip(plain.tolist(), ours.token_ids, strict=True)
    ]
    ruled = hf_generate(engine, PROMPTS, 10, do_sample=False)
    assert ruled.tolist() != plain.tolist()  # the rules the warning names are what part the two


def test_a_models_own_sampling_settings_are_said_and_a_plain_config_says_nothing(model_dirs):
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkipcoreWarning)
        SkipEngine(model, tok)  # transformers' defaults: nothing to say
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.7
    model.generation_config.top_k = 20
    said = r"asks generate\(\) to sample \(do_sample, temperature 0.7, top_k 20\): decoding here is greedy unless"
    with pytest.warns(SkipcoreWarning, match=said):
        SkipEngine(model, tok)


@pytest.mark.parametrize("eos", ["two", 2.5, [2, "x"], True, {"a": 2}])
def test_an_eos_that_is_no_token_id_is_one_line_naming_the_file(model_dirs, tmp_path, eos):
    """A hand-edited generation_config.json loads as it is; the engine said a wrongly typed EOS as torch's
    'too many dimensions' (text) or took a fraction as a token."""
    import json
    import shutil

    from skipcore.errors import ModelError

    folder = tmp_path / "model"
    shutil.copytree(model_dirs["opt"], folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    model, tok = load_model(str(folder), device="cpu")
    with pytest.raises(
        ModelError, match=r"generation_config\.json says eos_token_id .*token ids are whole"
    ) as e:
        SkipEngine(model, tok)
    assert e.value.field == "model" and len(str(e.value).splitlines()) == 1


def test_eos_ids_of_numpy_or_json_floats_are_token_ids(model_dirs):
    model, tok = load_model(str(model_dirs["opt"]), device="cpu")
    model.generation_config.eos_token_id = [2.0]
    assert SkipEngine(model, tok).eos_ids.tolist() == [2]
    model.generation_config.eos_token_id = -1  # names no token: rows run to their limit (tests use it)
    assert SkipEngine(model, tok).eos_ids.tolist() == [-1]


@pytest.mark.parametrize("given", [None, "gpt2", 5])
def test_a_missing_tokenizer_is_one_line_naming_it(model_dirs, given):
    from skipcore.errors import ArgumentTypeError

    model, _ = load_model(str(model_dirs["opt"]), device="cpu")
    with pytest.raises(ArgumentTypeError, match="tokenizer must be the model's tokenizer") as e:
        SkipEngine(model, given)
    assert e.value.field == "tokenizer"
