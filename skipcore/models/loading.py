"""Loading a model's config, or the model and its tokenizer, from what a name refers to (`skipcore.models.reference`:
a local folder, read offline; a LoRA adapter on its base; an installed real model's short name or a GGUF file,
through its cached safetensors copy; a hub id, where there is network), and the device and dtype to put it on.
Whatever makes a model unusable is a `ModelError`, one line naming the model."""

from __future__ import annotations

import os
import pickle
import platform
import re
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel

from skipcore.adapters import ADAPTERS, check_config, check_supported
from skipcore.errors import ModelError, SkipcoreWarning, UserError, first_line, is_failure, quoted
from skipcore.kernels.precision import DtypeChoice
from skipcore.models.catalog import REAL_MODELS
from skipcore.models.dtype_choice import Promise, asked_dtype, choose_dtype
from skipcore.models.gguf_header import config_dict, read_header
from skipcore.models.lora import merged
from skipcore.models.reference import ModelRef, resolve_model
from skipcore.models.weights_fit import weights_mismatch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# one of these beside the weights is a tokenizer transformers can load
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")
# what broken or refused model files raise while loading (truncated safetensors, a pickle weights_only blocks)
BROKEN_FILE_ERRORS = (OSError, ValueError, RuntimeError, EOFError, SafetensorError, pickle.UnpicklingError)
# what a config.json field of the wrong type raises (transformers 5 validates configs with huggingface_hub's
# strict dataclasses)
CONFIG_VALUE_ERRORS = (StrictDataclassError, TypeError)


def check_tokenizer_files(name: str, folder: Path) -> None:
    """Refuse a model folder that holds no tokenizer (its weights alone decode nothing), before any weights are
    read: the loader's check, which a page picking a second model (a floor's reference) says at once."""
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise ModelError(
            f"{name} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); save the tokenizer beside the "
            "model (tokenizer.save_pretrained(dir))"
        )


def check_device(device: str) -> None:
    """An unknown device name refused in one line; whether the device is on this machine is `resolve_device`'s
    question (a Ray cluster's workers may have a GPU its driver lacks)."""
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise UserError(f"unknown device {quoted(device)}; choose auto, cpu or cuda", field="device")


def resolve_device(device: str = "auto") -> torch.device:
    """The device a run on this machine uses, refused in one line where it is unknown or not here."""
    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {device!r} was asked for, but no CUDA device is available", field="device")
    return torch.device(device)


def resolve_dtype(
    dtype: str | torch.dtype,
    device: torch.device,
    config: PretrainedConfig | None = None,
    promise: Promise | None = None,
) -> DtypeChoice:
    """The dtype a model runs in and why: one asked for by name, or `auto`'s choice for this device and a model
    of `config` in a run that promises `promise` (`skipcore.models.dtype_choice.choose_dtype`)."""
    dtype = check_dtype(dtype)
    if dtype == "auto":
        shapes = ADAPTERS[config.model_type].shapes_from_config(config) if config is not None else None
        return choose_dtype(device, shapes, promise)
    return asked_dtype(DTYPES[dtype], device)


def model_dtype(
    model: str | os.PathLike | ModelRef,
    device: str = "auto",
    dtype: str | torch.dtype = "auto",
    promise: Promise | None = None,
    trust_remote_code: bool = False,
) -> DtypeChoice:
    """The dtype `model` runs in on `device` and why (`resolve_dtype`; its config read for `auto` only), each
    refusal the one `load_model` would give. A run decides once, loads the model in it (`load_model(model, device,
    choice.name)`) and gives the engine the choice (`SkipEngine(..., dtype_choice=choice)`), which its runs
    record."""
    dev = resolve_device(device)
    dtype = check_dtype(dtype)
    config = load_config(model, trust_remote_code) if dtype == "auto" else None
    return resolve_dtype(dtype, dev, config, promise)


def check_dtype(dtype: str | torch.dtype) -> str:
    """The dtype's name (torch's dtype as its name: `torch.bfloat16` is "bfloat16"); an unknown one refused in one
    line (before any model is looked for)."""
    named = {v: k for k, v in DTYPES.items()}.get(dtype, dtype) if isinstance(dtype, torch.dtype) else dtype
    if named != "auto" and named not in DTYPES:
        raise UserError(f"unknown dtype {quoted(dtype)}; choose auto, {', '.join(DTYPES)}", field="dtype")
    return named


def load_config(model: str | os.PathLike | ModelRef, trust_remote_code: bool = False) -> PretrainedConfig:
    """The model's config alone (no weights, never a conversion: a GGUF model not yet cached is read from its
    file's header), refused in one line where the model cannot be used or its family is not supported: what a
    tool checks before any work."""
    ref = model if isinstance(model, ModelRef) else resolve_model(model)
    if ref.base is not None:  # a LoRA fine-tune: its base's config is the model's, if the adapter fits it
        from skipcore.models.lora import adapter_misfit

        config = load_config(ref.base, trust_remote_code)
        if ref.path is not None and (misfit := adapter_misfit(ref.path, config, trust_remote_code)):
            raise ModelError(f"the adapter in {ref.path} does not fit its base model: {misfit}")
        return config
    if ref.needs_conversion:
        return _gguf_config(ref)
    source, kw = ref.weights()
    config = _config_or_refusal(
        ref, lambda: AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, **kw)
    )
    _check_family(ref, config.model_type)
    try:
        check_config(config)
    except UserError as e:
        raise ModelError(f"{ref.name}: {e}") from e
    return config


def _gguf_config(ref: ModelRef) -> PretrainedConfig:
    """The config a GGUF file's header describes, as transformers would build it on conversion."""
    from transformers import CONFIG_MAPPING

    header = read_header(ref.gguf_parts(), ref.name)
    try:
        values = config_dict(header)
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a field of a type llama.cpp never writes
        raise ModelError(f"could not read model {ref.name!r}: its GGUF header holds {e!r}") from e
    _check_family(ref, values.get("model_type"))
    return _config_or_refusal(ref, lambda: CONFIG_MAPPING[values["model_type"]].from_dict(values))


def _config_or_refusal(ref: ModelRef, read: Callable[[], PretrainedConfig]) -> PretrainedConfig:
    """`read()`, its failures said in one line naming the model. transformers reads config.json with Python's
    JSON reader, which recurses once per level of nesting: a file nested a few thousand deep raises RecursionError
    there, said here as `skipcore.files.parse_json` says it of every other JSON file a user gives."""
    try:
        return read()
    except RecursionError as e:
        raise ModelError(
            f"could not load model {ref.name!r}: its config.json is nested deeper than a JSON reader follows"
        ) from e
    except CONFIG_VALUE_ERRORS as e:
        # a field of the wrong type ("num_hidden_layers": "12"): its own last line
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = re.sub(r"^\w+Error: ", "", lines[-1]) if lines else type(e).__name__
        raise ModelError(
            f"could not load model {ref.name!r}: a config.json field of the wrong type: {reason}"
        ) from e
    except (OSError, ValueError) as e:
        # a model type of the folder's own code, which was not allowed to run
        if "trust_remote_code" in str(e):
            if (kind := _declared_model_type(ref)) is not None:
                _check_family(ref, kind)  # a family skipcore has no adapter for, whatever code it brings
            raise ModelError(
                f"could not load model {ref.name!r}: its config is read by code of its own (auto_map), which runs "
                "only with --trust-remote-code (trust_remote_code=True from Python)"
            ) from e
        first = first_line(e)
        hint = ""
        if ref.kind == "hub":  # perhaps meant as a real model's short name
            hint = f" (installable real models: {', '.join(REAL_MODELS)}; see `skipcore models`)"
        raise ModelError(f"could not load model {ref.name!r}: {first}{hint}") from e


def _declared_model_type(ref: ModelRef) -> str | None:
    """config.json's `model_type` as written, read as plain JSON (no code of the folder's runs); None where there
    is no such file or field."""
    from skipcore.files import json_object

    config = json_object(ref.path / "config.json") if ref.path is not None else None
    kind = (config or {}).get("model_type")
    return kind if isinstance(kind, str) else None


def _check_family(ref: ModelRef, model_type: str | None) -> None:
    """Refused in one line naming the model where skipcore has no adapter for its family."""
    try:
        check_supported(model_type)
    except UserError as e:
        raise ModelError(f"{ref.name}: {e}") from e


def load_model(
    model: str | os.PathLike | ModelRef,
    device: str = "auto",
    dtype: str | torch.dtype = "auto",
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, object]:
    """Model in eval mode on the device, plus its tokenizer (left padding, a pad token set). `model` is a name
    (`skipcore.models.reference`) or what `resolve_model` made of one; `dtype` a name (or torch's dtype) or
    `auto`, for a run that promises nothing (one that does decides first: `model_dtype`)."""
    dev = resolve_device(device)
    dtype = check_dtype(dtype)
    ref = model if isinstance(model, ModelRef) else resolve_model(model)
    config = load_config(ref, trust_remote_code)  # its family checked before any conversion or weights
    if getattr(config, "auto_map", None) and not trust_remote_code:
        import warnings

        warnings.warn(
            f"{ref.name} names code of its own (auto_map in its config), which does not run without "
            f"--trust-remote-code: it runs as transformers' built-in {config.model_type}",
            SkipcoreWarning,
            stacklevel=2,
        )
    dt = resolve_dtype(dtype, dev, config).dtype
    if ref.base is not None:
        return _load_adapter(ref, dev, dt, attn_implementation, trust_remote_code)
    folder = ref.convert()
    source, kw = ref.weights()
    unreadable = (
        [] if folder is None else [f for f in folder.iterdir() if f.is_file() and not os.access(f, os.R_OK)]
    )
    if unreadable:  # transformers says such a file is not there
        raise ModelError(
            f"could not load model {ref.name!r}: {unreadable[0]} may not be read (its permissions)"
        )
    if folder is not None:
        check_tokenizer_files(ref.name, folder)
    try:
        with _quiet_transformers():  # its load report would print before our one line
            net, info = AutoModelForCausalLM.from_pretrained(
                source,
                dtype=dt,
                attn_implementation=attn_implementation,
                trust_remote_code=trust_remote_code,
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # reported below, in one line, instead of a pointer to a report
                **kw,
            )
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **kw)
    except BaseException as e:
        if not _broken_file(e):
            raise
        raise ModelError(f"could not load model {ref.name!r}: {broken_file_reason(e)}") from e
    mismatch = weights_mismatch(info, net.config)
    if mismatch:
        raise ModelError(
            f"could not load model {ref.name!r}: its weights do not match its config.json: {mismatch}; the "
            "config and the weights must come from the same model"
        )
    if not tokenizer("a b")["input_ids"]:
        raise ModelError(f"the tokenizer in {ref.name} turns text into no tokens; is it the model's own?")
    prepare_tokenizer(tokenizer, net)
    if ref.kind == "real":
        net.config._name_or_path = (
            ref.name
        )  # what traces and summaries name: the short name, not a cache path
    return net.to(dev).eval(), tokenizer


def _load_adapter(
    ref: ModelRef, dev: torch.device, dt: torch.dtype, attn_implementation: str, trust_remote_code: bool
) -> tuple[PreTrainedModel, object]:
    """A LoRA folder: its base loaded in float32, the adapter merged, then moved to the device and dtype; the
    folder's own tokenizer where it saved one."""
    base, tokenizer = load_model(ref.base, "cpu", "float32", attn_implementation, trust_remote_code)
    net = merged(base, ref.path)
    tokenizer = adapter_tokenizer(ref.path, tokenizer)
    prepare_tokenizer(tokenizer, net)
    net.config._name_or_path = str(ref.path)
    return net.to(device=dev, dtype=dt).eval(), tokenizer


def adapter_tokenizer(folder: Path, base_tokenizer):
    """The tokenizer an adapter folder saved, or its base's where it saved none."""
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return base_tokenizer
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except BaseException as e:
        if not _broken_file(e):
            raise
        raise ModelError(f"could not load the tokenizer in {folder}: {broken_file_reason(e)}") from e


def _broken_file(e: BaseException) -> bool:
    """A failure of the readers on the model's files: the known kinds of damage, and whatever else
    transformers and a tokenizer file's reader (a Rust extension: a panic included) raise on files they cannot
    build a model from. Ctrl-C, exits and our own refusals pass through."""
    return is_failure(e) and not isinstance(e, UserError)


# the blocks that have transformers' logging quiet now (`_quiet_transformers`), and what the first found
_QUIET = threading.Lock()
_quiet_blocks = 0
_loud_verbosity: int | None = None
_kept_filters = None


@contextmanager
def _quiet_transformers():
    """transformers' warnings off for a block (its logging is global: restored afterwards, by the last of
    overlapping blocks, as threads run them: the dashboard's sessions), and torch's note on a pickle's protocol (a
    file's internals, said before the line that loads or refuses it; a filter added once, as Python keeps it)."""
    import warnings

    from transformers.utils import logging as hf_logging

    global _quiet_blocks, _loud_verbosity, _kept_filters
    with _QUIET:
        if _quiet_blocks == 0:
            _loud_verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()
            _kept_filters = warnings.catch_warnings()  # the filters as they were, put back by the last block
            _kept_filters.__enter__()
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        _quiet_blocks += 1
    try:
        yield
    finally:
        with _QUIET:
            _quiet_blocks -= 1
            if _quiet_blocks == 0:
                hf_logging.set_verbosity(_loud_verbosity)
                _kept_filters.__exit__(None, None, None)


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
    if not isinstance(e, BROKEN_FILE_ERRORS):  # a reader's error of a kind not foreseen: its kind says more
        return f"{type(e).__name__}: {first}"
    return first
