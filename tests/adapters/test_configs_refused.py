"""A config of a supported family that the engine cannot run exactly is refused in one line, before any weights
are read: its tokens would silently differ from generate()'s. Longrope (Phi-3-style rotary scaling, in a Llama
config) picks its short or long factors per pass in transformers, where the engine rotates every position once;
bidirectional attention (EmbeddingGemma's Gemma 3 config) decodes nothing causally; a sliding window set in a
family whose attention reads none is honoured by transformers' cache and not by its forward; sliding layers with no
window to slide fail in transformers' own forward."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM

from skipcore import SkipEngine, load_model
from skipcore.errors import ModelError, UserError
from skipcore.models.testing import tiny_config


def saved(tmp_path, tokenizer, family: str, **overrides):
    config = tiny_config(family, len(tokenizer), num_layers=2)
    for name, value in overrides.items():
        setattr(config, name, value)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / family)
    tokenizer.save_pretrained(tmp_path / family)
    return tmp_path / family, model


LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0] * 8,
    "long_factor": [4.0] * 8,
    "original_max_position_embeddings": 16,
}


@pytest.mark.parametrize(
    ("family", "overrides", "said"),
    [
        ("llama", {"rope_parameters": LONGROPE}, "rope type 'longrope' is not supported"),
        ("gemma3", {"use_bidirectional_attention": True}, "bidirectional attention"),
        (
            "llama",
            {"head_dim": 7},
            "head_dim 7 is odd: rotary position embeddings turn a head's values in pairs",
        ),
        ("qwen3", {"head_dim": 5}, "head_dim 5 is odd"),
        # a window in a family whose attention reads none: transformers' cache slides by it, its forward does not
        (
            "llama",
            {"sliding_window": 4},
            "sliding_window 4 is set in a config of type 'llama', whose attention reads no window",
        ),
        ("opt", {"sliding_window": 6}, "sliding_window 6 is set in a config of type 'opt'"),
        ("gpt2", {"sliding_window": 6}, "sliding_window 6 is set in a config of type 'gpt2'"),
        # sliding layers with no window (a config written by hand): transformers' own forward fails on it
        (
            "qwen2",
            {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": None},
            "layer_types marks layer 0 sliding_attention, but the config sets no sliding_window",
        ),
        (
            "qwen3",
            {"layer_types": ["sliding_attention"] * 2, "use_sliding_window": False},
            "layers 0, 1 sliding",
        ),
    ],
)
def test_a_config_the_engine_cannot_run_exactly_is_refused(tmp_path, tokenizer, family, overrides, said):
    folder, model = saved(tmp_path, tokenizer, family, **overrides)
    with pytest.raises(ModelError, match=said) as e:
        load_model(str(folder))
    assert str(e.value).startswith(str(folder))  # names the model
    with pytest.raises(UserError, match=said):
        SkipEngine(model, tokenizer)


def test_rotary_scaling_that_is_fixed_per_position_still_runs(tmp_path, tokenizer):
    """llama3, yarn and dynamic rotary scaling give each position one rotation: equal to generate()'s (the
    exactness tests' families), not refused."""
    folder, _ = saved(
        tmp_path,
        tokenizer,
        "llama",
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    )
    model, tok = load_model(str(folder))
    SkipEngine(model, tok)


def test_the_cost_models_sizes_take_a_models_config_and_say_so_of_anything_else():
    """`shapes_from_config` of a dict (a config.json read by hand) or None failed on its `model_type` attribute."""
    from transformers import AutoConfig

    from skipcore import shapes_from_config
    from skipcore.errors import ArgumentTypeError

    for given in ({"model_type": "llama", "num_hidden_layers": 2}, None):
        with pytest.raises(
            ArgumentTypeError, match=f"config must be a model's config .* got {type(given).__name__}"
        ):
            shapes_from_config(given)
    config = AutoConfig.for_model("llama", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300)  # fmt: skip
    assert shapes_from_config(config).num_layers == 2


def test_many_sliding_layers_without_a_window_are_said_in_a_line():
    """A 12-layer config's sliding layers were listed one by one, a 30-layer one's thirty numbers."""
    from transformers import Qwen2Config

    from skipcore.adapters import check_config

    config = Qwen2Config(num_hidden_layers=12, layer_types=["sliding_attention"] * 12, sliding_window=None)
    with pytest.raises(UserError) as e:
        check_config(config)
    assert str(e.value).startswith(
        "layer_types marks layers 0, 1, 2, 3, 4, 5, ..., 11 (12 layers) sliding_attention"
    )
