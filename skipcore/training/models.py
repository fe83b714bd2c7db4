"""Where the trained model starts: a fresh config (with a tokenizer trained on the corpus) or a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, OPTConfig, PreTrainedModel

from skipcore.data import Example, corpus_texts, train_bpe_tokenizer
from skipcore.errors import UserError
from skipcore.models.loading import prepare_tokenizer
from skipcore.training import FAMILIES

FAMILY_ALIASES = {"opt-tiny": "opt", "gpt2-tiny": "gpt2", "llama-tiny": "llama"}


@dataclass(frozen=True)
class ModelSize:
    layers: int = 8
    hidden: int = 192
    heads: int = 6
    ffn: int = 768
    max_positions: int = 256
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "max_positions"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise UserError(f"--hidden ({self.hidden}) must be a multiple of --heads ({self.heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"--dropout must be in [0, 1), got {self.dropout}")


def family_config(family: str, size: ModelSize, tokenizer):
    """A config of `family` at `size` whose special ids are the tokenizer's (OPT's conventions by default)."""
    family = FAMILY_ALIASES.get(family, family)
    ids = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if family == "opt":
        return OPTConfig(
            hidden_size=size.hidden,
            num_hidden_layers=size.layers,
            ffn_dim=size.ffn,
            num_attention_heads=size.heads,
            max_position_embeddings=size.max_positions,
            word_embed_proj_dim=size.hidden,
            do_layer_norm_before=True,
            dropout=size.dropout,
            attention_dropout=0.0,
            activation_dropout=0.0,
            **ids,
        )
    if family == "gpt2":
        return GPT2Config(
            n_embd=size.hidden,
            n_layer=size.layers,
            n_head=size.heads,
            n_inner=size.ffn,
            n_positions=size.max_positions,
            resid_pdrop=size.dropout,
            embd_pdrop=size.dropout,
            attn_pdrop=0.0,
            **ids,
        )
    if family == "llama":
        return LlamaConfig(
            hidden_size=size.hidden,
            intermediate_size=size.ffn,
            num_hidden_layers=size.layers,
            num_attention_heads=size.heads,
            num_key_value_heads=size.heads,
            max_position_embeddings=size.max_positions,
            tie_word_embeddings=True,
            **ids,
        )
    raise UserError(f"unknown --init-config {family!r}; choose one of {', '.join(FAMILIES)}")


def new_tokenizer(examples: list[Example], vocab_size: int, tokenizer_dir: str | None = None):
    """The given tokenizer, or byte-level BPE trained on the training texts (prompt + target, as read)."""
    if tokenizer_dir:
        from transformers import AutoTokenizer

        if not Path(tokenizer_dir).is_dir():
            raise UserError(f"tokenizer directory not found: {tokenizer_dir}")
        return AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    try:
        return train_bpe_tokenizer(corpus_texts(examples), vocab_size=vocab_size)
    except ValueError as e:
        raise UserError(str(e)) from e


def model_from_config(family: str, size: ModelSize, tokenizer, attn: str = "sdpa") -> PreTrainedModel:
    """A randomly initialised model (seed it first) with the tokenizer set up for left-padded generation."""
    config = family_config(family, size, tokenizer)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    prepare_tokenizer(tokenizer, model)
    return model


def load_for_training(model_dir: str, attn: str = "sdpa", trust_remote_code: bool = False):
    """A supported model and its tokenizer in float32 on the CPU (the accelerator moves it), in train mode."""
    from skipcore.models.loading import load_model

    model, tokenizer = load_model(
        model_dir,
        device="cpu",
        dtype="float32",
        attn_implementation=attn,
        trust_remote_code=trust_remote_code,
    )
    return model.train(), tokenizer


def count_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once), the number a model card quotes."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
