"""Checkpoints: a model directory any `from_pretrained` reads, plus what it takes to resume or reuse it.

Layout of a checkpoint directory:

- `config.json`, `generation_config.json`, `model.safetensors`, tokenizer files: the model, loadable by
  `skipcore.models.loading.load_model` (and transformers) with no skipcore code at all; for a LoRA run instead
  `adapter_config.json` and `adapter_model.safetensors` (peft's format, naming the base model), which
  `load_model` merges into its base;
- `skipcore_training.json`: the training and schedule settings, data statistics, step and timings. Its
  `generation` entry (decay span = median target length, max_new_tokens, the typical output length) is what
  generation reuses, through `skipcore.models.generation_defaults`;
- resumable checkpoints only: `optimizer.pt`, `scheduler.pt` (state dicts, `torch.save`) and
  `rng_state_<rank>.pt`. They are read with `torch.load(weights_only=True)`: tensors and plain containers
  only, never arbitrary pickled objects.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch

from skipcore.errors import UserError

# The settings file and the decoding defaults it gives are model-level (skipcore.models.generation_defaults); they
# stay importable from here for older callers.
from skipcore.models.generation_defaults import (  # noqa: F401
    FORMAT,
    SETTINGS_FILE,
    defaults_from_settings,
    generation_defaults,
    read_settings,
    speedup_horizon,
    typical_output_tokens,
)

SAVE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def save_model(model, tokenizer, out_dir: str | Path, settings: dict, dtype: str = "float32") -> Path:
    """Write the model (safetensors, in `dtype`), its tokenizer and the settings json into `out_dir`; a peft
    model is saved as its adapter alone."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "peft_config"):
        from skipcore.models.lora import save_adapter

        save_adapter(model, out, SAVE_DTYPES[dtype] if dtype != "float32" else None)
    else:
        if dtype != "float32":  # small models only; keeps the training weights in float32
            model = copy.deepcopy(model).to(SAVE_DTYPES[dtype])
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    write_settings(out, settings)
    return out


def write_settings(model_dir: str | Path, settings: dict) -> None:
    path = Path(model_dir) / SETTINGS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **settings}, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def save_state(ckpt_dir: str | Path, optimizer, scheduler, rank: int, main: bool) -> None:
    """Optimizer and LR-scheduler state (the main process; they are identical everywhere) and this rank's RNG."""
    ckpt = Path(ckpt_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    if main:
        torch.save(optimizer.state_dict(), ckpt / "optimizer.pt")
        torch.save(scheduler.state_dict(), ckpt / "scheduler.pt")
    torch.save({"torch": torch.get_rng_state()}, ckpt / f"rng_state_{rank}.pt")


def load_state(ckpt_dir: str | Path, optimizer, scheduler, rank: int) -> None:
    """Restore what `save_state` wrote. A rank with no RNG file of its own (more processes now) keeps its seed."""
    ckpt = Path(ckpt_dir)
    for name in ("optimizer.pt", "scheduler.pt"):
        if not (ckpt / name).is_file():
            raise UserError(f"{ckpt} is not a resumable checkpoint: {name} is missing")
    try:
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
    except (RuntimeError, ValueError, KeyError) as e:
        raise UserError(f"cannot restore the optimizer from {ckpt}: {str(e).splitlines()[0]}") from e
    rng = ckpt / f"rng_state_{rank}.pt"
    if rng.is_file():
        torch.set_rng_state(torch.load(rng, weights_only=True)["torch"])


def checkpoint_name(step: int) -> str:
    return f"step-{step:07d}"


def prune_checkpoints(ckpt_root: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` resumable checkpoints (keep <= 0 keeps them all)."""
    if keep <= 0:
        return
    found = sorted(p for p in Path(ckpt_root).glob("step-*") if p.is_dir())
    for old in found[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def intact_checkpoint(ckpt: str | Path) -> bool:
    """Whether a checkpoint holds everything a resume reads (settings, config, weights, optimizer and
    scheduler), none of it empty."""
    ckpt = Path(ckpt)

    def present(name: str) -> bool:
        return (ckpt / name).is_file() and (ckpt / name).stat().st_size > 0

    weights = any(
        present(f) for f in ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
    )
    config = "adapter_config.json" if present("adapter_config.json") else "config.json"
    return weights and all(present(f) for f in (SETTINGS_FILE, config, "optimizer.pt", "scheduler.pt"))


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The newest intact step-* checkpoint (one an interruption left incomplete is passed over)."""
    found = sorted(p for p in Path(ckpt_root).glob("step-*") if p.is_dir() and intact_checkpoint(p))
    return found[-1] if found else None


def staging_dir(target: str | Path) -> Path:
    """Where a checkpoint is written before it is renamed to `target` (not a step-* name: never resumed from)."""
    target = Path(target)
    return target.with_name(f".{target.name}.partial")


def publish_checkpoint(staging: Path, target: Path) -> None:
    """Rename a fully written checkpoint into place, replacing an older one of the same step."""
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
