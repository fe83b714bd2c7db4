"""GGUF files as ordinary model folders: dequantized once, cached as safetensors, read fast after that.

transformers reads a GGUF file (`from_pretrained(folder, gguf_file=name)`, with the `gguf` package installed),
dequantizing every tensor to float32, which takes a while for a real model (docs/results.md has the time, and
the cache records it as `convert_seconds`). skipcore does that once and saves the result as a plain model folder under the cache (`SKIPCORE_CACHE`, default
`~/.cache/skipcore`), so every later load is a safetensors read. The folder is written under a staging name
and renamed into place, so no reader, and no second process, ever sees half of one.

What transformers 5.17 makes of a GGUF tokenizer is repaired on the way (tests hold each repair):
- bos and eos are read from the file's own ids (its Llama-architecture converter swaps the two);
- a SentencePiece-BPE vocabulary stored with scores and no merges (Gemma's) becomes a Unigram model, which
  splits common words into pieces the model rarely saw ("capital" -> "c ap it al"); its BPE merges are
  rebuilt from the scores, as llama.cpp tokenizes such a file;
- the BOS token is added where the file says the model expects it (Gemma without `<bos>` repeats itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from skipcore.errors import ModelError
from skipcore.models.catalog import RealModel, gguf_source
from skipcore.models.gguf_header import read_header

MARKER = "skipcore_source.json"  # written inside the staging folder last: a folder with it is complete


def cache_root() -> Path:
    """Where skipcore keeps what it derives from installed files (converted models)."""
    env = os.environ.get("SKIPCORE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "skipcore"


def models_cache() -> Path:
    return cache_root() / "models"


def cached_folder_for_file(path: Path) -> Path:
    """The cache folder of a user's GGUF file: its name plus a hash of where it is, its size and its time, so an
    edited or replaced file is converted anew."""
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()
    return models_cache() / f"{path.stem}-{hashlib.sha256(ident).hexdigest()[:12]}"


def cached_folder_for_model(model: RealModel) -> Path:
    return models_cache() / f"{model.name}-{model.version}"


def is_complete(folder: Path) -> bool:
    return (folder / MARKER).is_file() and (folder / "config.json").is_file()


def ensure_converted(
    target: Path,
    source: Callable[[Path], Path],
    described: dict,
    say: Callable[[str], None] | None = None,
) -> Path:
    """`target`, converting `source(scratch)` into it first if it is not cached yet.

    `source` returns the GGUF path, given a scratch folder it may write into (a chunked package is assembled
    there); the scratch folder and the staging folder are removed after, and nothing else is.
    """
    if is_complete(target):
        return target
    if target.exists():
        raise ModelError(
            f"{target} exists but is not a complete skipcore model cache (no {MARKER}); move it away and retry"
        )
    say = say or _stderr
    root = target.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=root))
    except OSError as e:
        raise ModelError(f"cannot write the model cache {root}: {e.strerror}; set SKIPCORE_CACHE") from e
    try:
        scratch = staging / ".source"
        scratch.mkdir()
        gguf_path = source(scratch)
        say(f"converting {gguf_path.name} to a cached safetensors copy in {target} (once)...")
        start = time.perf_counter()
        convert(gguf_path, staging)
        shutil.rmtree(scratch)
        seconds = round(time.perf_counter() - start, 1)
        record = {**described, "gguf": str(gguf_path), "convert_seconds": seconds, **_versions()}
        (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n")
        try:
            os.rename(staging, target)
        except OSError:
            if not is_complete(target):  # not another process that finished first
                raise
        say(f"converted in {seconds:.0f} s; later loads read {target}")
        return target
    finally:
        if staging.exists():
            shutil.rmtree(staging)  # our own staging folder only


def convert(gguf_path: Path, out: Path) -> None:
    """Dequantize a GGUF model into `out` as config, float32 safetensors and a repaired tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except ImportError as e:
        raise ModelError(f"reading a GGUF file needs the gguf package: pip install gguf ({e})") from e
    except (ValueError, KeyError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"could not read {gguf_path}: {first}") from e
    fields = _tokenizer_fields(gguf_path)
    repair_tokenizer(tokenizer, model.config, fields)
    # a model read from GGUF carries its quantization origin; the saved copy is plain float weights
    model.config.quantization_config = None
    if hasattr(model.config, "_pre_quantization_dtype"):
        del model.config._pre_quantization_dtype
    model.hf_quantizer = None
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def repair_tokenizer(tokenizer, config, fields: dict) -> None:
    """Special tokens from the file's own ids, BPE merges where transformers built a Unigram model from a BPE
    vocabulary, and BOS added where the file asks for it (see the module docstring)."""
    from tokenizers import processors
    from tokenizers.models import BPE, Unigram

    for role in ("bos", "eos", "unk", "pad"):
        i = getattr(config, f"{role}_token_id", None)
        if isinstance(i, int) and 0 <= i < len(tokenizer):
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(i))
    # transformers' converter sets it for BPE files, where it ignores it (warning on every load): it would strip
    # spaces before punctuation, which a BPE tokenizer encodes
    tokenizer.clean_up_tokenization_spaces = False
    backend = tokenizer.backend_tokenizer
    if isinstance(backend.model, Unigram) and fields.get("model") == "llama" and not fields.get("has_merges"):
        from transformers.convert_slow_tokenizer import generate_merges

        pieces = json.loads(backend.to_str())["model"]["vocab"]  # [piece, score] by id, as the file has them
        vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
        normal = [(p, s) for (p, s), kind in zip(pieces, fields["token_type"], strict=True) if kind == 1]
        backend.model = BPE(
            vocab,
            generate_merges(vocab, normal),
            unk_token=tokenizer.unk_token,
            fuse_unk=True,
            byte_fallback=True,
        )
    if fields.get("add_bos") and tokenizer.bos_token is not None:
        bos = tokenizer.bos_token
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_token_id)]
        )


def _tokenizer_fields(gguf_path: Path) -> dict:
    """The few tokenizer facts of a GGUF file the repairs need (read from its header, no tensors)."""
    fields = read_header([gguf_path], str(gguf_path)).fields
    return {
        "model": fields.get("tokenizer.ggml.model"),
        "add_bos": bool(fields.get("tokenizer.ggml.add_bos_token")),
        "has_merges": "tokenizer.ggml.merges" in fields,
        "token_type": fields.get("tokenizer.ggml.token_type") or [],
    }


def _versions() -> dict:
    import transformers

    return {"transformers": transformers.__version__}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_folder(model: RealModel, say: Callable[[str], None] | None = None) -> Path:
    """The cached folder of an installed catalog model, converted on first use."""
    described = {"name": model.name, "package": f"{model.package}=={model.version}", "licence": model.licence}
    return ensure_converted(
        cached_folder_for_model(model), lambda scratch: gguf_source(model, scratch), described, say
    )


def file_folder(path: Path, say: Callable[[str], None] | None = None) -> Path:
    """The cached folder of a user's GGUF file, converted on first use."""
    return ensure_converted(cached_folder_for_file(path), lambda scratch: path, {"name": path.name}, say)
