"""Randomly initialised models shaped like public checkpoints, built in memory (no download).

Speed does not depend on the weights' values, so the bench and the dashboard's designer use these to measure and
cost OPT-, Llama- and Gemma-sized models on a machine that has none of their checkpoints. The real models'
shapes (`smollm2-135m`, `gemma-3-270m`) are copied from their GGUF files' configs, so a machine without the
packages still times and costs the same sizes.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, OPTConfig, PretrainedConfig

CONFIGS = {"opt": OPTConfig, "llama": LlamaConfig, "gemma3_text": Gemma3TextConfig}

IDS = {"bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}

BENCH_SHAPES = {
    # name: (family, config overrides) of public models, randomly initialised; the tiny ones for smoke tests
    "opt-tiny": (
        "opt",
        dict(
            hidden_size=64,
            num_hidden_layers=8,
            ffn_dim=128,
            num_attention_heads=4,
            word_embed_proj_dim=64,
            vocab_size=1024,
            max_position_embeddings=256,
        ),
    ),
    "llama-tiny": (
        "llama",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=1024,
            max_position_embeddings=256,
        ),
    ),
    "opt-125m": (
        "opt",
        dict(
            hidden_size=768,
            num_hidden_layers=12,
            ffn_dim=3072,
            num_attention_heads=12,
            word_embed_proj_dim=768,
            vocab_size=50272,
            max_position_embeddings=2048,
        ),
    ),
    "opt-1.3b": (
        "opt",
        dict(
            hidden_size=2048,
            num_hidden_layers=24,
            ffn_dim=8192,
            num_attention_heads=32,
            word_embed_proj_dim=2048,
            vocab_size=50272,
            max_position_embeddings=2048,
        ),
    ),
    "llama-1b": (
        "llama",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            vocab_size=128256,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        ),
    ),
    # the real models' own sizes (their installed configs); the bench takes their real weights when installed
    "smollm2-135m": (
        "llama",
        dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            head_dim=64,
            vocab_size=49152,
            max_position_embeddings=8192,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
            tie_word_embeddings=True,
        ),
    ),
    "gemma-3-270m": (
        "gemma3_text",
        dict(
            hidden_size=640,
            intermediate_size=2048,
            num_hidden_layers=18,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            query_pre_attn_scalar=256,
            vocab_size=262144,
            max_position_embeddings=32768,
            sliding_window=512,
            layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
            rms_norm_eps=1e-6,
            rope_parameters={
                "full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
            },
            tie_word_embeddings=True,
        ),
    ),
}


def bench_config(shape: str) -> PretrainedConfig:
    """The config of a bench shape, the one place it is built (the bench, the designer's costs)."""
    family, overrides = BENCH_SHAPES[shape]
    return CONFIGS[family](**{**IDS, **overrides})


def bench_model(shape: str, dtype: torch.dtype = torch.float32, device: str = "cpu", attn: str = "sdpa"):
    """A randomly initialised model shaped like a public checkpoint, built in memory (no download)."""
    config = bench_config(shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    return model.eval()
