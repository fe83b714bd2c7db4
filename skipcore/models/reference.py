"""What a model's name refers to, decided once: `resolve_model(name)` gives a `ModelRef`.

`--model`, `load_model`, the dashboard's picker and the `models` listing all take a name, which can be a model
folder (shipped in data/models, or the user's), a LoRA adapter folder (it names its base), an installed real
model's short name (`smollm2-135m`; `skipcore.models.catalog`), a GGUF file or a folder holding one, or a hub id.
This module tells which, where the config and the weights are, and whether the weights need a GGUF file converted
first (`skipcore.models.gguf`); the loader (`skipcore.models.loading`) takes the answer and never asks again. A
name that cannot be used is a `ModelError`: one line naming it and what is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from skipcore.errors import ModelError
from skipcore.models import gguf
from skipcore.models.catalog import RealModel, gguf_parts, is_real_name, require_installed
from skipcore.models.lora import CONFIG_FILE as ADAPTER_CONFIG
from skipcore.models.lora import base_name

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
        """Its weights come from a GGUF file whose cached copy is not there yet (an adapter: its base's). Reading
        its config never needs it (`skipcore.models.loading.load_config` reads the GGUF header)."""
        if self.base is not None:
            return self.base.needs_conversion
        return self.cache is not None and not gguf.is_complete(self.cache)

    def gguf_parts(self) -> list[Path]:
        """The GGUF file as it lies: one path, or a chunked package's chunks in order (read, never assembled)."""
        if self.real is not None:
            return gguf_parts(self.real)
        return [self.path] if self.kind == "gguf" and self.path is not None else []

    def convert(self, say: Callable[[str], None] | None = None) -> Path | None:
        """The folder `from_pretrained` reads its weights from, a GGUF file converted into the cache first where it
        is not there yet (`say` hears the progress); None for a hub id."""
        if self.base is not None:
            self.base.convert(say)
            return self.path
        if self.real is not None:
            return gguf.model_folder(self.real, say)
        if self.kind == "gguf":
            return gguf.file_folder(self.path, say)
        return self.path

    def weights(self) -> tuple[str, dict]:
        """What transformers is given for this model's own files, after `convert()`: a local folder (read offline)
        or the hub id."""
        folder = self.cache if self.cache is not None else self.path
        if folder is None:
            return self.name, {}
        return str(folder), {"local_files_only": True}


def resolve_model(name: str | os.PathLike) -> ModelRef:
    """What `name` refers to (see the module docstring), refused in one line where it names nothing usable."""
    name = os.fspath(name) if isinstance(name, os.PathLike) else name
    if not isinstance(name, str) or not name.strip():
        raise ModelError(f"no model named: {name!r}")
    if is_real_name(name):
        model = require_installed(name)
        return ModelRef(name, "real", real=model, cache=gguf.cached_folder_for_model(model))
    local = Path(name).expanduser()
    if local.is_file():
        if local.suffix.lower() != ".gguf":
            raise ModelError(f"model path {name} is a file; pass the model's directory or a .gguf file")
        return ModelRef(name, "gguf", path=local, cache=gguf.cached_folder_for_file(local))
    if local.is_dir():
        return _folder(name, local)
    if _looks_like_path(name):
        raise ModelError(f"model directory not found: {name}")
    return ModelRef(name, "hub")


def _folder(name: str, local: Path) -> ModelRef:
    """A folder: a LoRA adapter (on its base, resolved now), a model, or a folder holding one GGUF file."""
    if (local / ADAPTER_CONFIG).is_file():
        return ModelRef(name, "adapter", path=local, base=resolve_model(base_name(local)))
    if (local / "config.json").is_file():
        return ModelRef(name, "folder", path=local)
    found = sorted(local.glob("*.gguf"))
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:4])
        raise ModelError(f"{name} holds {len(found)} GGUF files ({names}); pass the one to load")
    if not found:
        raise ModelError(f"{name} holds no config.json, adapter_config.json or .gguf file")
    return ModelRef(name, "gguf", path=found[0], cache=gguf.cached_folder_for_file(found[0]))


def _looks_like_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else is meant as a local path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1
