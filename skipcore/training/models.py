"""Where a run's weights start: a model built from scratch (a family's config at a size, with a tokenizer
trained on the corpus), a model to fine-tune (every weight, or LoRA beside the frozen ones), a saved adapter
trained on, or the checkpoint a resume continues; and what the training record says of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, OPTConfig, PreTrainedModel

from skipcore.data import Example, corpus_texts, train_bpe_tokenizer
from skipcore.errors import UserError, quoted
from skipcore.models.loading import adapter_tokenizer, load_config, prepare_tokenizer
from skipcore.models.skeleton import meta_skeleton
from skipcore.models.training_record import read_record
from skipcore.training import FAMILIES, memory
from skipcore.training.distributed import shared_value
from skipcore.training.settings import TrainSettings, portable_name

FAMILY_ALIASES = {"opt-tiny": "opt", "gpt2-tiny": "gpt2", "llama-tiny": "llama"}


@dataclass(frozen=True)
class ModelSize:
    layers: int = TrainSettings.layers
    hidden: int = TrainSettings.hidden
    heads: int = TrainSettings.heads
    ffn: int = TrainSettings.ffn
    max_positions: int = TrainSettings.max_positions
    dropout: float = TrainSettings.dropout

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}", field=name)
        if self.max_positions < 2:
            raise UserError(
                f"max_positions must be >= 2 (a prompt token and a target token), got {self.max_positions}",
                field="max_positions",
            )
        if self.hidden % self.heads:
            raise UserError(
                f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})",
                field=("hidden", "heads"),
            )
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {self.dropout}", field="dropout")


TRAIN_BYTES_PER_PARAMETER = 16  # float32 weights and gradients, and Adam's two moments


def check_fits(size: ModelSize, vocab_size: int) -> None:
    """Refuse, before it is built, a model whose training state cannot fit in this machine's memory (`--layers
    100000` grew until the system killed it): its parameters counted from its sizes (products, embeddings; the
    norms' and biases' few left out), 16 bytes each."""
    h = size.hidden
    parameters = size.layers * (4 * h * h + 3 * h * size.ffn) + (vocab_size + size.max_positions) * h
    need = TRAIN_BYTES_PER_PARAMETER * parameters
    available = memory.device_memory("cpu")
    if available is not None and need > available:
        raise UserError(
            f"a model {size.layers} deep and {h} wide (about {parameters:,} parameters) needs about "
            f"{need / 2**30:.0f} GiB to train, more than this machine's {available / 2**30:.0f} GiB: use fewer "
            "layers or a smaller hidden or ffn",
            field=("layers", "hidden", "ffn"),
        )


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
    raise UserError(
        f"unknown init_config {quoted(family)}; choose one of {', '.join(FAMILIES)}", field="init_config"
    )


def new_tokenizer(examples: list[Example], vocab_size: int, tokenizer_dir: str | None = None):
    """The given tokenizer, or byte-level BPE trained on the training texts (prompt + target, as read)."""
    if tokenizer_dir:
        from transformers import AutoTokenizer

        if not Path(tokenizer_dir).is_dir():
            raise UserError(f"tokenizer directory not found: {tokenizer_dir}", field="tokenizer")
        return AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    return train_bpe_tokenizer(
        corpus_texts(examples), vocab_size=vocab_size
    )  # a size too small: vocab_size's


def model_from_config(family: str, size: ModelSize, tokenizer, attn: str = "sdpa") -> PreTrainedModel:
    """A randomly initialised model (seed it first) with the tokenizer set up for left-padded generation."""
    config = family_config(family, size, tokenizer)
    check_fits(size, config.vocab_size)
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


def lora_spec(s: TrainSettings):
    """The LoRA settings asked for, or None for training every weight; checked before any work (its settings
    without a rank are refused as idle: `skipcore.training.idle`)."""
    if s.lora_rank is None:
        return None
    from skipcore.models.lora import LoraSpec

    if s.init_config:
        raise UserError(
            "lora_rank fine-tunes a pretrained model; one trained from scratch trains every weight",
            field=("lora_rank", "model"),
        )
    targets = tuple(t.strip() for t in s.lora_targets.split(",") if t.strip())
    return LoraSpec(s.lora_rank, s.lora_alpha, s.lora_dropout, targets, tuple(s.whole_layers))


def starting_model(s: TrainSettings, examples: list, acc, resume_dir: Path | None, lora=None):
    """(model, tokenizer, where it came from, the peft model or None) for a from-scratch, fine-tuning or
    resumed run; with LoRA the model is the base whose projections peft wrapped."""
    from skipcore.models.lora import is_adapter_folder, trainable_again, with_lora

    if resume_dir is not None:
        origin = (read_record(resume_dir) or {}).get("init", {})
        if is_adapter_folder(resume_dir):  # a LoRA run: its base, with the saved adapter trainable again
            model, tokenizer = _adapter_base(resume_dir, s)
            return model, tokenizer, origin, trainable_again(model, resume_dir)
        model, tokenizer = load_for_training(str(resume_dir), s.attn, s.trust_remote_code)
        return model, tokenizer, origin, None
    if s.model and lora is not None and is_adapter_folder(s.model):
        return _adapter_again(s, lora)
    if s.model:
        if lora is not None:  # its targets checked against the model's modules before any weights load
            from skipcore.models.lora import lora_config

            lora_config(_skeleton(s.model, s.trust_remote_code), lora)
        model, tokenizer = load_for_training(s.model, s.attn, s.trust_remote_code)
        # named as it loads from any folder: a real model's short name, a local one's absolute path, a hub id
        base = portable_name(s.model)
        origin = {"from": "model", "model": base, "parameters": count_parameters(model), **_parent(s.model)}
        peft_model = with_lora(model, lora, base=base) if lora is not None else None
        return model, tokenizer, origin, peft_model
    size = ModelSize(s.layers, s.hidden, s.heads, s.ffn, s.max_positions, s.dropout)
    # the main process trains the tokenizer once and hands it to the others; nothing is written to the output
    # folder before every setting has been checked (the tokenizer is saved with the model)
    tokenizer = shared_value(
        acc, new_tokenizer(examples, s.vocab_size, s.tokenizer) if acc.is_main_process else None
    )
    model = model_from_config(s.init_config, size, tokenizer, s.attn)
    origin = {
        "from": "config",
        "family": model.config.model_type,
        "size": vars(size),
        "tokenizer": s.tokenizer or f"byte-level BPE trained on the training data of {s.dataset}",
        "vocab_size": len(tokenizer),
        "parameters": count_parameters(model),
    }
    return model, tokenizer, origin, None


def _adapter_again(s: TrainSettings, lora):
    """A saved LoRA adapter (a model folder) trained on: its base loaded, the adapter put back trainable with
    its own shape (other LoRA settings are refused), a fresh optimizer and schedule. What a resume does where
    the run's checkpoints are gone, as with a shipped model; the adapter saved names the same base."""
    from skipcore.models.lora import base_name, check_same_adapter, trainable_again

    base = base_name(s.model)
    check_same_adapter(_skeleton(base, s.trust_remote_code), lora, s.model)  # before any weights load
    model, tokenizer = _adapter_base(s.model, s)
    origin = {
        "from": "adapter",
        "model": base,
        "adapter": portable_name(s.model),
        "parameters": count_parameters(model),
        **_parent(s.model),
    }
    return model, tokenizer, origin, trainable_again(model, s.model)


def _adapter_base(folder: str | Path, s: TrainSettings):
    """(model, tokenizer) for training an adapter folder on, or resuming one: its base loaded for training, with
    the tokenizer the folder saved, as loading the folder takes it."""
    from skipcore.models.lora import base_name

    model, tokenizer = load_for_training(base_name(folder), s.attn, s.trust_remote_code)
    tokenizer = adapter_tokenizer(Path(folder), tokenizer)
    prepare_tokenizer(tokenizer, model)
    return model, tokenizer


def _skeleton(model: str, trust_remote_code: bool) -> PreTrainedModel:
    """`model`'s modules on the meta device, from its config alone (no weights read, no conversion): what a
    check of module names and layers needs."""
    return meta_skeleton(load_config(model, trust_remote_code), trust_remote_code)


def _parent(model: str) -> dict:
    """The training record's `init.parent`: how a model folder this run starts from was itself trained."""
    parent = read_record(model) if Path(model).is_dir() else None
    if not parent:
        return {}
    return {"parent": {k: parent.get(k) for k in ("init", "schedule", "data", "state", "training")}}


def num_layers_of(model) -> int:
    """Decoder layers, as the family's adapter counts them (from the config: no adapter built)."""
    from skipcore.adapters import shapes_from_config

    return shapes_from_config(model.config).num_layers


def model_facts(model, num_layers: int, saved_dtype: str) -> dict:
    """The training record's `model`: family, layers, parameters (all and trainable), the saved dtype."""
    return {
        "family": model.config.model_type,
        "num_layers": num_layers,
        "parameters": count_parameters(model),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "saved_dtype": saved_dtype,
    }


def lora_facts(peft_model, lora) -> dict | None:
    """The training record's `lora`: the settings, the base model and the wrapped modules; None without
    LoRA."""
    if peft_model is None:
        return None
    config = peft_model.peft_config["default"]
    return {
        **(lora.to_dict() if lora else {}),
        "base": config.base_model_name_or_path,
        "modules": sorted(config.target_modules),
    }


def adapter_base(peft_model) -> str | None:
    """The base a LoRA run's adapter names (what loading it loads first); None without LoRA."""
    return None if peft_model is None else peft_model.peft_config["default"].base_model_name_or_path


def how_trained(peft_model) -> str:
    """' (LoRA)', with the modules trained whole beside it, for the start-up line; '' when every weight
    trains."""
    if peft_model is None:
        return ""
    whole = peft_model.peft_config["default"].modules_to_save or []
    return f" (LoRA; {', '.join(sorted(whole))} whole)" if whole else " (LoRA)"
