"""What a generate call is checked for: arguments of the wrong kind at the door, logits that are not finite
before anything is written."""

from __future__ import annotations

import re
import shutil

import pytest
from safetensors.torch import load_file, save_file

from skipcore import SkipEngine, load_model
from skipcore.errors import ArgumentTypeError, UserError
from skipcore.policies import StaticPolicy
from skipcore.schedule import Schedule
from tests.helpers import refused


# -- the public API's argument kinds -------------------------------------------------------------------------
def test_the_engine_refuses_arguments_of_the_wrong_kind_at_the_door(model_dirs):
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    cases = [  # each refusal names its argument (`fields`), for a front end to say in its own words
        (("MR: x",), {}, "wrap one prompt in a list", "prompts"),
        ((["MR: x"], "linear"), {}, "got str 'linear'", "policy"),
        ((["MR: x"], 3), {}, "got int 3", "policy"),
        ((["MR: x"], [[0, 1], "ab"]), {}, "per-step layer sets", "policy"),
        ((["MR: x"], None, 4.5), {}, "max_new_tokens must be a whole number", "max_new_tokens"),  # 4.0 is 4
        ((["MR: x"], None, 2), {"batch_size": "2"}, "batch_size must be a whole number", "batch_size"),
        ((["MR: x"], None, 2), {"sampling": {"do_sample": True}}, "Sampling", "sampling"),
        ((["MR: x"], None, 2), {"progress": 5}, r"progress must be a function .* got int 5", "progress"),
    ]
    for args, kw, words, field in cases:
        with pytest.raises(ArgumentTypeError, match=words) as e:
            engine.generate(*args, **kw)
        assert isinstance(e.value, TypeError) and "\n" not in str(e.value)
        assert e.value.fields == (field,), words
    with pytest.raises(UserError, match="schedule is for 4 layers but the model has 6") as e:
        engine.generate(["MR: x"], Schedule(4, "constant", min_layers=2), 2)
    assert e.value.fields == ("schedule",)
    assert len(engine.generate(["MR: x"], StaticPolicy(), 2).texts) == 1  # the right kinds still work
    assert len(engine.generate(("MR: x", "MR: y"), [[0, 1, 2, 3, 4, 5], [0, 5]], 2).texts) == 2


def test_the_engine_refuses_a_model_it_cannot_decode_with_before_touching_it(model_dirs):
    """A model path, a model without its LM head, or one whose weights are in two dtypes is one line when the
    engine is made, where each failed inside it or mid-decode; the model is left as it was. One on the meta device
    is one line at its first decode (the tests make such engines to run their steps' shapes)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    folder = str(model_dirs["llama"])
    model, tok = load_model(folder, device="cpu", dtype="float32")
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(config)
    half_cast = AutoModelForCausalLM.from_pretrained(folder)
    half_cast.model.layers[1].to(torch.bfloat16)
    spread = AutoModelForCausalLM.from_pretrained(folder)
    spread.model.layers[1].to("meta")  # a device map's second device, as the CPU can make one
    cases = [
        (folder, ArgumentTypeError, "model must be a loaded causal LM .* got str"),
        (
            AutoModel.from_pretrained(folder),
            ArgumentTypeError,
            "LlamaModel has no LM head: give the causal LM",
        ),
        (half_cast, UserError, "weights are in bfloat16 and float32: cast it to one dtype"),
        (spread, UserError, "weights are spread over cpu and meta: skipcore decodes on one device"),
    ]
    for given, kind, words in cases:
        with pytest.raises(kind, match=words):
            SkipEngine(given, tok)
        if not isinstance(given, str):  # its attention not taken over (`kernels.attention.adopt`)
            assert given.config._attn_implementation == "sdpa"
    assert len(SkipEngine(model, tok).generate(["MR: x"], None, 2).texts) == 1
    with pytest.raises(UserError, match="^the model's weights are on the meta device"):
        SkipEngine(empty, tok).generate(["MR: x"], None, 2)


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


# -- prompts and tokenizers the model cannot read as given ---------------------------------------------------
def test_the_engine_pads_on_the_left_whatever_the_tokenizer_was_set_to(model_dirs):
    """A tokenizer loaded by hand may pad on the right (SmolLM2's does) or have no pad token; the engine pads its
    batches on the left with its own pad id all the same, so every row decodes as `generate()` decodes it."""
    from tests.helpers import PROMPTS, engine_for, hf_generate

    engine = engine_for(model_dirs, "llama")
    theirs = [row[:6] for row in hf_generate(engine, PROMPTS, 6, do_sample=False).tolist()]
    engine.tokenizer.padding_side = "right"
    assert engine.generate(PROMPTS, None, 6).token_ids == theirs
    engine.tokenizer.pad_token = None
    assert SkipEngine(engine.model, engine.tokenizer).generate(PROMPTS, None, 6).token_ids == theirs


def test_prompts_the_model_cannot_read_are_refused_before_any_work(model_dirs, monkeypatch):
    engine = SkipEngine(*load_model(str(model_dirs["llama"]), device="cpu"))
    real = engine.tokenizer.__call__

    def no_start_token(texts, *args, **kwargs):  # a tokenizer that adds no start token, as SmolLM2's
        out = real(texts, *args, **kwargs)
        out["input_ids"] = [
            ids[1:] if ids[:1] == [engine.tokenizer.bos_token_id] else ids for ids in out["input_ids"]
        ]
        return out

    monkeypatch.setattr(type(engine.tokenizer), "__call__", lambda self, *a, **k: no_start_token(*a, **k))
    with pytest.raises(UserError, match="prompt 1 has no tokens"):
        engine.generate(["MR: x", ""], None, 2)
    monkeypatch.undo()
    small = engine.model.get_input_embeddings().num_embeddings // 4
    engine.model.get_input_embeddings().num_embeddings = small  # the rows a smaller model's table would have
    with pytest.raises(
        UserError, match=f"past the model's {small} embeddings: the tokenizer is not this model's"
    ):
        engine.generate(["MR: name[The Eagle], eatType[pub]"], None, 2)


def test_explicit_layer_sets_are_checked_as_the_loop_runs_them(model_dirs):
    """Each step's set runs its layers in the order given, so one out of order, with a layer twice, or empty is
    refused; the prefill runs every layer (the design's step 0)."""
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    full = tuple(range(engine.num_layers))
    for sets, words in [
        ([full, (3, 0)], r"layer set 1 is \[3, 0\]"),
        ([full, (0, 0, 3)], r"layer set 1 is \[0, 0, 3\]"),
        ([full, ()], r"layer set 1 is \[\]"),
        ([(0, 3), (0, 3)], "layer set 0 is the prefill, which runs all 6 layers"),
    ]:
        with pytest.raises(UserError, match=words):
            engine.generate(["MR: x"], sets, 2)
    assert len(engine.generate(["MR: x"], [full, (0, 3)], 2).token_ids[0]) == 2


def test_a_refused_model_is_left_as_it_was():
    """An unsupported family is refused before the engine switches the model's attention to its own."""
    from transformers import Phi3Config, Phi3ForCausalLM

    from skipcore.models.testing import tiny_tokenizer

    config = Phi3Config(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        pad_token_id=0, attn_implementation="sdpa",
    )  # fmt: skip
    model = Phi3ForCausalLM(config)
    with pytest.raises(UserError, match="unsupported architecture 'phi3'"):
        SkipEngine(model, tiny_tokenizer())
    assert model.config._attn_implementation == "sdpa"


def test_wrong_kinds_of_policy_and_schedule_arguments_are_named():
    from skipcore import SpeculativePolicy, schedule_for_speedup

    for schedule in (None, "linear", [[0, 1]]):
        with pytest.raises(ArgumentTypeError, match="speculative decoding drafts on a schedule") as info:
            SpeculativePolicy(schedule)
        assert info.value.field == "schedule"
    with pytest.raises(UserError, match="num_layers must be a whole number >= 1, got 0"):
        schedule_for_speedup(0, 2.0, 10)
    with pytest.raises(UserError, match="max_new_tokens must be a whole number >= 1, got 0"):
        schedule_for_speedup(4, 2.0, 0)


def test_a_pad_token_past_the_embeddings_and_a_model_without_eos_decode_as_generate_does(
    model_dirs, tmp_path
):
    """A pad token added to a tokenizer without resizing the model (id 300 of 300 embeddings) failed a batch of
    prompts of different lengths in its first pass (IndexError); a model with no EOS anywhere could not make an
    engine (RuntimeError), where generate() runs every row to its limit. The engine masks its padding itself: any
    token the embeddings hold pads, and no EOS ends no row."""
    from tests.helpers import PROMPTS, engine_for, hf_generate

    engine = engine_for(model_dirs, "llama")
    one_by_one = [hf_generate(engine, [p], 6, do_sample=False)[0].tolist() for p in PROMPTS]
    engine.tokenizer.add_special_tokens({"pad_token": "[PAD-ADDED]"})
    assert engine.tokenizer.pad_token_id == engine.model.get_input_embeddings().weight.shape[0]
    assert SkipEngine(engine.model, engine.tokenizer).generate(PROMPTS, None, 6).token_ids == one_by_one
    model, tok = load_model(str(model_dirs["llama"]), device="cpu")
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    tok.eos_token = None
    theirs = model.generate(**tok(PROMPTS[:1], return_tensors="pt"), max_new_tokens=6, do_sample=False)
    assert SkipEngine(model, tok).generate(PROMPTS[:1], None, 6).token_ids == [theirs[0, -6:].tolist()]


def test_a_generation_config_without_eos_runs_every_row_to_its_limit_as_generate_does():
    """`model.generation_config.eos_token_id = None` (how transformers turns EOS off): generate() made 30 tokens and
    the engine stopped at the tokenizer's EOS after 14. The generation config decides, as generate() reads it; the
    tokenizer's EOS it leaves out is said."""
    from skipcore.errors import SkipcoreWarning
    from tests.helpers import REPO

    model, tok = load_model(str(REPO / "data/models/skipdecode-opt-e2e"), device="cpu")
    prompts = [
        "MR: name[The Eagle], eatType[pub]\nText:",
        "MR: name[Aromi], food[Chinese], area[city centre]\nText:",
    ]
    eos = model.generation_config.eos_token_id
    ids = SkipEngine(model, tok).generate(prompts, None, 30).token_ids
    assert any(len(row) < 30 for row in ids)  # some row ends at EOS while the config names it
    model.generation_config.eos_token_id = None
    said = rf'names no eos_token_id: every row runs to max_new_tokens.* add "eos_token_id": {eos} to its generation'
    with pytest.warns(SkipcoreWarning, match=said):
        engine = SkipEngine(model, tok)
    for prompt, row in zip(prompts, engine.generate(prompts, None, 30).token_ids, strict=True):
        theirs = model.generate(**tok([prompt], return_tensors="pt"), max_new_tokens=30, do_sample=False)
        assert row == theirs[0, -30:].tolist()


def test_a_model_cast_or_moved_after_its_engine_was_made_is_refused_until_a_new_engine_is_made(model_dirs):
    """The engine chose its KV cache's dtype and its runs' labels for the weights it was made with: a model cast to
    bfloat16 afterwards decoded with a float32 cache, other tokens than a new engine's, and its metadata said
    float32. Refused in one line (generate and generate_batch); cast back, the engine decodes as before."""
    import torch

    from skipcore.decode.sampling import Sampling, TokenPicker

    engine = SkipEngine(*load_model(str(model_dirs["llama"]), device="cpu", dtype="float32"))
    before = engine.generate(["MR: name[The Eagle]"], None, 4)
    engine.model.to(torch.bfloat16)
    said = "the model is in bfloat16 on cpu, but its engine was made for float32 on cpu: make a new engine"
    with pytest.raises(UserError, match=said) as e:
        engine.generate(["MR: name[The Eagle]"], None, 4)
    assert e.value.field == "model" and "\n" not in str(e.value)
    enc = engine.tokenizer(["MR: x"], return_tensors="pt")
    picker = TokenPicker(Sampling(), engine.device)
    with pytest.raises(UserError, match=said):
        engine.generate_batch(enc["input_ids"], enc["attention_mask"], None, picker, max_new_tokens=2)
    fresh = SkipEngine(engine.model, engine.tokenizer).generate(["MR: name[The Eagle]"], None, 4)
    assert fresh.metadata["dtype"] == "bfloat16"
    engine.model.to(torch.float32)
    assert engine.generate(["MR: name[The Eagle]"], None, 4).token_ids == before.token_ids


def test_generate_batch_holds_the_token_ids_it_is_given_to_what_generate_holds_a_prompts(model_dirs):
    """A caller's own token ids (`generate_batch`, as notebook 02 feeds it) past the embeddings, negative, not whole
    or too many for the model's positions failed inside torch's embedding or position table, the last after decode
    steps had run; each is one line now, before any step."""
    import torch

    from skipcore.decode.sampling import Sampling, TokenPicker

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    rows, limit = engine.model.get_input_embeddings().num_embeddings, engine.max_positions
    picker, steps = TokenPicker(Sampling(), engine.device), []
    ones = lambda ids: torch.ones(ids.shape, dtype=torch.long)  # noqa: E731
    long_row = torch.full((1, limit - 3), 5)
    for ids, new, said, field in [
        (torch.tensor([[5, 6, rows]]), 2, f"token id {rows} (row 0, column 2): the model's embeddings take 0 to "
         f"{rows - 1}", "input_ids"),
        (torch.tensor([[5, -1, 7]]), 2, "token id -1 (row 0, column 1)", "input_ids"),
        (torch.tensor([[5.0, 6.0]]), 2, "input_ids must hold whole token ids (an integer tensor), got float32",
         "input_ids"),
        (long_row, 4, f"the longest row ({limit - 3} tokens) plus max_new_tokens (4) exceeds the model's {limit} "
         "positions; use max_new_tokens 3 or fewer", "max_new_tokens"),
    ]:  # fmt: skip
        with pytest.raises(UserError, match=re.escape(said)) as e:
            engine.generate_batch(ids, ones(ids), None, picker, on_step=steps.append, max_new_tokens=new)
        assert e.value.field == field
    assert steps == []  # refused before any step
    # padding is read by its mask: a row of pads counts only its tokens
    padded = torch.cat([torch.full((1, 8), engine.pad_id), long_row], dim=1)
    mask = torch.cat([torch.zeros(1, 8, dtype=torch.long), ones(long_row)], dim=1)
    assert engine.generate_batch(padded, mask, None, picker, max_new_tokens=3).tokens.shape == (1, 3)
