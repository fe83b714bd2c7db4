"""GGUF files as ordinary model folders: dequantized once, cached as safetensors, read fast after that.

transformers reads a GGUF file (`from_pretrained(folder, gguf_file=name)`, with the `gguf` package installed),
dequantizing every tensor to float32, which takes a while for a real model (docs/results.md has the time, and
the cache records it as `convert_seconds`). skipcore does that once and saves the result as a plain model
folder under the cache (`SKIPCORE_CACHE`, default `~/.cache/skipcore`), so every later load is a safetensors
read.

The cache keeps itself honest:
- a folder is written under a staging name and renamed into place, so no reader, and no second process, ever
  sees half of one; a staging folder a killed conversion left is removed by the next one (it is locked while
  its own conversion runs, so a live one is never taken);
- its record (`skipcore_source.json`) lists every file's size and the weights' header digest, checked wherever
  the copy is listed or reused: a damaged copy is refused with the command that rebuilds it (`skipcore models
  --prepare NAME`), never loaded or called ready;
- a user's GGUF file has one cache folder, converted again (the old copy replaced) when the file changes;
- a file is read through its header first: an architecture skipcore does not run, layers other than those it
  declares and a vocabulary without its tokenizer's kind are refused before anything is dequantized; tensors
  that do not fit the model its header declares, before the copy is written; any failure of the readers on a
  damaged file is one line naming it.

What transformers 5.17 makes of a GGUF tokenizer is repaired on the way (tests hold each repair):
- bos and eos are read from the file's own ids (its Llama-architecture converter swaps the two);
- a SentencePiece-BPE vocabulary stored with scores and no merges (Gemma's) becomes a Unigram model, which
  splits common words into pieces the model rarely saw ("capital" -> "c ap it al"); its BPE merges are rebuilt
  from the scores, as llama.cpp tokenizes such a file;
- the BOS token is added where the file says the model expects it (Gemma without `<bos>` repeats itself).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from skipcore.errors import ModelError, UserError, is_failure
from skipcore.models.catalog import RealModel, gguf_source
from skipcore.models.gguf_header import GgufHeader, config_dict, read_header
from skipcore.models.model_cache import (
    MARKER,
    REPLACED,
    cache_status,
    cached_folder_for_file,
    cached_folder_for_model,
    files_record,
    give_default_modes,
    put_in_place,
    remove,
    remove_abandoned_staging,
    source_stamp,
    staging_folder,
)
from skipcore.models.weights_fit import misshapen, weights_mismatch


def ensure_converted(
    target: Path,
    source: Callable[[Path], Path],
    described: dict,
    say: Callable[[str], None] | None = None,
    *,
    name: str,
    label: str,
    file: Path | None = None,
    rebuild: bool = False,
) -> Path:
    """`target`, converting `source(scratch)` into it first where it is not a ready copy (absent, or made from
    an earlier version of the GGUF file `file`); with `rebuild`, a damaged copy is converted again too,
    otherwise it is refused with the command that rebuilds it (`name` is what `skipcore models --prepare`
    takes; `label` is how a failure names the GGUF file).

    `source` returns the GGUF path, given a scratch folder it may write into (a chunked package is assembled
    there). The conversion is written into a staging folder beside `target` and renamed into place; the tool's
    own old copy is replaced, a folder it did not make is never touched. Staging folders that a killed
    conversion left are removed on the way (only those whose conversion no longer runs).
    """
    say = say or _stderr
    remove_abandoned_staging(target.parent)
    status = cache_status(target, file)
    if status.ready:
        remove(target / REPLACED)  # a replacement interrupted just before it cleaned up
        return target
    if status.state == "foreign":
        raise ModelError(f"{status.why}; move it away and retry")
    if status.state == "damaged" and not rebuild:
        raise ModelError(
            f"the cached copy of {name} in {target} is damaged ({status.why}); rebuild it with: "
            f"skipcore models --prepare {_quoted(name)}"
        )
    missing = gguf_reader_missing()
    if missing:  # before the line that says a conversion starts (transformers said it again, a second line)
        raise ModelError(f"converting {label} to safetensors {missing}")
    if status.state != "absent":
        say(f"{target}: {status.why}; converting it again")
    with staging_folder(target) as staging, _said_as_model_error(f"cannot write the model cache {target}"):
        record = {**described, "source": source_stamp(file)} if file is not None else dict(described)
        scratch = staging / ".source"
        scratch.mkdir()
        gguf_path = source(scratch)
        header = checked_header(gguf_path, label)  # a refusal from the header is the only line said
        say(f"converting {gguf_path.name} to a cached safetensors copy in {target} (once)...")
        start = time.perf_counter()
        convert(gguf_path, staging, label, header)
        shutil.rmtree(scratch)
        seconds = round(time.perf_counter() - start, 1)
        record.update(
            gguf=str(gguf_path), convert_seconds=seconds, files=files_record(staging), **_versions()
        )
        (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n")
        give_default_modes(staging)
        put_in_place(staging, target)
    say(f"converted in {seconds:.0f} s; later loads read {target}")
    return target


# the oldest gguf package transformers reads GGUF files with
GGUF_AT_LEAST = (0, 10)


def gguf_reader_missing() -> str:
    """'' where the gguf package transformers reads GGUF files with is installed, else what is missing, as the
    end of a sentence: 'needs the gguf package (0.10 or newer): pip install gguf'."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = tuple(int(part) for part in version("gguf").split(".")[:2] if part.isdigit())
    except PackageNotFoundError:
        found = ()
    if found >= GGUF_AT_LEAST:
        return ""
    wanted = ".".join(map(str, GGUF_AT_LEAST))
    return f"needs the gguf package ({wanted} or newer): pip install 'gguf>={wanted}'"


def checked_header(gguf_path: Path, label: str) -> GgufHeader:
    """The file's header, refused in one line naming `label` where it shows the file cannot make a whole model
    (`_check_header`)."""
    header = read_header([gguf_path], label)
    _check_header(header, label)
    return header


def convert(gguf_path: Path, out: Path, label: str | None = None, header: GgufHeader | None = None) -> None:
    """Dequantize a GGUF model into `out` as config, float32 safetensors and a repaired tokenizer. Its header
    (`header`, where the caller has read and checked it) is read first, so a file the header shows cannot make a
    whole model is refused before anything is dequantized; any failure of the readers on a damaged or unusual file
    is one line naming it (`label`, default its path)."""
    label = label or str(gguf_path)
    header = header or checked_header(gguf_path, label)
    try:
        _dequantized(gguf_path, out, header, label)
    except (ModelError, ImportError):
        raise
    except OSError as e:  # reading the file, or writing its copy
        raise ModelError(f"could not convert {label} into {out.parent}: {e.strerror or e}") from e
    except BaseException as e:
        if not is_failure(e):  # Ctrl-C and exits stay what they are
            raise
        text = str(e).strip()
        first = text.splitlines()[0] if text else type(e).__name__
        raise ModelError(
            f"could not convert {label}: {first} (the file is damaged, or not a model transformers reads)"
        ) from e


def _check_header(header: GgufHeader, label: str) -> None:
    """What the header alone shows a conversion could not make a whole model of: an architecture skipcore does
    not run, layers other than those it declares (transformers would initialise the missing ones at random and
    drop the extra ones without a word), a vocabulary with no tokenizer kind (read as SentencePiece whatever it
    is: every other word unknown) or a BPE one without its merges."""
    from skipcore.adapters import check_supported

    try:
        check_supported(config_dict(header).get("model_type"))
    except UserError as e:
        raise ModelError(f"{label}: {e}") from e
    fields, arch = header.fields, header.fields["general.architecture"]
    declared = fields.get(f"{arch}.block_count")
    held = sorted({int(m.group(1)) for name in header.tensor_names if (m := re.match(r"blk\.(\d+)\.", name))})
    if isinstance(declared, int) and held != list(range(declared)):
        holds = (
            f"layers {held[0]}-{held[-1]}"
            if len(held) > 1 and held == list(range(held[0], held[-1] + 1))
            else _layers(held)
        )
        raise ModelError(
            f"{label}: its header declares {declared} layer{'s' * (declared != 1)} ({arch}.block_count), and its "
            f"tensors are those of {holds}: the file is damaged, or was written wrong"
        )
    if "tokenizer.ggml.tokens" not in fields:
        raise ModelError(f"{label}: its header holds no tokenizer (tokenizer.ggml.tokens)")
    kind = fields.get("tokenizer.ggml.model")
    if not isinstance(kind, str):
        raise ModelError(
            f"{label}: its header has a vocabulary but does not name its tokenizer's kind (tokenizer.ggml.model, "
            "such as gpt2 or llama), which a GGUF file must"
        )
    # a BPE vocabulary without merges, absent or none in it (transformers: "... for a LLaMa tokenizer")
    if kind == "gpt2" and not fields.get("tokenizer.ggml.merges"):
        raise ModelError(f"{label}: its header's gpt2 (BPE) tokenizer has no merges (tokenizer.ggml.merges)")


def _layers(held: list[int]) -> str:
    if not held:
        return "no layer"
    shown = ", ".join(map(str, held[:8])) + (", ..." if len(held) > 8 else "")
    return f"layer{'s' * (len(held) != 1)} {shown}"


def _dequantized(gguf_path: Path, out: Path, header: GgufHeader, label: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        with _one_reader_per_file():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model, info = AutoModelForCausalLM.from_pretrained(
                folder,
                gguf_file=name,
                dtype=torch.float32,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
            )
    except ImportError as e:
        raise ModelError(f"reading a GGUF file needs the gguf package: pip install gguf ({e})") from e
    info["mismatched_keys"] = [*info.get("mismatched_keys", ()), *misshapen(model)]
    mismatch = weights_mismatch(info, model.config, "its header")
    if mismatch:  # refused before its copy is written: the cache never holds a half-random model
        raise ModelError(f"{label}: its tensors do not fit the model its header declares: {mismatch}")
    repair_tokenizer(tokenizer, model.config, _tokenizer_fields(header))
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


# held while a conversion has the `gguf` package's functions replaced (`_one_reader_per_file`)
_CONVERTING = threading.Lock()


@contextmanager
def _one_reader_per_file() -> Iterator[None]:
    """While a file converts, the `gguf` package's reader of a file and its tensor-name map of an architecture are
    made once. transformers makes a reader each time it reads the file (the tokenizer, the config and the
    weights read it four times) and a name map for every tensor: each reader parses every field of the file one
    element at a time (a 49k-token vocabulary: 9 s), so those repeats were half of a conversion's minute. The
    reader maps the file read-only and the map is a table of names, so the ones made first serve every later
    call; the package's own functions are back in place afterwards. One conversion at a time in a process
    (`_CONVERTING`): two at once (threads: the dashboard's sessions) put the package back out of order, leaving
    one's reader in place, whose kept readers served a replaced file's old weights to every later conversion."""
    import functools

    import gguf as package

    with _CONVERTING:
        reader, name_map = package.GGUFReader, package.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def one_reader(path, mode: str = "r"):
            key = (str(Path(path).resolve()), mode)
            if key not in readers:
                readers[key] = reader(path, mode)
            return readers[key]

        package.GGUFReader, package.get_tensor_name_map = one_reader, functools.cache(name_map)
        try:
            yield
        finally:
            package.GGUFReader, package.get_tensor_name_map = reader, name_map


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


def _tokenizer_fields(header: GgufHeader) -> dict:
    """The few tokenizer facts of a GGUF file the repairs need (read from its header, no tensors)."""
    fields = header.fields
    return {
        "model": fields.get("tokenizer.ggml.model"),
        "add_bos": bool(fields.get("tokenizer.ggml.add_bos_token")),
        "has_merges": "tokenizer.ggml.merges" in fields,
        "token_type": fields.get("tokenizer.ggml.token_type") or [],
    }


@contextmanager
def _said_as_model_error(what: str) -> Iterator[None]:
    """An OSError in the block (a full disk, a folder made read-only) as one line saying `what` failed."""
    try:
        yield
    except OSError as e:
        raise ModelError(f"{what}: {e.strerror or e}") from e


def _versions() -> dict:
    import transformers

    return {"transformers": transformers.__version__}


def _quoted(name: str) -> str:
    import shlex

    return shlex.quote(name)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_folder(model: RealModel, say: Callable[[str], None] | None = None, rebuild: bool = False) -> Path:
    """The cached folder of an installed catalog model, converted on first use (and, with `rebuild`, again
    where its copy is damaged)."""
    described = {
        "name": model.name,
        "package": f"{model.package}=={model.version}",
        "licence": model.licence,
    }
    return ensure_converted(
        cached_folder_for_model(model),
        lambda scratch: gguf_source(model, scratch),
        described,
        say,
        name=model.name,
        label=f"{model.name}'s GGUF file {model.gguf}",
        rebuild=rebuild,
    )


def file_folder(
    path: Path, say: Callable[[str], None] | None = None, rebuild: bool = False, name: str | None = None
) -> Path:
    """The cached folder of a user's GGUF file, converted on first use and again after the file changes (and,
    with `rebuild`, where its copy is damaged); `name` is the file as the user named it."""
    return ensure_converted(
        cached_folder_for_file(path),
        lambda scratch: path,
        {"name": path.name},
        say,
        name=name or str(path),
        label=name or str(path),  # as the user named it, as the refusals before a conversion name it
        file=path,
        rebuild=rebuild,
    )
