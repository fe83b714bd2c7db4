"""Small randomly initialised models of each supported family, saved with a tokenizer: for tests, benchmarks
and demos that must run offline (speed does not depend on the weights)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    Qwen2Config,
    Qwen3Config,
)

from skipcore.models.random_models import BENCH_SHAPES, IDS, bench_model

__all__ = ["BENCH_SHAPES", "IDS", "bench_model", "make_tiny_model", "tiny_config", "tiny_tokenizer"]

SAMPLE_TEXT = (
    "The Eagle is a cheap coffee shop near Burger King in the riverside area. "
    "Green Man serves Italian food, has a customer rating of 5 out of 5 and is family friendly. "
    "Near the city centre you will find The Wrestlers, a pub with high prices. "
    "Skipping layers keeps batching and the KV cache intact while decoding faster. "
)


# Small enough that the tests' sequences (prompt + new tokens) pass it, so windowed layers really drop keys.
TINY_WINDOW = 8


def tiny_config(family: str, vocab_size: int, num_layers: int = 6, hidden: int = 64, heads: int = 4):
    """A small config of `family`; `opt-proj` is OPT with project_in/out and post-norm (like OPT-350m);
    `gemma3` (every third layer global, a soft-capped head) and `qwen3` (the upper half sliding) attend
    through a window of TINY_WINDOW positions."""
    common = dict(vocab_size=vocab_size, **IDS)
    if family in ("opt", "opt-proj"):
        proj = family == "opt-proj"
        return OPTConfig(
            hidden_size=hidden,
            num_hidden_layers=num_layers,
            ffn_dim=2 * hidden,
            num_attention_heads=heads,
            max_position_embeddings=512,
            word_embed_proj_dim=hidden // 2 if proj else hidden,
            do_layer_norm_before=not proj,
            **common,
        )
    if family == "gpt2":
        return GPT2Config(n_embd=hidden, n_layer=num_layers, n_head=heads, n_positions=512, **common)
    if family == "gemma3":
        return Gemma3TextConfig(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=1,
            head_dim=2 * hidden // heads,  # wider than hidden / heads, as Gemma 3's is
            query_pre_attn_scalar=2 * hidden // heads,
            sliding_window=TINY_WINDOW,
            layer_types=[
                "full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(num_layers)
            ],
            final_logit_softcapping=30.0,
            max_position_embeddings=512,
            **common,
        )
    if family == "qwen3":
        return Qwen3Config(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            head_dim=hidden // heads,
            use_sliding_window=True,
            sliding_window=TINY_WINDOW,
            max_window_layers=num_layers // 2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            **common,
        )
    cls = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[family]
    return cls(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=512,
        tie_word_embeddings=False,
        **common,
    )


def tiny_tokenizer(vocab_size: int = 300):
    from skipcore.data.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer([SAMPLE_TEXT] * 4, vocab_size=vocab_size)


def make_tiny_model(
    family: str, out_dir: str | Path, seed: int = 0, num_layers: int = 6, tokenizer=None
) -> Path:
    """Save a random `family` model and a tokenizer to out_dir (safetensors), loadable offline."""
    tokenizer = tokenizer or tiny_tokenizer()
    torch.manual_seed(seed)
    config = tiny_config(family, len(tokenizer), num_layers=num_layers)
    model = AutoModelForCausalLM.from_config(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
