"""What a resumable run (a sweep's results file, a tune's study) records of its inputs, and how a resume is held to
it: the run-wide settings that change its numbers, and the data set by what it holds (`DATA`: the digest of the rows
read, `skipcore.data.rows_digest`), not by the path as typed. A resume whose identity differs is refused in one
line that names each difference, the data sets both by path and by content."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from skipcore.data import Example, rows_digest

DATA = "data_sha256"  # the rows a run read, by content
MODELS = "model_files"  # the files each model is read from, by content (`model_fingerprint`)
# settings an identity names only where they differ from this (so files made before they existed say the same)
IMPLIED = {"attention_dtype": "model"}
# the seed a tune's study draws its trials with: its folder is held to it (a resume with another seed would go
# neither seed's way), its rows are not (a trial's scores do not depend on how it was drawn)
SAMPLER_SEED = "sampler_seed"
# an identity's key that is not the name of the setting that sets it: said by the setting's name
SETTING_OF = {SAMPLER_SEED: "seed"}
# settings files made before they existed do not record: a resume of such a file is not held to them
UNRECORDED = (MODELS, SAMPLER_SEED)
MISSING = "<missing>"
# a model file up to this size is read whole for its fingerprint; a larger one at its two ends, this much each
WHOLE_FILE_BYTES = 64 << 20
END_BYTES = 4 << 20


def with_data(identity: dict, examples: Sequence[Example]) -> dict:
    """`identity` with the digest of the rows the run reads."""
    return {**identity, DATA: rows_digest(examples)}


def with_models(identity: dict, models: Sequence[str | None]) -> dict:
    """`identity` with each named model's file fingerprint: other weights copied to the same path are another
    model, whose rows would sit beside the first one's under one name."""
    return {**identity, MODELS: {m: model_fingerprint(m) for m in models if m}}


# the files of a model folder a load reads (weights, configs, tokenizer): a sweep's table or a note written beside
# them is no other model
MODEL_FILES = (
    "*.safetensors", "*.bin", "*.gguf", "*config.json", "tokenizer*", "special_tokens_map.json", "added_tokens.json",
    "vocab.*", "merges.txt", "*.model", "chat_template.*",
)  # fmt: skip


def _read_by_a_load(name: str) -> bool:
    from fnmatch import fnmatch

    return not name.startswith(".") and any(fnmatch(name, pattern) for pattern in MODEL_FILES)


def model_fingerprint(name: str) -> str | None:
    """A digest of the files a model is read from: a folder's model files (`MODEL_FILES`; an adapter's, and its
    base's), or its GGUF file's parts. A file up to `WHOLE_FILE_BYTES` by its content, a larger one by its size and its first and last
    `END_BYTES` (other weights of one shape differ there; reading gigabytes at every resume would cost more than
    the check). None for a hub id, whose files are transformers' cache's."""
    import hashlib

    from skipcore.models.reference import resolve_model

    files: list[Path] = []
    ref = resolve_model(name)
    while ref is not None:
        if ref.kind in ("folder", "adapter") and ref.path is not None:
            files += sorted(f for f in Path(ref.path).iterdir() if f.is_file() and _read_by_a_load(f.name))
        files += ref.gguf_parts()
        ref = ref.base
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        digest.update(f"{f.name}\0{size}\0".encode())
        with f.open("rb") as handle:
            if size <= WHOLE_FILE_BYTES:
                digest.update(handle.read())
            else:
                digest.update(handle.read(END_BYTES))
                handle.seek(size - END_BYTES)
                digest.update(handle.read(END_BYTES))
    return digest.hexdigest()


def differences(recorded: dict, now: dict) -> list[tuple[str, object, object]]:
    """(setting, its recorded value, this run's) for every setting either identity names that differs; one that
    only one names takes its implied value (`IMPLIED`), else is missing."""
    names = list(now) + [k for k in recorded if k not in now]
    names = [n for n in names if n in recorded or n not in UNRECORDED]
    out = []
    for name in names:
        then, value = (ident.get(name, IMPLIED.get(name, MISSING)) for ident in (recorded, now))
        if then != value:
            out.append((name, then, value))
    return out


# the settings that name a model, each recorded with its files' fingerprint (`MODELS`, keyed by the name as typed)
MODEL_SETTINGS = ("model", "reference_model", "baseline_model")
SPELLED = (
    "the same files, named from another folder: give the name as recorded, or run where the run was made"
)


def _same_content(recorded: dict, now: dict, name: str) -> bool:
    """Whether the data set or model `name` names differs only in how its path is typed (relative to another
    folder): the same rows (`DATA`) or the same files (`MODELS`) in both."""
    if name == "dataset":
        return DATA in recorded and recorded.get(DATA) == now.get(DATA)
    then, files = recorded.get(MODELS), now.get(MODELS)
    if name not in MODEL_SETTINGS or not isinstance(then, dict) or not isinstance(files, dict):
        return False
    fingerprint = then.get(recorded.get(name))
    return fingerprint is not None and fingerprint == files.get(now.get(name))


def said(recorded: dict, now: dict, most: int = 4) -> str:
    """The differences in words (the first `most`): `name='then' (not 'now')`, the data sets by path and digest, a
    path typed from another folder over the same rows or files said as such (the records key rows by the name as
    typed, so such a run is refused, not resumed under a second name)."""
    words = []
    for name, then, value in differences(recorded, now)[:most]:
        if name == DATA:
            words.append(_data_said(recorded, now, then, value))
        elif name == MODELS and isinstance(then, dict) and isinstance(value, dict):
            changed = [
                now.get(s) for s in MODEL_SETTINGS
                if recorded.get(s) and now.get(s) and then.get(recorded[s]) != value.get(now[s])
            ]  # fmt: skip
            if changed:
                words.append(
                    f"{', '.join(changed)} holds other files than the run was made with (other weights)"
                )
        elif _same_content(recorded, now, name):
            words.append(f"{SETTING_OF.get(name, name)}={_typed(then)} (not {_typed(value)}: {SPELLED})")
        elif then is None:  # a setting left to its default then (threads: torch's choice), given now
            words.append(f"{SETTING_OF.get(name, name)} not given (not {_typed(value)})")
        elif value is None:
            words.append(f"{SETTING_OF.get(name, name)}={_typed(then)} (not given now)")
        else:
            words.append(f"{SETTING_OF.get(name, name)}={_typed(then)} (not {_typed(value)})")
    return ", ".join(words)


def _typed(value: object) -> str:
    """A recorded value as it is typed, quoted: a list as its comma list ('linear,power', as a list flag takes it,
    not Python's ['linear', 'power'])."""
    if isinstance(value, list | tuple):
        return repr(",".join(map(str, value)))
    return repr(value)


def differing(recorded: dict, now: dict) -> tuple[str, ...]:
    """The settings `said` names (by the setting's name: `SETTING_OF`), for a refusal's `field`, so that a front
    end says each in its own words (the command line's flags)."""
    return tuple(dict.fromkeys(SETTING_OF.get(name, name) for name, _, _ in differences(recorded, now)))


def _data_said(recorded: dict, now: dict, then: object, value: object) -> str:
    if then == MISSING:
        return f"the rows of {recorded.get('dataset')!r} it read were not recorded by content (an older run)"
    return (
        f"other rows: it read {recorded.get('dataset')!r} with rows sha256 {str(then)[:12]}, this run reads "
        f"{now.get('dataset')!r} with rows sha256 {str(value)[:12]}"
    )
