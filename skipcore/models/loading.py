"""Loading a model and its tokenizer from a local directory (offline), a GGUF file, the short name of an installed
real model (`smollm2-135m`; see `skipcore.models.catalog`), or a hub id (where there is network)."""

from __future__ import annotations

import os
import pickle
import platform
import re
from contextlib import contextmanager
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel

from skipcore.adapters import check_supported
from skipcore.errors import UserError
from skipcore.models.catalog import REAL_MODELS, is_real_name, require_installed
from skipcore.models.gguf import file_folder, model_folder
from skipcore.models.lora import base_name, is_adapter_folder, merged

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# one of these beside the weights is a tokenizer transformers can load
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")
# what broken or refused model files raise while loading (truncated safetensors, a pickle weights_only blocks)
BROKEN_FILE_ERRORS = (OSError, ValueError, RuntimeError, EOFError, SafetensorError, pickle.UnpicklingError)
# what a config.json field of the wrong type raises (transformers 5 validates configs with huggingface_hub's
# strict dataclasses)
CONFIG_VALUE_ERRORS = (StrictDataclassError, TypeError)


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but no CUDA device is available")
    if device != "cpu" and not device.startswith("cuda"):
        raise UserError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _looks_like_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else is meant as a local directory."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or Path(name).expanduser().exists()


def _source(name_or_dir: str) -> tuple[str, dict]:
    """What transformers is given: a local directory (read offline) or a hub id."""
    local = Path(name_or_dir).expanduser()
    if local.is_dir():
        return str(local), {"local_files_only": True}
    return name_or_dir, {}


def model_directory(name_or_dir: str) -> str:
    """What `--model` names, as something `from_pretrained` reads: an installed real model's short name or a GGUF
    file (or a folder holding one GGUF and no config) becomes its cached safetensors folder, converted on first
    use; anything else is returned as given."""
    if is_real_name(name_or_dir):
        return str(model_folder(require_installed(name_or_dir)))
    local = Path(name_or_dir).expanduser()
    if local.is_file() and local.suffix.lower() == ".gguf":
        return str(file_folder(local))
    if local.is_dir() and not (local / "config.json").exists():
        found = sorted(local.glob("*.gguf"))
        if len(found) > 1:
            names = ", ".join(p.name for p in found[:4])
            raise UserError(f"{name_or_dir} holds {len(found)} GGUF files ({names}); pass the one to load")
        if found:
            return str(file_folder(found[0]))
    return name_or_dir


def load_config(name_or_dir: str, trust_remote_code: bool = False) -> PretrainedConfig:
    """The model's config alone (no weights), refused in one line where the model cannot be loaded or its
    family is not supported: what a tool checks before any work."""
    name_or_dir = model_directory(name_or_dir)
    local = Path(name_or_dir).expanduser()
    if is_adapter_folder(local):  # a LoRA fine-tune: its base's config is the model's
        return load_config(base_name(local), trust_remote_code)
    if local.exists() and not local.is_dir():
        raise UserError(f"model path {name_or_dir} is a file; pass the model's directory")
    if _looks_like_path(name_or_dir) and not local.is_dir():
        raise UserError(f"model directory not found: {name_or_dir}")
    source, kw = _source(name_or_dir)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, **kw)
    except (
        CONFIG_VALUE_ERRORS
    ) as e:  # a field of the wrong type ("num_hidden_layers": "12"): its own last line
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = re.sub(r"^\w+Error: ", "", lines[-1]) if lines else type(e).__name__
        raise UserError(
            f"could not load model {name_or_dir!r}: a config.json field of the wrong type: {reason}"
        ) from e
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = (
            ""
            if local.exists()
            else f" (installable real models: {', '.join(REAL_MODELS)}; see `skipcore models`)"
        )
        raise UserError(f"could not load model {name_or_dir!r}: {first}{hint}") from e
    check_supported(config.model_type)
    return config


def load_model(
    name_or_dir: str,
    device: str = "auto",
    dtype: str = "auto",
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, object]:
    """Model in eval mode on the device, plus its tokenizer (left padding, a pad token set)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    given, name_or_dir = name_or_dir, model_directory(name_or_dir)
    load_config(name_or_dir, trust_remote_code)
    source, kw = _source(name_or_dir)
    local = Path(name_or_dir).expanduser()
    if is_adapter_folder(local):
        return _load_adapter(local, dev, dt, attn_implementation, trust_remote_code)
    if local.is_dir() and not any((local / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(
            f"{name_or_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); save the tokenizer beside the "
            "model (tokenizer.save_pretrained(dir))"
        )
    try:
        with _quiet_transformers():  # its load report would print before our one line
            model, info = AutoModelForCausalLM.from_pretrained(
                source,
                dtype=dt,
                attn_implementation=attn_implementation,
                trust_remote_code=trust_remote_code,
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # reported below, in one line, instead of a pointer to a report
                **kw,
            )
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **kw)
    except BROKEN_FILE_ERRORS as e:
        raise UserError(f"could not load model {name_or_dir!r}: {broken_file_reason(e)}") from e
    mismatch = weights_mismatch(info, model.config)
    if mismatch:
        raise UserError(
            f"could not load model {name_or_dir!r}: its weights do not match its config.json: {mismatch}; the "
            "config and the weights must come from the same model"
        )
    if not tokenizer("a b")["input_ids"]:
        raise UserError(f"the tokenizer in {name_or_dir} turns text into no tokens; is it the model's own?")
    prepare_tokenizer(tokenizer, model)
    if is_real_name(given):
        model.config._name_or_path = given  # what traces and summaries name: the short name, not a cache path
    return model.to(dev).eval(), tokenizer


def _load_adapter(
    folder: Path, dev: torch.device, dt: torch.dtype, attn_implementation: str, trust_remote_code: bool
) -> tuple[PreTrainedModel, object]:
    """A LoRA folder: its base loaded in float32, the adapter merged, then moved to the device and dtype; the
    folder's own tokenizer where it saved one."""
    tokenizers = []

    def load_base(name: str):
        model, tokenizer = load_model(name, "cpu", "float32", attn_implementation, trust_remote_code)
        tokenizers.append(tokenizer)
        return model

    model = merged(folder, load_base)
    tokenizer = tokenizers[0]
    if any((folder / f).is_file() for f in TOKENIZER_FILES):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except BROKEN_FILE_ERRORS as e:
            raise UserError(f"could not load the tokenizer in {folder}: {broken_file_reason(e)}") from e
    prepare_tokenizer(tokenizer, model)
    model.config._name_or_path = str(folder)
    return model.to(device=dev, dtype=dt).eval(), tokenizer


@contextmanager
def _quiet_transformers():
    """transformers' warnings off for a block (its logging is global: restored afterwards)."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def weights_mismatch(info: dict, config: PretrainedConfig) -> str | None:
    """What transformers' loading report says is wrong, in one clause per kind: tensors the config needs that the
    weights lack (newly initialised: a half-random model), weights of other shapes (re-initialised too), weights
    with no place in the model. None when the weights fit."""
    parts = []
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        layers = sorted({int(m.group(1)) for k in missing if (m := re.search(r"layers\.(\d+)\.", k))})
        declared = getattr(config, "num_hidden_layers", None)
        where = (
            f" (layers {layers[0]}-{layers[-1]} of the {declared} config.json declares have none)"
            if layers and declared and layers[-1] == declared - 1 and len(layers) > 1
            else ""
        )
        parts.append(f"{_tensors(missing)} the model needs not in the weights, e.g. {missing[0]}{where}")
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        key, saved, wanted = mismatched[0]
        parts.append(
            f"{_tensors(mismatched)} of other shapes in the weights than config.json gives them, e.g. {key}: "
            f"{list(saved)} in the weights, {list(wanted)} by the config"
        )
    unexpected = sorted(info.get("unexpected_keys") or ())
    if unexpected:
        parts.append(
            f"{_tensors(unexpected)} in the weights with no place in the model, e.g. {unexpected[0]}"
        )
    return "; ".join(parts) or None


def _tensors(keys) -> str:
    return f"{len(keys)} tensor{'s' if len(keys) != 1 else ''}"


def prepare_tokenizer(tokenizer, model: PreTrainedModel) -> None:
    """Left padding keeps every row's last prompt token in the same column, so rows share decode steps."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def hardware_name(device) -> str:
    """The GPU's name, or the CPU model and core count: a wall-clock number means nothing without it."""
    if getattr(device, "type", str(device)) == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{name} ({os.cpu_count()} cores, {threads} torch thread{'s' if threads != 1 else ''})"


def broken_file_reason(e: BaseException) -> str:
    """One line on why model files did not load, with what to do: a pickle that weights_only refused (its code
    never ran), damaged or truncated weights, or the loader's own first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # torch colours its messages for terminals
    if isinstance(e, pickle.UnpicklingError) or "weights_only" in text or "Weights only load failed" in text:
        return (
            "its torch weights file holds Python objects beyond tensors, which skipcore does not unpickle "
            "(weights_only; nothing in it ran); save a copy you trust as safetensors "
            "(model.save_pretrained(dir, safe_serialization=True))"
        )
    first = text.splitlines()[0] if text else type(e).__name__
    if isinstance(e, SafetensorError) or "deserializ" in first.lower() or isinstance(e, EOFError):
        return f"{first} (the weights file is damaged or incomplete; copy or save it again)"
    return first
