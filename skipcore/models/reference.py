"""What a model's name refers to, decided once: `resolve_model(name)` gives a `ModelRef`.

`--model`, `load_model`, the dashboard's picker and the `models` listing all take a name, which can be a model
folder (shipped in data/models, or the user's), a LoRA adapter folder (it names its base), an installed real
model's short name (`smollm2-135m`; `skipcore.models.catalog`), a GGUF file or a folder holding one, or a hub id.
This module tells which, where the config and the weights are, and whether the weights need a GGUF file converted
first (`skipcore.models.gguf`); the loader (`skipcore.models.loading`) takes the answer and never asks again. A
name that cannot be used is a `ModelError`: one line naming it and what is wrong.
"""

from __future__ import annotations

import functools
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from skipcore.errors import ModelError, first_line
from skipcore.files import check_path_text, expand_home
from skipcore.models import gguf
from skipcore.models.catalog import REAL_MODELS, RealModel, gguf_parts, is_real_name, require_installed
from skipcore.models.lora import CONFIG_FILE as ADAPTER_CONFIG
from skipcore.models.lora import base_name
from skipcore.models.model_cache import (
    CacheStatus,
    cache_status,
    cached_folder_for_file,
    cached_folder_for_model,
)
from skipcore.models.training_record import SAVE_STAGING, interrupted_save
from skipcore.shipped import shipped_elsewhere

Kind = Literal["folder", "adapter", "real", "gguf", "hub"]


@dataclass(frozen=True)
class ModelRef:
    """A model as named, resolved: its kind and where its files are.

    `folder` a model folder (config.json inside); `adapter` a LoRA folder on `base`; `real` an installed catalog
    model and `gguf` a GGUF file, both read through their cached safetensors copy `cache`; `hub` a hub id, read
    by transformers where there is network or a local hub cache.
    """

    name: str  # what the user named, as given
    kind: Kind
    path: Path | None = None  # the folder (folder, adapter) or the GGUF file (gguf)
    real: RealModel | None = None
    base: ModelRef | None = None  # an adapter's base model
    cache: Path | None = None  # real, gguf: the folder the conversion writes, or wrote

    @property
    def needs_conversion(self) -> bool:
        """Its weights come from a GGUF file whose cached copy is not ready (not there yet, made from an
        earlier version of the file, or damaged; an adapter: its base's). Reading its config never needs it
        (`skipcore.models.loading.load_config` then reads the GGUF header, not the copy)."""
        status = self.cache_status
        return status is not None and not status.ready

    @property
    def cache_status(self) -> CacheStatus | None:
        """The state of its cached copy (`skipcore.models.model_cache`); None for a model read from no GGUF
        file."""
        if self.base is not None:
            return self.base.cache_status
        if self.cache is None:
            return None
        return cache_status(self.cache, self.path if self.kind == "gguf" else None)

    def gguf_parts(self) -> list[Path]:
        """The GGUF file as it lies: one path, or a chunked package's chunks in order (read, never assembled)."""
        if self.real is not None:
            return gguf_parts(self.real)
        return [self.path] if self.kind == "gguf" and self.path is not None else []

    def convert(self, say: Callable[[str], None] | None = None, rebuild: bool = False) -> Path | None:
        """The folder `from_pretrained` reads its weights from, a GGUF file converted into the cache first
        where it is not there yet (`say` hears the progress; `rebuild` converts a damaged copy again, which is
        otherwise refused with the command that does); None for a hub id."""
        if self.base is not None:
            self.base.convert(say, rebuild)
            return self.path
        if self.real is not None:
            return gguf.model_folder(self.real, say, rebuild)
        if self.kind == "gguf":
            return gguf.file_folder(self.path, say, rebuild, name=self.name)
        return self.path

    def weights(self) -> tuple[str, dict]:
        """What transformers is given for this model's own files, after `convert()`: a local folder (read offline)
        or the hub id."""
        folder = self.cache if self.cache is not None else self.path
        if folder is None:
            return self.name, hub_options(self.name)
        return str(folder), {"local_files_only": True}


# seconds to wait for the hub's address to answer: a network that drops packets would otherwise hold a run for
# huggingface_hub's retries (about half a minute), each said in a line, before the same refusal
HUB_PROBE_S = 3.0


def hub_options(name: str) -> dict:
    """What transformers is given for the hub id `name`: nothing where the hub can be reached; where it cannot
    (offline, `HF_HUB_OFFLINE`, or no answer), the local hub cache alone, which holds it or is refused in one
    line now: a name that is no local folder or installed model was most often meant as one (a mistyped path)."""
    from huggingface_hub import constants, try_to_load_from_cache

    if not constants.HF_HUB_OFFLINE and _hub_reachable(constants.ENDPOINT):
        return {}
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError as e:  # no hub id at all ('bad..name'): huggingface_hub's own reason
        raise ModelError(f"could not load model {name!r}: {first_line(e)}") from e
    if isinstance(cached, str):
        return {"local_files_only": True}
    why = (
        "HF_HUB_OFFLINE is set"
        if constants.HF_HUB_OFFLINE
        else f"the hub ({constants.ENDPOINT}) cannot be reached"
    )
    raise ModelError(
        f"{name!r} is no model folder, .gguf file or installed model (`skipcore models`), and {why}: it would "
        "be read from the hub, whose local cache does not hold it"
    )


@functools.cache
def _hub_reachable(endpoint: str) -> bool:
    """Whether the hub's address takes a connection within `HUB_PROBE_S` (asked once a process). Through a proxy
    (`HTTPS_PROXY` and its kin, which huggingface_hub takes) it is not asked: only the proxy may reach out, and the
    hub's own answer is left to the download."""
    url = urllib.parse.urlparse(endpoint)
    if url.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(url.hostname or ""):
        return True
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_S).close()
    except OSError:
        return False
    return True


def resolve_model(name: str | os.PathLike) -> ModelRef:
    """What `name` refers to (see the module docstring), refused in one line where it names nothing usable (the
    refusal's `model` is `name`)."""
    try:
        return _resolve(name, ())
    except ModelError as e:
        if e.model is None and isinstance(name, str | os.PathLike):
            e.model = os.fspath(name)
        raise


def _resolve(name: str | os.PathLike, adapters: tuple[Path, ...]) -> ModelRef:
    """`resolve_model`, inside the adapter folders `adapters` (resolved), each naming the next as its base."""
    name = os.fspath(name) if isinstance(name, os.PathLike) else name
    if not isinstance(name, str) or not name.strip():
        raise ModelError(f"no model named: {name!r}")
    if is_real_name(name):
        model = require_installed(name)
        return ModelRef(name, "real", real=model, cache=cached_folder_for_model(model))
    local = expand_home(check_path_text(name, "model path", ModelError))  # one no file can have: one line
    if local.is_file():
        if local.suffix.lower() != ".gguf":
            raise ModelError(f"model path {name} is a file; pass the model's directory or a .gguf file")
        return ModelRef(name, "gguf", path=local, cache=cached_folder_for_file(local))
    if local.is_dir():
        return _folder(name, local, adapters)
    if _looks_like_path(name) or local.suffix.lower() == ".gguf":  # a .gguf name is a file's, not a hub id
        what = "file" if local.suffix.lower() == ".gguf" else "directory"
        raise ModelError(f"model {what} not found: {name}{shipped_elsewhere(name)}")
    _refuse_near_real_name(name)
    return ModelRef(name, "hub")


def _refuse_near_real_name(name: str) -> None:
    """A name one slip from a real model's short name ('smollm2-135M') is that name mistyped, not a hub id: said at
    once, where the hub would be asked (on an offline machine, a minute of retries before the same refusal)."""
    import difflib

    if "/" in name:  # a hub id with its owner
        return
    near = difflib.get_close_matches(name.lower(), list(REAL_MODELS), n=1, cutoff=0.85)
    if near:
        raise ModelError(
            f"no model named {name!r}; did you mean {near[0]!r}? (short names are as `skipcore models` lists them)"
        )


def _folder(name: str, local: Path, adapters: tuple[Path, ...]) -> ModelRef:
    """A folder: a LoRA adapter (on its base, resolved now), a model, or a folder holding one GGUF file (its
    suffix in any case, as for a file named alone)."""
    if interrupted_save(local):
        raise ModelError(
            f"{local}: a training run's save into it was stopped before it was whole ({SAVE_STAGING} is there), so "
            "its files may not be one model's: run that training again with --overwrite"
        )
    here = local.resolve()
    if here in adapters:  # an adapter that is, or leads back to, its own base
        named_by = adapters[-1] / ADAPTER_CONFIG
        what = (
            "its own folder" if here == adapters[-1] else f"{local}, an adapter whose base leads back to it"
        )
        raise ModelError(
            f"{named_by}: base_model_name_or_path names {what}; "
            "it must name the model the adapter was trained on"
        )
    if (local / ADAPTER_CONFIG).is_file():
        base = base_name(local)
        if _looks_like_path(base) and not Path(base).is_absolute() and not expand_home(base).exists():
            raise ModelError(
                f"{local / ADAPTER_CONFIG}: its base {base} is a relative path, as it was given when the adapter "
                "was trained: run from that folder, or write the base's absolute path into that file"
            )
        try:
            resolved = _resolve(base, (*adapters, here))
            # a hub id is read when loaded: whether it can be is said of the adapter now
            if resolved.kind == "hub":
                hub_options(resolved.name)
        except ModelError as e:
            if str(e).startswith(str(local / ADAPTER_CONFIG)):  # said of this adapter already
                raise
            raise ModelError(f"{local} is a LoRA adapter whose base cannot be used: {e}") from e
        return ModelRef(name, "adapter", path=local, base=resolved)
    if (local / "config.json").is_file():
        return ModelRef(name, "folder", path=local)
    try:
        found = sorted(p for p in local.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
    except OSError as e:
        raise ModelError(f"cannot read the model folder {name}: {e.strerror or e}") from e
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:4])
        raise ModelError(f"{name} holds {len(found)} GGUF files ({names}); pass the one to load")
    if not found:
        raise ModelError(f"{name} holds no config.json, adapter_config.json or .gguf file")
    return ModelRef(name, "gguf", path=found[0], cache=cached_folder_for_file(found[0]))


def _looks_like_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else is meant as a local path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1
